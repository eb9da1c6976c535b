"""A topic's configs, parsed once, with Kafka's names, types, ranges and messages.

Rules of this file:
- `TopicConfig.parse` is the only reader of a topic's config strings. It runs before a
  CreateTopics is proposed (a bad config is refused with Kafka's INVALID_CONFIG message,
  naming the config and the value) and again when a committed command is applied, so a
  value that somehow got into the metadata log still cannot stop a node.
- Values are parsed as Kafka parses them (`ConfigDef`): trimmed, INT is 32 bits and LONG
  64 bits, no fractions, each within Kafka's range for that config.
- Only what tidelog implements is accepted: `cleanup.policy` takes `delete` (compaction is
  not implemented); any other name is an unknown config.
- `replication.mode` (tidelog's own, docs/isr.md) is `quorum` (the default: the HWM is
  what a majority holds) or `isr` (Kafka's: the HWM is the minimum log end over the
  in-sync replicas the controller committed). It is fixed at creation: `keep_fixed`
  refuses an alteration that changes it. `unclean.leader.election.enable` (Kafka's, false
  by default) matters in ISR mode only; quorum mode never elects a replica that lacks
  committed records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tidelog.core.quorum import majority
from tidelog.errors import MetadataError
from tidelog.wal import WalConfig
from tidelog.wal.segment import SEGMENT_BYTES_MAX

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
MAX_MESSAGE_BYTES_DEFAULT = 1_048_588  # Kafka's message.max.bytes: 1 MiB + 12
SEGMENT_BYTES_MIN = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
CLEANUP_POLICIES = ("delete",)
REPLICATION_MODES = ("quorum", "isr")


def parse_number(name: str, text: str, *, kind: str, low: int, high: int) -> int:
    """One INT or LONG config value, as Kafka's ConfigDef parses and validates it."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if not digits.isdecimal():
        raise MetadataError(
            "INVALID_CONFIG",
            f"Invalid value {text} for configuration {name}: Not a number of type {kind}",
        )
    value = int(stripped)
    if value < low:
        raise MetadataError(
            "INVALID_CONFIG",
            f"Invalid value {text} for configuration {name}: Value must be at least {low}",
        )
    if value > high:
        raise MetadataError(
            "INVALID_CONFIG",
            f"Invalid value {text} for configuration {name}: Value must be no more than {high}",
        )
    return value


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The configs of one topic (Kafka's defaults where none is given)."""

    min_insync_replicas: int | None = None  # None: a majority of the replicas
    retention_ms: int | None = 7 * 24 * 3600 * 1000  # None: keep for ever (-1)
    retention_bytes: int | None = None  # None: no size limit (-1)
    segment_bytes: int = 1024 * 1024 * 1024
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT
    cleanup_policy: str = "delete"
    replication_mode: str = "quorum"  # or "isr"
    unclean_leader_election: bool = False

    @property
    def isr_mode(self) -> bool:
        return self.replication_mode == "isr"

    def min_insync(self, replication_factor: int) -> int:
        """min.insync.replicas in force: as set, else Kafka's 1 in ISR mode and a majority
        of the replicas in quorum mode."""
        if self.min_insync_replicas is not None:
            return self.min_insync_replicas
        return 1 if self.isr_mode else majority(replication_factor)

    @classmethod
    def parse(cls, configs: Mapping[str, str | None], *, replication_factor: int) -> TopicConfig:
        """Parse the given configs; raise MetadataError (INVALID_CONFIG) naming the first
        one that is unknown, null, of the wrong type or out of range."""
        values: dict[str, Any] = {}
        for name, text in sorted(configs.items()):
            parser = _PARSERS.get(name)
            if parser is None:
                raise MetadataError("INVALID_CONFIG", f"Unknown topic config name: {name}")
            if text is None:
                raise MetadataError(
                    "INVALID_CONFIG", f"Null value not supported for topic configs: {name}"
                )
            field_name, value = parser(name, text, replication_factor)
            values[field_name] = value
        return replace(cls(), **values)

    def wal_config(self, *, flush_interval_ms: int | None) -> WalConfig:
        """The partition log's settings."""
        return WalConfig(
            segment_bytes=self.segment_bytes,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            flush_interval_ms=flush_interval_ms,
        )


Parser = Callable[[str, str, int], tuple[str, Any]]


def _min_insync(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
    # Kafka accepts any value >= 1 and then refuses every acks=all write; tidelog refuses
    # the config instead, so a topic can never be created that cannot take one.
    value = parse_number(name, text, kind="INT", low=1, high=INT_MAX)
    if value > replication_factor:
        raise MetadataError(
            "INVALID_CONFIG",
            f"Invalid value {text} for configuration {name}: the replication factor is "
            f"{replication_factor}",
        )
    return "min_insync_replicas", value


def _duration_or_forever(field_name: str, kind: str) -> Parser:
    def parse(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
        del replication_factor
        value = parse_number(name, text, kind=kind, low=-1, high=LONG_MAX)
        return field_name, None if value < 0 else value

    return parse


def _segment_bytes(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
    del replication_factor
    return "segment_bytes", parse_number(
        name, text, kind="INT", low=SEGMENT_BYTES_MIN, high=SEGMENT_BYTES_MAX
    )


def _max_message_bytes(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
    del replication_factor
    return "max_message_bytes", parse_number(name, text, kind="INT", low=0, high=INT_MAX)


def _cleanup_policy(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
    del replication_factor
    policies = [part.strip() for part in text.split(",")]
    for policy in policies:
        if policy not in CLEANUP_POLICIES:
            reason = (
                "log compaction is not implemented; only delete is"
                if policy == "compact"
                else "String must be one of: compact, delete"
            )
            raise MetadataError(
                "INVALID_CONFIG", f"Invalid value {text} for configuration {name}: {reason}"
            )
    return "cleanup_policy", "delete"


def _choice(field_name: str, choices: tuple[str, ...]) -> Parser:
    def parse(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
        del replication_factor
        value = text.strip().lower()
        if value not in choices:
            raise MetadataError(
                "INVALID_CONFIG",
                f"Invalid value {text} for configuration {name}: String must be one of: "
                + ", ".join(choices),
            )
        return field_name, value

    return parse


def _boolean(field_name: str) -> Parser:
    choose = _choice(field_name, ("true", "false"))

    def parse(name: str, text: str, replication_factor: int) -> tuple[str, Any]:
        try:
            return field_name, choose(name, text, replication_factor)[1] == "true"
        except MetadataError:
            raise MetadataError(
                "INVALID_CONFIG",
                f"Invalid value {text} for configuration {name}: Expected value to be "
                "either true or false",
            ) from None

    return parse


def keep_fixed(held: Mapping[str, str], wanted: Mapping[str, str]) -> None:
    """Raise MetadataError (INVALID_CONFIG) when an alteration would change the replication
    mode, which is fixed at creation (an absent value meaning the default)."""
    name = "replication.mode"
    before = TopicConfig.parse({name: held.get(name, "quorum")}, replication_factor=1)
    after = TopicConfig.parse({name: wanted.get(name, "quorum")}, replication_factor=1)
    if before.replication_mode != after.replication_mode:
        raise MetadataError(
            "INVALID_CONFIG",
            f"{name} is fixed when a topic is created: it stays {before.replication_mode}",
        )


_PARSERS: dict[str, Parser] = {
    "min.insync.replicas": _min_insync,
    "retention.ms": _duration_or_forever("retention_ms", "LONG"),
    "retention.bytes": _duration_or_forever("retention_bytes", "LONG"),
    "segment.bytes": _segment_bytes,
    "max.message.bytes": _max_message_bytes,
    "cleanup.policy": _cleanup_policy,
    "replication.mode": _choice("replication_mode", REPLICATION_MODES),
    "unclean.leader.election.enable": _boolean("unclean_leader_election"),
}
TOPIC_CONFIG_NAMES = frozenset(_PARSERS)
