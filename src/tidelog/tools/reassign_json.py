"""kafka-reassign-partitions' JSON files, read and written as Kafka's ReassignPartitionsCommand
does, and its `--generate` proposal. Pure: text in, values out, and back.

Rules of this file:
- A topics-to-move file is `{"version": 1, "topics": [{"topic": "t"}, ...]}`; a
  reassignment file is `{"version": 1, "partitions": [{"topic": "t", "partition": 0,
  "replicas": [2, 3, 4], "log_dirs": ["any", "any", "any"]}, ...]}` (`log_dirs` may be left
  out; tidelog has one log directory per node, so only "any" is taken).
- Anything else raises ClientError with one line naming what is wrong and where: not JSON,
  a missing or mistyped field, a version other than 1, no partitions, a partition named
  twice, an empty replica list or one naming a node twice, log_dirs of another length.
- Written files are Kafka's: one JSON object, partitions sorted by topic and partition,
  every replica list with its log_dirs of "any".
- `--generate` proposes, for each partition of the topics, as many replicas as it has now,
  placed round-robin over the broker list (each partition starting one broker further, so
  leaders spread), as Kafka's rack-unaware assignment does; it never asks more replicas
  than brokers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from tidelog.tools.client_kafka import ClientError

VERSION: Final = 1
ANY_DIR: Final = "any"
Assignment = dict[tuple[str, int], tuple[int, ...]]
"""(topic, partition) -> replicas."""


def _document(text: str, what: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ClientError(f"{what} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ClientError(f"{what} is not a JSON object")
    version = document.get("version", VERSION)
    if version != VERSION:
        raise ClientError(f"{what}: version {version!r} is not supported (only 1)")
    return document


def _int(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ClientError(f"{where} is not a whole number: {value!r}")
    return value


def parse_topics_to_move(text: str) -> list[str]:
    """The topics a topics-to-move-json-file names, in order, each once."""
    document = _document(text, "the topics-to-move file")
    entries = document.get("topics")
    if not isinstance(entries, list) or not entries:
        raise ClientError('the topics-to-move file names no topics ("topics": [{"topic": ...}])')
    topics: list[str] = []
    for index, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise ClientError(f"topics[{index}] has no topic name")
        if topic not in topics:
            topics.append(topic)
    return topics


def parse_reassignment(text: str) -> Assignment:
    """The target of each partition a reassignment-json-file names (see the rules)."""
    document = _document(text, "the reassignment file")
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise ClientError('the reassignment file names no partitions ("partitions": [...])')
    targets: Assignment = {}
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        if not isinstance(entry, dict):
            raise ClientError(f"{where} is not an object")
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ClientError(f"{where} has no topic name")
        partition = _int(entry.get("partition"), f"{where}.partition")
        replicas = entry.get("replicas")
        if not isinstance(replicas, list) or not replicas:
            raise ClientError(f"{where} ({topic}-{partition}) has no replicas")
        nodes = tuple(_int(node, f"{where}.replicas") for node in replicas)
        if len(set(nodes)) != len(nodes):
            raise ClientError(f"{where} ({topic}-{partition}) names a replica twice: {list(nodes)}")
        dirs = entry.get("log_dirs", [ANY_DIR] * len(nodes))
        if not isinstance(dirs, list) or len(dirs) != len(nodes):
            raise ClientError(f"{where} ({topic}-{partition}): log_dirs do not match its replicas")
        if any(d != ANY_DIR for d in dirs):
            raise ClientError(f'{where} ({topic}-{partition}): only log_dirs "any" are supported')
        if (topic, partition) in targets:
            raise ClientError(f"the reassignment file names {topic}-{partition} twice")
        targets[(topic, partition)] = nodes
    return targets


def parse_broker_list(text: str) -> tuple[int, ...]:
    """`--broker-list 1,2,4`: distinct node ids."""
    try:
        brokers = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ClientError(f"--broker-list {text!r} is not a comma-separated list of ids") from None
    if not brokers or len(set(brokers)) != len(brokers):
        raise ClientError(f"--broker-list {text!r} must name distinct node ids")
    return brokers


def assignment_json(assignment: Mapping[tuple[str, int], tuple[int, ...]]) -> str:
    """A reassignment file of `assignment` (see the rules)."""
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "replicas": list(replicas),
            "log_dirs": [ANY_DIR] * len(replicas),
        }
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": VERSION, "partitions": partitions})


def propose(current: Assignment, brokers: tuple[int, ...]) -> Assignment:
    """`--generate`'s proposal (see the rules): ClientError when a partition has more
    replicas than there are brokers."""
    ordered = sorted(brokers)
    proposal: Assignment = {}
    for index, ((topic, partition), replicas) in enumerate(sorted(current.items())):
        factor = len(replicas)
        if factor > len(ordered):
            raise ClientError(
                f"Replication factor: {factor} larger than available brokers: {len(ordered)}."
            )
        proposal[(topic, partition)] = tuple(
            ordered[(index + r) % len(ordered)] for r in range(factor)
        )
    return proposal
