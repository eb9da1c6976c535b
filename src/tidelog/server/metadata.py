"""The cluster's metadata: topics, their partitions' replicas, and their configs.

Rules of this file:
- The metadata is a replicated partition (`METADATA_TOPIC`) over every node, run by the same
  core as any topic. Its records are JSON commands; every node applies the committed ones
  in offset order (commit index, then last applied), so every node's image is the same
  function of the same log.
- Applying is pure and idempotent per offset: `MetadataImage.apply` takes one committed
  command and returns what changed, for the broker to act on (create or remove replicas).
- Replicas are placed round-robin, starting at a different node for each partition, so
  leaders spread over the nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tidelog.errors import TidelogError

METADATA_TOPIC = "__cluster_metadata"
TOPIC_NAME_MAX = 249
PARTITIONS_MAX = 10_000
TOPIC_CONFIG_KEYS = frozenset(
    {"min.insync.replicas", "retention.ms", "retention.bytes", "segment.bytes", "cleanup.policy"}
)


class MetadataError(TidelogError):
    """A metadata command that cannot be carried out; `code` names the Kafka error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    replicas: tuple[tuple[int, ...], ...]  # per partition, the node ids holding it
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def min_insync(self) -> int | None:
        value = self.configs.get("min.insync.replicas")
        return int(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class Change:
    """What one applied command changed: topics created or deleted."""

    created: tuple[TopicInfo, ...] = ()
    deleted: tuple[TopicInfo, ...] = ()


def place_replicas(
    nodes: list[int], partitions: int, replication_factor: int, start: int
) -> tuple[tuple[int, ...], ...]:
    """Round-robin placement: partition p starts at node (start + p) and takes the next R."""
    ordered = sorted(nodes)
    return tuple(
        tuple(ordered[(start + p + r) % len(ordered)] for r in range(replication_factor))
        for p in range(partitions)
    )


def validate_topic(
    name: str, partitions: int, replication_factor: int, configs: dict[str, str], nodes: int
) -> None:
    """Raise MetadataError when a topic cannot be created as asked."""
    if not name or len(name) > TOPIC_NAME_MAX or name in (".", ".."):
        raise MetadataError("INVALID_TOPIC_EXCEPTION", f"invalid topic name {name!r}")
    if not all(c.isalnum() or c in "._-" for c in name):
        raise MetadataError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r}: use [a-zA-Z0-9._-]")
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise MetadataError(
            "INVALID_PARTITIONS", f"{partitions} partitions: use 1..{PARTITIONS_MAX}"
        )
    if not 1 <= replication_factor <= nodes:
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"replication factor {replication_factor}: the cluster has {nodes} nodes",
        )
    unknown = set(configs) - TOPIC_CONFIG_KEYS
    if unknown:
        raise MetadataError("INVALID_CONFIG", f"unknown topic configs: {sorted(unknown)}")
    min_insync = configs.get("min.insync.replicas")
    if min_insync is not None and not (
        min_insync.isdigit() and 1 <= int(min_insync) <= replication_factor
    ):
        raise MetadataError(
            "INVALID_CONFIG", f"min.insync.replicas={min_insync}: use 1..{replication_factor}"
        )


def encode_command(command: dict[str, Any]) -> bytes:
    return json.dumps(command, sort_keys=True, separators=(",", ":")).encode()


class MetadataImage:
    """The topics as of the last applied metadata offset."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.applied_offset = 0  # every command below this offset is applied

    def apply(self, offset: int, value: bytes) -> Change:
        """Apply the committed command at `offset`; commands are applied once, in order."""
        assert offset >= self.applied_offset
        self.applied_offset = offset + 1
        command = json.loads(value)
        kind = command.get("type")
        if kind == "create_topic":
            return self._create(command)
        if kind == "delete_topic":
            return self._delete(command)
        return Change()

    def _create(self, command: dict[str, Any]) -> Change:
        name = command["name"]
        if name in self.topics:
            return Change()  # a second create of the same name: the first one won
        replicas = tuple(tuple(int(n) for n in nodes) for nodes in command["replicas"])
        info = TopicInfo(name, replicas, dict(command.get("configs", {})))
        self.topics[name] = info
        return Change(created=(info,))

    def _delete(self, command: dict[str, Any]) -> Change:
        info = self.topics.pop(command["name"], None)
        return Change(deleted=(info,)) if info is not None else Change()
