"""What the Spark source and sink ask of the cluster, through confluent-kafka (librdkafka) only.

The driver asks `Planner` for partitions, watermarks and offsets by timestamp, and commits a
query's offsets to a consumer group. Executors write rows with `Writer`, and read with
`read_range` what `tidelog.spark.direct` (which decodes Fetch answers into columns itself)
hands over: a range, or its rest. Only the Kafka protocol is used, so all of it works
against any Kafka broker too.

Rules of this file:
- A range [start, end) is read only when `end` is at most the HWM the driver saw: the
  broker serves nothing above its HWM, so every record returned is committed, and a record
  above the HWM is never in a Spark result.
- Offsets are not dense: each new leader epoch starts with a control batch that consumers
  skip, so a range ends when an offset >= end arrives or the partition's end (HWM) is at or
  past `end`, never by counting records.
- Every wait has a named maximum; a read that gets nothing for its poll timeout fails the
  task with the partition, the offsets and the wait in its message.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaPartition

from tidelog.errors import TidelogError
from tidelog.spark.options import PartitionOffsets, Subscription, TopicPartition

log = logging.getLogger("tidelog.spark")

REQUEST_TIMEOUT_S: Final = 15.0
CALL_ATTEMPTS: Final = 10
# A leader that just changed: librdkafka does not always call these retriable.
RETRIABLE: Final = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
CALL_RETRY_S: Final = 0.2
POLL_BATCH_MAX: Final = 10_000
"""Records one consume call may return."""
POLL_WAIT_S: Final = 0.5
ARROW_ROWS_MAX: Final = 50_000
"""Rows in one Arrow record batch handed to Spark."""
PRODUCE_FLUSH_TIMEOUT_S: Final = 120.0
PRODUCE_QUEUE_WAIT_S: Final = 0.05
READER_GROUP: Final = "tidelog-spark-reader"
"""The group id executors' consumers carry; they are assigned partitions and never commit."""

QUEUED_MIN_MESSAGES: Final = 1_000_000
READ_DEFAULTS: Final = {
    # A range is read by one consumer from one partition: big fetches, and the next one
    # asked for long before the queue runs dry (librdkafka fetches again only when fewer
    # than queued.min.messages records are queued). The `kafka.*` options override these.
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 128 * 1024,
    "queued.min.messages": QUEUED_MIN_MESSAGES,
}

# Spark's Kafka source: -1 none, 0 CreateTime, 1 LogAppendTime; librdkafka counts from 0 = none.
TIMESTAMP_TYPE_SHIFT: Final = 1

TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")
STAMP_TYPE: Final = operator.itemgetter(0)
STAMP_MS: Final = operator.itemgetter(1)
HEADER_TYPE: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_FIELDS: Final = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestampType", pa.int32()),
]


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The rows' schema: Spark's Kafka source's columns, `headers` last when included."""
    return pa.schema(ARROW_FIELDS + ([("headers", HEADER_TYPE)] if include_headers else []))


class SparkKafkaError(TidelogError):
    """The cluster did not answer as the source or sink needs (no broker, unknown topic, a
    read that got nothing for its poll timeout, an unacknowledged write)."""


class DataLoss(SparkKafkaError):
    """Offsets a query planned to read are gone (below the log start offset, or their
    partition deleted) and failOnDataLoss is true."""


