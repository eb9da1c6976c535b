"""Producing lines and consuming records with kafka-python's KafkaProducer and KafkaConsumer.

Rules:

- The topic (and partition) is checked with an admin Metadata request first, so an unknown
  topic is a clear `UnknownTopic` at once rather than a metadata wait of `max_block_ms`.
- `produce_lines` sends every line, flushes, then reads every send's outcome: a failed send
  is counted and described, never raised; the caller decides the exit status.
- acks=all turns idempotence on (the producer's default in kafka-python 3); acks 0 and 1
  turn it off, since Kafka allows idempotence only with acks=all.
- `consume_records` stops after `max_messages` records or when none arrived for
  `idle_timeout_ms`. Without a group it assigns partitions itself; with one it subscribes,
  and commits what it has yielded after each poll and once more on the way out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.tools.client_kafka import (
    BOOTSTRAP_TIMEOUT_MS,
    KAFKA_CLIENT_ID,
    REQUEST_TIMEOUT_MS,
    ClientError,
    ClientSettings,
    KafkaConsumer,
    KafkaProducer,
    OffsetAndMetadata,
    TopicPartition,
    admin_client,
    answering,
    describe_kafka_error,
    kafka_errors,
    topic_partitions,
)

DELIVERY_TIMEOUT_MS: Final = 30_000
"""How long one record may take from `send` to acknowledged, retries included."""
FLUSH_TIMEOUT_S: Final = 60.0
"""How long the final flush may take."""
PENDING_SENDS_MAX: Final = 10_000
"""Sends in flight before the producer flushes and settles them (bounds memory)."""
POLL_INTERVAL_MS_MAX: Final = 500
"""The longest single poll; the idle timeout is checked between polls."""
ERRORS_KEPT_MAX: Final = 20
"""How many distinct send errors a summary keeps."""

ACKS: Final[dict[str, int | str]] = {"all": "all", "-1": "all", "1": 1, "0": 0}


@dataclass(slots=True)
class ProduceSummary:
    """What happened to the lines given to `produce_lines`."""

    produced: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    last_offsets: dict[int, int] = field(default_factory=dict)

    def record_error(self, message: str) -> None:
        self.failed += 1
        if message not in self.errors and len(self.errors) < ERRORS_KEPT_MAX:
            self.errors.append(message)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record as the consumer returned it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    """Where `consume_records` starts and when it stops."""

    topic: str
    partition: int | None = None
    from_beginning: bool = False
    offset: int | None = None
    max_messages: int | None = None
    idle_timeout_ms: int = 10_000
    group: str | None = None


def split_line(line: bytes, key_separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line. Raises ClientError when the separator is missing."""
    if key_separator is None:
        return None, line
    key, found, value = line.partition(key_separator)
    if not found:
        raise ClientError(f"no key separator {key_separator.decode(errors='replace')!r}")
    return key, value


def _new_producer(client: ClientSettings, acks: str) -> Any:
    if acks not in ACKS:
        raise ClientError(f"bad acks {acks!r} (want all, 1 or 0)")
    return KafkaProducer(
        **answering(client).kafka_python,
        client_id=KAFKA_CLIENT_ID,
        acks=ACKS[acks],
        enable_idempotence=ACKS[acks] == "all",
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_block_ms=REQUEST_TIMEOUT_MS,
        allow_auto_create_topics=False,
    )


def _settle(producer: Any, pending: list[Any], summary: ProduceSummary) -> None:
    """Flush, then count each pending send as produced or failed."""
    producer.flush(timeout=FLUSH_TIMEOUT_S)
    for future in pending:
        if not future.is_done:
            summary.record_error("not acknowledged before the flush timed out")
        elif future.exception is not None:
            summary.record_error(describe_kafka_error(future.exception))
        else:
            metadata = future.value
            summary.produced += 1
            summary.last_offsets[metadata.partition] = max(
                metadata.offset, summary.last_offsets.get(metadata.partition, -1)
            )
    pending.clear()


