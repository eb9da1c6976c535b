"""The options of the `tidelog` Spark source and sink, parsed and checked on the driver.

They are the options of Spark's own Kafka source and sink, so a job ports by changing the
format name: `kafka.bootstrap.servers`; exactly one of `subscribe`, `subscribePattern` and
`assign`; `startingOffsets`, `endingOffsets` (batch only), `startingTimestamp`,
`startingOffsetsByTimestamp` (with `startingOffsetsByTimestampStrategy`), `endingTimestamp`,
`endingOffsetsByTimestamp`, `failOnDataLoss`, `maxOffsetsPerTrigger`, `minOffsetsPerTrigger`
with `maxTriggerDelay`, `minPartitions`, `maxRecordsPerPartition`, `includeHeaders`,
`kafka.group.id` / `groupIdPrefix`, `kafkaConsumer.pollTimeoutMs`; the sink's `topic`.
Every other `kafka.*` option goes to the librdkafka client as it is (`kafka.client.id`, ...).
Options are case-insensitive. Any other option is ignored, as Spark's Kafka source ignores
it, unless its name is close to one of KNOWN_OPTIONS: then it is a misspelling, refused by
name (`unknown option 'subscrbe' (did you mean 'subscribe'?)`).

Rules of this file: it does no IO; whatever is wrong raises `SparkOptionError` with a
one-line message that names the option and what it takes, before any query starts.

Offsets of one partition are written as Spark's Kafka source writes them, in JSON
`{"topic": {"0": 23, "1": -2}}`, where -2 means earliest and -1 latest (the HWM).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidelog.errors import ConfigError

EARLIEST: Final = -2
LATEST: Final = -1
POLL_TIMEOUT_MS_DEFAULT: Final = 120_000
"""How long an executor waits for records it knows are committed (Spark's default)."""
TRIGGER_DELAY_MS_DEFAULT: Final = 15 * 60 * 1000
GROUP_PREFIX_DEFAULT: Final = "spark-kafka-source"

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


class SparkOptionError(ConfigError):
    """An option of the tidelog source or sink is missing, unknown in its form, or contradicts
    another; the message says which and what it takes."""


@dataclass(frozen=True)
class Subscription:
    """What to read: topic names, a topic pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if topic.startswith("__"):  # internal topics, as Kafka's pattern subscription skips them
            return topic in self.topics
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics or any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: earliest, latest, per-partition offsets (-2 / -1 allowed),
    or timestamps (one for every partition, or per partition)."""

    default: int  # EARLIEST or LATEST, for partitions not named
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp_ms: int | None = None
    timestamps_ms: PartitionOffsets = field(default_factory=dict)
    by_timestamp_fallback_latest: bool = False  # strategy "latest" instead of "error"

    @property
    def by_timestamp(self) -> bool:
        return self.timestamp_ms is not None or bool(self.timestamps_ms)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = TRIGGER_DELAY_MS_DEFAULT
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    group_id: str | None = None
    group_prefix: str = GROUP_PREFIX_DEFAULT
    poll_timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT
    client_config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    client_config: dict[str, str] = field(default_factory=dict)


SUBSCRIPTION_OPTIONS: Final = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
}
KAFKA_PREFIX: Final = "kafka."
KNOWN_OPTIONS: Final = (
    *SUBSCRIPTION_OPTIONS.values(),
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "includeHeaders",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "topic",
    # Spark's own, which reach a source or sink among its options.
    "path",
    "checkpointLocation",
    "asyncProgressTrackingEnabled",
    "asyncProgressTrackingCheckpointIntervalMs",
)
"""The options of Spark's Kafka source and sink (the fetchOffset.* ones are taken and have
no use here), and Spark's options that a source or sink is given too."""
SPELLING_CUTOFF: Final = 0.75
"""How alike (difflib's ratio) an unknown option must be to a known one to be a misspelling:
`subscrbe` and `failOnDataLos` are, `header` and `checkpoint` are not."""
# Kafka client settings the source sets itself, or that make no sense for it.
RESERVED_CLIENT_KEYS: Final = {
    "bootstrap.servers",
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
}


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's options are case-insensitive: one spelling, lower case."""
    return {key.lower(): value for key, value in options.items()}