def consumer(bootstrap: str, config: dict[str, str], *, group: str = READER_GROUP) -> Any:
    return Consumer(
        {
            **READ_DEFAULTS,
            **config,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )


def kafka_call(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """`call(*args)`, asked again on a retriable error (a leader that just changed: the
    client's metadata catches up), as Spark's Kafka source retries (fetchOffset.numRetries);
    librdkafka's exception turned into SparkKafkaError."""
    attempts = 1
    while True:
        try:
            return call(*args, **kwargs)
        except KafkaException as error:
            kafka_error = error.args[0]
            retriable = kafka_error.code() in RETRIABLE or kafka_error.retriable()
            if not retriable or attempts >= CALL_ATTEMPTS:
                raise SparkKafkaError(f"{what}: {error.args[0]}") from None
        attempts += 1
        time.sleep(CALL_RETRY_S)


@dataclass
class Planner:
    """The driver's view of the cluster: one consumer, used for metadata, watermarks,
    offsets by time, and committing a query's offsets to its group."""

    bootstrap: str
    config: dict[str, str]
    group: str = READER_GROUP

    def __post_init__(self) -> None:
        self.client = consumer(self.bootstrap, self.config, group=self.group)

    def close(self) -> None:
        self.client.close()

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """Every partition the subscription names, sorted; SparkKafkaError for an assigned
        partition or subscribed topic the cluster does not have."""
        metadata = kafka_call(
            f"metadata from {self.bootstrap}", self.client.list_topics, timeout=REQUEST_TIMEOUT_S
        )
        known = {
            (name, p)
            for name, topic in metadata.topics.items()
            if topic.error is None
            for p in topic.partitions
        }
        if subscription.assigned:
            missing = sorted(set(subscription.assigned) - known)
            if missing:
                raise SparkKafkaError(f"assigned partitions unknown to the cluster: {missing}")
            return sorted(subscription.assigned)
        found = sorted((t, p) for t, p in known if subscription.matches(t))
        absent = [t for t in subscription.topics if not any(t == name for name, _ in found)]
        if absent:
            raise SparkKafkaError(f"unknown topic(s) at {self.bootstrap}: {', '.join(absent)}")
        return found

    def watermarks(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, HWM) of each partition, as ListOffsets answers them."""
        marks = {}
        for topic, partition in partitions:
            low, high = kafka_call(
                f"watermarks of {topic}-{partition}",
                self.client.get_watermark_offsets,
                KafkaPartition(topic, partition),
                timeout=REQUEST_TIMEOUT_S,
            )
            marks[(topic, partition)] = (int(low), int(high))
        return marks

    def offsets_for_times(self, stamps: PartitionOffsets) -> dict[TopicPartition, int | None]:
        """The first offset with a timestamp >= the given one, or None where there is none."""
        if not stamps:
            return {}
        asked = [KafkaPartition(t, p, ms) for (t, p), ms in sorted(stamps.items())]
        found = kafka_call(
            "offsets by timestamp", self.client.offsets_for_times, asked, timeout=REQUEST_TIMEOUT_S
        )
        answer: dict[TopicPartition, int | None] = {}
        for tp in found:
            if tp.error is not None:
                raise SparkKafkaError(
                    f"offsets by timestamp of {tp.topic}-{tp.partition}: {tp.error}"
                )
            answer[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return answer

    def commit(self, offsets: PartitionOffsets) -> None:
        """Commit `offsets` (the next offset to read of each partition) to this planner's
        group, as a consumer outside the group's generations does (generation -1)."""
        if not offsets:
            return
        committed = [KafkaPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        kafka_call(
            f"commit to group {self.group}",
            self.client.commit,
            offsets=committed,
            asynchronous=False,
        )


# Reading one range, on an executor


@dataclass(frozen=True)
class RangeRead:
    bootstrap: str
    config: dict[str, str]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


class Columns:
    """The rows of one Arrow record batch as they are gathered.

    Each column is one flat list, extended by `map` over librdkafka's C accessors, so a
    record costs no Python frame; the Arrow arrays are built once per batch in `take`."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic, self.partition, self.include_headers = topic, partition, include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int | None] = []  # a record always has one
        self.timestamps_ms: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    def add(self, messages: list[Any]) -> None:
        """Append records (no error among them)."""
        self.keys.extend(map(Message.key, messages))
        self.values.extend(map(Message.value, messages))
        self.offsets.extend(map(Message.offset, messages))
        stamps = list(map(Message.timestamp, messages))  # (librdkafka's type, ms)
        self.types.extend(map(STAMP_TYPE, stamps))
        self.timestamps_ms.extend(map(STAMP_MS, stamps))
        if self.include_headers:
            self.headers.extend([list(m.headers() or ()) for m in messages])

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self) -> pa.RecordBatch:
        count = len(self.offsets)
        assert len(self.values) == count
        assert len(self.timestamps_ms) == count
        stamps_ms = pa.array(self.timestamps_ms, pa.int64())
        types = pa.array(self.types, pa.int32())
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.array(self.offsets, pa.int64()),
            pc.multiply_checked(stamps_ms, 1000).cast(TIMESTAMP_TYPE),
            pc.subtract(types, pa.scalar(TIMESTAMP_TYPE_SHIFT, pa.int32())),
        ]
        if self.include_headers:
            arrays.append(
                pa.array(
                    [[{"key": k, "value": v} for k, v in h] for h in self.headers], HEADER_TYPE
                )
            )
        batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.include_headers))
        self.clear()
        return batch


def read_range(read: RangeRead) -> Iterator[pa.RecordBatch]:
    """The records of [start, end) of one partition, as Arrow record batches."""
    if read.start >= read.end:
        return
    where = f"{read.topic}-{read.partition}"
    # Queue no more ahead than the range holds: a range cut out of a partition
    # (minPartitions) would otherwise have librdkafka fetch far past its end.
    queued_min = min(QUEUED_MIN_MESSAGES, read.end - read.start)
    client = consumer(read.bootstrap, {"queued.min.messages": str(queued_min), **read.config})
    try:
        client.assign([KafkaPartition(read.topic, read.partition, read.start)])
        columns = Columns(read.topic, read.partition, read.include_headers)
        position = read.start
        waited_since = time.monotonic()
        while position < read.end:
            with collector_paused():
                position, count = gather(client, read, columns, position)
            if count:
                waited_since = time.monotonic()
            elif time.monotonic() - waited_since > read.poll_timeout_ms / 1000:
                raise SparkKafkaError(
                    f"{where}: no records for {read.poll_timeout_ms} ms at offset {position}; "
                    f"[{read.start}, {read.end}) was planned as committed"
                )
            if len(columns) >= ARROW_ROWS_MAX:
                yield columns.take()
        if len(columns):
            yield columns.take()
    finally:
        client.close()


def gather(client: Any, read: RangeRead, columns: Columns, position: int) -> tuple[int, int]:
    """One consume call's records of the range into `columns`: the position after them
    and how many there were. The messages are released before it returns."""
    messages = client.consume(POLL_BATCH_MAX, POLL_WAIT_S)
    records, position = settle(client, read, messages, position)
    columns.add(records)
    return position, len(records)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block, as it was after it.

    librdkafka's Message objects are tracked by the collector, and a consume call makes
    up to POLL_BATCH_MAX of them at once: each 700 allocations start a collection that
    walks every young message, and the survivors soon start full ones, which cost as much
    as the consume itself (twice the CPU per record, measured). Messages hold no
    references to other objects, so they never form cycles; their memory goes back when
    `gather` returns, by reference counting, before the collector is on again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def settle(
    client: Any, read: RangeRead, messages: list[Any], position: int
) -> tuple[list[Any], int]:
    """The records of `messages` inside the range, and the position after them."""
    errors = list(map(Message.error, messages))
    records = messages
    # KafkaError is always true and cannot be compared with None.
    if any(errors):
        records = [m for m, error in zip(messages, errors, strict=True) if error is None]
        for message, error in zip(messages, errors, strict=True):
            if error is None:
                continue
            if error.code() == KafkaError._PARTITION_EOF:
                # The fetch position reached the HWM: nothing below it is left to read.
                position = max(position, min(message.offset(), read.end))
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                position = skip_lost(client, read, position, str(error))
            else:
                raise SparkKafkaError(f"reading {read.topic}-{read.partition}: {error}")
    if records and records[-1].offset() >= read.end - 1:
        records = [m for m in records if m.offset() < read.end]
        return records, read.end
    if records:
        position = max(position, records[-1].offset() + 1)
    return records, position


def skip_lost(client: Any, read: RangeRead, position: int, reason: str) -> int:
    """The planned offset is below the log start now (DeleteRecords or retention ran since):
    DataLoss, or with failOnDataLoss=false, go on from the log start."""
    where = f"{read.topic}-{read.partition}"
    low, _ = kafka_call(
        f"watermarks of {where}",
        client.get_watermark_offsets,
        KafkaPartition(read.topic, read.partition),
        timeout=REQUEST_TIMEOUT_S,
    )
    if read.fail_on_data_loss:
        raise DataLoss(
            f"{where}: offset {position} is gone (log start offset is now {low}): {reason}. "
            "Records were deleted before the query read them; set failOnDataLoss=false to "
            "skip them"
        )
    log.warning(
        "%s: offsets %d..%d were deleted before they were read; skipped", where, position, low - 1
    )
    resumed = min(max(int(low), position), read.end)
    client.assign([KafkaPartition(read.topic, read.partition, resumed)])
    return resumed


# Writing, on an executor


@dataclass
class Writer:
    """An acks=all idempotent producer that knows how many of its sends were acknowledged."""

    bootstrap: str
    config: dict[str, str]

    def __post_init__(self) -> None:
        self.producer = Producer(
            {
                "linger.ms": 5,
                **self.config,
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "log_level": 3,
            }
        )
        self.sent = 0
        self.acknowledged = 0
        self.errors: list[str] = []

    def on_delivery(self, error: Any, message: Message) -> None:
        if error is None:
            self.acknowledged += 1
        else:
            self.errors.append(f"{message.topic()}: {error}")

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        if headers:
            extra["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, value, key, on_delivery=self.on_delivery, **extra)
                break
            except BufferError:  # the local queue is full: let acknowledgements drain it
                self.producer.poll(PRODUCE_QUEUE_WAIT_S)
        self.sent += 1

    def finish(self) -> int:
        """Wait for every acknowledgement; SparkKafkaError unless all were acknowledged."""
        left = self.producer.flush(PRODUCE_FLUSH_TIMEOUT_S)
        if self.errors or left:
            waiting = f"{left} unanswered after {PRODUCE_FLUSH_TIMEOUT_S:g} s; " if left else ""
            raise SparkKafkaError(
                f"{self.sent - self.acknowledged} of {self.sent} records not acknowledged: "
                f"{waiting}{'; '.join(self.errors[:3])}"
            )
        return self.acknowledged
