"""The fields of a metadata command (server/metadata.py), each checked as it is read, and
the rules of topic names: a value that is not what the command needs raises MetadataError,
so a committed command that cannot be applied changes nothing. And the round-robin
placement of new partitions' replicas (`place_replicas`)."""

from __future__ import annotations

import string
from typing import Any, Final

from tidelog.errors import MetadataError
from tidelog.protocol.scram import MECHANISMS
from tidelog.server.reassignment import REPLICAS_MAX

TOPIC_NAME_MAX: Final = 249
TOPIC_NAME_CHARACTERS: Final = frozenset(string.ascii_letters + string.digits + "._-")
QUOTED_MAX: Final = 300  # how much of a client's text an error message or log line quotes
PARTITIONS_MAX: Final = 10_000


def quoted(text: str) -> str:
    """A client's text for a message or a log line: at most QUOTED_MAX characters."""
    return repr(text if len(text) <= QUOTED_MAX else text[:QUOTED_MAX] + "...")


def validate_topic_name(name: str, existing: set[str] | frozenset[str] = frozenset()) -> None:
    """Kafka's rules for topic names (Topic.validate), and its collision rule: '.' and '_'
    collide in metric names, so `a.b` and `a_b` cannot both exist."""
    if not name:
        raise MetadataError("INVALID_TOPIC_EXCEPTION", "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise MetadataError("INVALID_TOPIC_EXCEPTION", 'Topic name cannot be "." or ".."')
    if len(name) > TOPIC_NAME_MAX:
        raise MetadataError(
            "INVALID_TOPIC_EXCEPTION",
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX} characters, "
            f"topic name: {quoted(name)}",
        )
    if not TOPIC_NAME_CHARACTERS.issuperset(name):
        raise MetadataError(
            "INVALID_TOPIC_EXCEPTION",
            f"Topic name {quoted(name)} is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'",
        )
    unified = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == unified:
            raise MetadataError(
                "INVALID_TOPIC_EXCEPTION",
                f"Topic {quoted(name)} collides with existing topic: {other}",
            )


def node_of(value: object) -> int:
    """A node id or an epoch: a non-negative int (bool is none)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise MetadataError("INVALID_REQUEST", f"{value!r} is no node id or epoch")
    return value


def string_of(command: dict[str, Any], key: str) -> str:
    value = command.get(key)
    if not isinstance(value, str):
        raise MetadataError("INVALID_REQUEST", f"{key} is not a string")
    return value


def list_of(command: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = command.get(key)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise MetadataError("INVALID_REQUEST", f"{key} is not a list of objects")
    return value


def mechanism_of(command: dict[str, Any]) -> str:
    mechanism = string_of(command, "mechanism")
    if mechanism not in MECHANISMS:
        raise MetadataError("INVALID_REQUEST", f"unknown SCRAM mechanism {mechanism!r}")
    return mechanism


def placement_of(value: object) -> tuple[tuple[int, ...], ...]:
    """A create command's placement: 1..PARTITIONS_MAX partitions, each the same number of
    distinct node ids (bool is not a node id)."""
    if not isinstance(value, list) or not 1 <= len(value) <= PARTITIONS_MAX:
        raise MetadataError("INVALID_REQUEST", "replicas: a list of 1..10000 partitions")
    placement = []
    for nodes in value:
        if (
            not isinstance(nodes, list)
            or not nodes
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in nodes)
            or len(set(nodes)) != len(nodes)
            or len(nodes) != len(value[0])
        ):
            raise MetadataError("INVALID_REQUEST", f"replicas: bad partition placement {nodes!r}")
        placement.append(tuple(nodes))
    return tuple(placement)


def nodes_of(value: object) -> tuple[int, ...] | None:
    """A list of node ids (None stays None), each named once at most REPLICAS_MAX."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > REPLICAS_MAX:
        raise MetadataError("INVALID_REQUEST", f"{value!r} is no list of node ids")
    return tuple(node_of(node) for node in value)


def place_replicas(
    nodes: list[int], partitions: int, replication_factor: int, start: int
) -> tuple[tuple[int, ...], ...]:
    """Round-robin placement: partition p starts at node (start + p) and takes the next R."""
    ordered = sorted(nodes)
    return tuple(
        tuple(ordered[(start + p + r) % len(ordered)] for r in range(replication_factor))
        for p in range(partitions)
    )