def check_option_names(options: Mapping[str, str]) -> None:
    """SparkOptionError naming the first option (in sorted order) that is not known but is
    spelled almost like one that is; `kafka.*` options all pass."""
    known = {name.lower(): name for name in KNOWN_OPTIONS}
    for key in sorted(options):
        name = key.lower()
        if name in known or name.startswith(KAFKA_PREFIX):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=SPELLING_CUTOFF)
        if close:
            raise SparkOptionError(f"unknown option {key!r} (did you mean {known[close[0]]!r}?)")


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    check_option_names(options)
    given = lowered(options)
    subscription = parse_subscription(given)
    if streaming and any(k in given for k in ("endingoffsets", "endingtimestamp")):
        raise SparkOptionError("endingOffsets and endingTimestamp are for batch queries only")
    starting = parse_spec(
        given,
        "starting",
        default=LATEST if streaming else EARLIEST,
        allowed=(EARLIEST, LATEST),
    )
    ending = parse_spec(given, "ending", default=LATEST, allowed=(LATEST,))
    latest_only = starting.default == LATEST and not starting.offsets
    if not streaming and latest_only and not starting.by_timestamp:
        raise SparkOptionError("startingOffsets=latest is for streaming queries only")
    if ending.default == EARLIEST:
        raise SparkOptionError("endingOffsets=earliest is not allowed")
    min_rows = positive_int(given, "minoffsetspertrigger")
    max_rows = positive_int(given, "maxoffsetspertrigger")
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise SparkOptionError(
            f"minOffsetsPerTrigger ({min_rows}) is larger than maxOffsetsPerTrigger ({max_rows})"
        )
    return SourceOptions(
        bootstrap=bootstrap_of(given),
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=boolean(given, "failondataloss", default=True),
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=duration_ms(given, "maxtriggerdelay", TRIGGER_DELAY_MS_DEFAULT),
        min_partitions=positive_int(given, "minpartitions"),
        max_records_per_partition=positive_int(given, "maxrecordsperpartition"),
        include_headers=boolean(given, "includeheaders", default=False),
        group_id=given.get("kafka.group.id") or None,
        group_prefix=given.get("groupidprefix", GROUP_PREFIX_DEFAULT),
        poll_timeout_ms=positive_int(given, "kafkaconsumer.polltimeoutms")
        or POLL_TIMEOUT_MS_DEFAULT,
        client_config=client_config(options),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    check_option_names(options)
    given = lowered(options)
    return SinkOptions(
        bootstrap=bootstrap_of(given),
        topic=given.get("topic") or None,
        client_config=client_config(options),
    )


def bootstrap_of(given: Mapping[str, str]) -> str:
    bootstrap = given.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise SparkOptionError("option kafka.bootstrap.servers is required (host:port,...)")
    return bootstrap


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options meant for the client itself, without the prefix."""
    config = {}
    for key, value in options.items():
        if not key.lower().startswith(KAFKA_PREFIX):
            continue
        name = key[len(KAFKA_PREFIX) :]
        if name.lower() not in RESERVED_CLIENT_KEYS:
            config[name] = value
    return config


def parse_subscription(given: Mapping[str, str]) -> Subscription:
    named = [key for key in SUBSCRIPTION_OPTIONS if given.get(key, "").strip()]
    if len(named) != 1:
        found = ", ".join(SUBSCRIPTION_OPTIONS[key] for key in named) or "none"
        raise SparkOptionError(
            f"give exactly one of subscribe, subscribePattern and assign (found: {found})"
        )
    value = given[named[0]].strip()
    if named[0] == "subscribe":
        topics = tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
        return Subscription(topics=topics)
    if named[0] == "subscribepattern":
        try:
            re.compile(value)
        except re.error as error:
            raise SparkOptionError(
                f"subscribePattern is not a regular expression: {error}"
            ) from None
        return Subscription(pattern=value)
    assigned = parse_assign(value)
    return Subscription(assigned=assigned)


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    document = load_json(text, "assign", 'a JSON object such as {"topicA":[0,1]}')
    pairs: set[TopicPartition] = set()
    for topic, partitions in document.items():
        if not isinstance(partitions, list) or not all(type(p) is int for p in partitions):
            raise SparkOptionError(f"assign: topic {topic} needs a list of partition numbers")
        pairs.update((topic, p) for p in partitions)
    if not pairs:
        raise SparkOptionError("assign names no partition")
    return tuple(sorted(pairs))


def parse_spec(
    given: Mapping[str, str], side: str, *, default: int, allowed: tuple[int, ...]
) -> OffsetSpec:
    """`startingOffsets` & co. (side "starting") or `endingOffsets` & co. (side "ending")."""
    strategy = given.get(f"{side}offsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(f"{side}OffsetsByTimestampStrategy takes error or latest")
    fallback = strategy == "latest"
    if f"{side}timestamp" in given:
        timestamp = parse_int(given[f"{side}timestamp"], f"{side}Timestamp")
        return OffsetSpec(default, timestamp_ms=timestamp, by_timestamp_fallback_latest=fallback)
    if f"{side}offsetsbytimestamp" in given:
        stamps = partition_numbers(given[f"{side}offsetsbytimestamp"], f"{side}OffsetsByTimestamp")
        return OffsetSpec(default, timestamps_ms=stamps, by_timestamp_fallback_latest=fallback)
    text = given.get(f"{side}offsets", "").strip()
    if not text:
        return OffsetSpec(default)
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(EARLIEST if text.lower() == "earliest" else LATEST)
    offsets = partition_numbers(text, f"{side}Offsets")
    for (topic, partition), offset in offsets.items():
        if offset < 0 and offset not in allowed:
            raise SparkOptionError(
                f"{side}Offsets: {offset} for {topic}-{partition} is not allowed "
                f"(a partition takes an offset >= 0 or {' or '.join(map(str, allowed))})"
            )
    return OffsetSpec(default, offsets=offsets)


def partition_numbers(text: str, option: str) -> PartitionOffsets:
    document = load_json(text, option, 'earliest, latest, or JSON such as {"t":{"0":23}}')
    numbers: PartitionOffsets = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise SparkOptionError(f"{option}: topic {topic} needs an object of partitions")
        for partition, number in partitions.items():
            if not str(partition).lstrip("-").isdigit() or type(number) is not int:
                raise SparkOptionError(f"{option}: {topic}/{partition} is not partition: number")
            numbers[(topic, int(partition))] = number
    return numbers


def load_json(text: str, option: str, expected: str) -> dict[str, object]:
    try:
        document = json.loads(text)
    except ValueError:
        raise SparkOptionError(f"{option} takes {expected}, not {text!r}") from None
    if not isinstance(document, dict):
        raise SparkOptionError(f"{option} takes {expected}, not {text!r}")
    return document


def parse_int(text: str, option: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise SparkOptionError(f"{option} takes a whole number, not {text!r}") from None


def positive_int(given: Mapping[str, str], key: str) -> int | None:
    if key not in given:
        return None
    value = parse_int(given[key], key)
    if value <= 0:
        raise SparkOptionError(f"{key} takes a number > 0, not {value}")
    return value


def boolean(given: Mapping[str, str], key: str, *, default: bool) -> bool:
    text = given.get(key)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise SparkOptionError(f"{key} takes true or false, not {text!r}")
    return text.strip().lower() == "true"


_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, None: 1000}


def duration_ms(given: Mapping[str, str], key: str, default: int) -> int:
    """A duration as Spark writes them: `15m`, `30s`, `500ms`, or seconds."""
    text = given.get(key)
    if text is None:
        return default
    match = _DURATION.fullmatch(text)
    if match is None:
        raise SparkOptionError(f"{key} takes a duration such as 30s or 15m, not {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