def produce_lines(
    client: ClientSettings,
    topic: str,
    lines: Iterable[bytes],
    *,
    acks: str = "all",
    key_separator: bytes | None = None,
    partition: int | None = None,
) -> ProduceSummary:
    """Send each line as one record, flush, and report what was acknowledged.

    A line without the key separator is counted as failed and not sent.
    """
    with admin_client(client) as admin:
        topic_partitions(admin, topic, partition)
    summary = ProduceSummary()
    with kafka_errors(client):
        producer = _new_producer(client, acks)
        pending: list[Any] = []
        try:
            for number, line in enumerate(lines, start=1):
                try:
                    key, value = split_line(line, key_separator)
                except ClientError as error:
                    summary.record_error(f"line {number}: {error}")
                    continue
                pending.append(producer.send(topic, value=value, key=key, partition=partition))
                if len(pending) >= PENDING_SENDS_MAX:
                    _settle(producer, pending, summary)
            _settle(producer, pending, summary)
        finally:
            producer.close(timeout=FLUSH_TIMEOUT_S)
    return summary


def _new_consumer(client: ClientSettings, options: ConsumeOptions) -> Any:
    return KafkaConsumer(
        **answering(client).kafka_python,
        client_id=KAFKA_CLIENT_ID,
        group_id=options.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if options.from_beginning else "latest",
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        fetch_max_wait_ms=POLL_INTERVAL_MS_MAX,
        allow_auto_create_topics=False,
    )


def _position_consumer(consumer: Any, options: ConsumeOptions, partitions: list[int]) -> None:
    """Subscribe (with a group) or assign and seek (without one)."""
    if options.group is not None:
        consumer.subscribe([options.topic])
        return
    assigned = [TopicPartition(options.topic, number) for number in partitions]
    consumer.assign(assigned)
    if options.offset is not None:
        for tp in assigned:
            consumer.seek(tp, options.offset)
    elif options.from_beginning:
        consumer.seek_to_beginning(*assigned)
    else:
        consumer.seek_to_end(*assigned)


def consume_records(client: ClientSettings, options: ConsumeOptions) -> Iterator[ConsumedRecord]:
    """Yield records of `options.topic` until `max_messages` or `idle_timeout_ms` of silence."""
    if options.group is not None and (options.partition is not None or options.offset is not None):
        raise ClientError("--group cannot be combined with --partition or --offset")
    with admin_client(client) as admin:
        partitions = topic_partitions(admin, options.topic, options.partition)
    needs = "consumer groups" if options.group is not None else "this request"
    with kafka_errors(client, needs=needs):
        consumer = _new_consumer(client, options)
        committed: dict[Any, Any] = {}
        try:
            _position_consumer(consumer, options, partitions)
            yield from _poll_loop(consumer, options, committed)
        finally:
            if options.group is not None and committed:
                consumer.commit(committed)
            consumer.close(autocommit=False)


def _poll_loop(
    consumer: Any, options: ConsumeOptions, committed: dict[Any, Any]
) -> Iterator[ConsumedRecord]:
    """Poll until enough records or enough silence; `committed` gathers what to commit:
    each partition's position once everything polled was yielded (so control batches the
    consumer skipped count as consumed and a drained partition shows lag 0), else the
    offset after the last record yielded."""
    count = 0
    idle_deadline = time.monotonic() + options.idle_timeout_ms / 1000
    while options.max_messages is None or count < options.max_messages:
        remaining_ms = int((idle_deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return
        polled = consumer.poll(timeout_ms=min(remaining_ms, POLL_INTERVAL_MS_MAX))
        records = sorted(
            (record for batch in polled.values() for record in batch),
            key=lambda r: (r.partition, r.offset),
        )
        whole = options.max_messages is None or count + len(records) <= options.max_messages
        if not whole:
            records = records[: options.max_messages - count]  # type: ignore[operator]
        for record in records:
            count += 1
            committed[TopicPartition(record.topic, record.partition)] = OffsetAndMetadata(
                record.offset + 1, "", -1
            )
            yield ConsumedRecord(
                record.topic,
                record.partition,
                record.offset,
                record.timestamp,
                record.key,
                record.value,
            )
        moved = whole and options.group is not None and _commit_positions(consumer, committed)
        if records:
            idle_deadline = time.monotonic() + options.idle_timeout_ms / 1000
        if options.group is not None and (records or moved):
            consumer.commit(dict(committed))


def _commit_positions(consumer: Any, committed: dict[Any, Any]) -> bool:
    """Set each assigned partition's commit to the consumer's position where that is past
    it (everything before was yielded, or was a control batch); whether any moved."""
    moved = False
    for partition in consumer.assignment():
        position = consumer.position(partition)
        known = committed.get(partition)
        if position is not None and (known is None or position > known.offset):
            committed[partition] = OffsetAndMetadata(position, "", -1)
            moved = True
    return moved
