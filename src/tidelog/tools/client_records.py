"""Producing lines and consuming records with kafka-python's KafkaProducer and KafkaConsumer.

Rules:

- The topic (and partition) is checked with an admin Metadata request first, so an unknown
  topic is a clear `UnknownTopic` at once rather than a metadata wait of `max_block_ms`.
- `produce_lines` sends every line, flushes, then reads every send's outcome: a failed send
  is counted and described, never raised; the caller decides the exit status.
- acks=all turns idempotence on (the producer's default in kafka-python 3); acks 0 and 1
  turn it off, since Kafka allows idempotence only with acks=all.
- Every record of one `produce_lines` call carries the same headers and timestamp (none:
  the producer's clock); a line refused before it is sent (too long, no key separator) is
  counted and described like a failed send.
- `consume_records` follows the log until `max_messages` records, `idle_timeout_ms` without
  a record (when given), or `stop()` says so; `stop` is asked between polls, so a stop takes
  at most POLL_INTERVAL_MS_MAX, and a poll's records are all yielded first (as Kafka's
  console consumer prints what it fetched before it notices its wakeup). Without a group
  it assigns partitions itself; with one it subscribes, asks Metadata before its first
  poll (`metadata_before_joining`), and commits what the caller took (a record counts
  once the caller asks for the next) after each poll and once more on the way out.
- A start `offset` outside [log start offset, HWM] (ListOffsets earliest and latest) is
  reported through `warn` and replaced by the HWM: auto.offset.reset=latest, which is what
  kafka-console-consumer does with `--offset` (it resets to earliest only with
  `--from-beginning`, which excludes `--offset`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

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
"""The longest single poll; the idle timeout and `stop` are checked between polls."""
REQUEST_BYTES_MIN: Final = 1024 * 1024
"""kafka-python's max_request_size default, kept unless a record may be larger."""
RECORD_OVERHEAD_BYTES_MAX: Final = 1024
"""Room for a batch's and a record's framing beside the record's key, value and headers."""
ERRORS_KEPT_MAX: Final = 20
"""How many distinct send errors a summary keeps."""

ACKS: Final[dict[str, int | str]] = {"all": "all", "-1": "all", "1": 1, "0": 0}
TIMESTAMP_TYPES: Final = {0: "CreateTime", 1: "LogAppendTime"}
"""kafka-python's timestamp_type numbers, by Kafka's TimestampType names."""
NO_TIMESTAMP_TYPE: Final = "NoTimestampType"

Header: TypeAlias = tuple[str, bytes | None]
"""A record header: its key (UTF-8 text in the protocol) and its value (null allowed)."""


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
    headers: tuple[Header, ...] = ()
    timestamp_type: str = "CreateTime"


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    """Where `produce_lines` sends and what every record carries besides its line."""

    topic: str
    acks: str = "all"
    key_separator: bytes | None = None
    partition: int | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None
    """CreateTime of every record; None: the producer's clock at each send."""
    line_bytes_max: int = REQUEST_BYTES_MIN
    """The longest line the caller lets through (the producer must take such a record)."""


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    """Where `consume_records` starts and when it stops."""

    topic: str
    partition: int | None = None
    from_beginning: bool = False
    offset: int | None = None
    max_messages: int | None = None
    idle_timeout_ms: int | None = None
    """Stop when no record came for this long; None: follow until stopped."""
    group: str | None = None


def split_line(line: bytes, key_separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line. Raises ClientError when the separator is missing."""
    if key_separator is None:
        return None, line
    key, found, value = line.partition(key_separator)
    if not found:
        raise ClientError(f"no key separator {key_separator.decode(errors='replace')!r}")
    return key, value


def request_bytes_max(options: ProduceOptions) -> int:
    """The producer's max_request_size: its default, or room for the longest line's record
    with its headers; the topic's max.message.bytes still decides on the broker."""
    headers_bytes = sum(len(key.encode()) + len(value or b"") for key, value in options.headers)
    needed = options.line_bytes_max + headers_bytes + RECORD_OVERHEAD_BYTES_MAX
    return max(REQUEST_BYTES_MIN, needed)


def _new_producer(client: ClientSettings, options: ProduceOptions) -> Any:
    if options.acks not in ACKS:
        raise ClientError(f"bad acks {options.acks!r} (want all, 1 or 0)")
    acks = ACKS[options.acks]
    return KafkaProducer(
        **answering(client).kafka_python,
        client_id=KAFKA_CLIENT_ID,
        acks=acks,
        enable_idempotence=acks == "all",
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_block_ms=REQUEST_TIMEOUT_MS,
        max_request_size=request_bytes_max(options),
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
    client: ClientSettings, options: ProduceOptions, lines: Iterable[bytes | ClientError]
) -> ProduceSummary:
    """Send each line as one record, flush, and report what was acknowledged.

    `lines` holds each line, or the error that refused it (a line too long); such a line,
    and one without the key separator, is counted as failed and not sent.
    """
    with admin_client(client) as admin:
        topic_partitions(admin, options.topic, options.partition)
    summary = ProduceSummary()
    headers = list(options.headers) or None
    with kafka_errors(client):
        producer = _new_producer(client, options)
        pending: list[Any] = []
        try:
            for number, line in enumerate(lines, start=1):
                try:
                    if isinstance(line, ClientError):
                        raise line
                    key, value = split_line(line, options.key_separator)
                except ClientError as error:
                    summary.record_error(f"line {number}: {error}")
                    continue
                sent = producer.send(
                    options.topic,
                    value=value,
                    key=key,
                    headers=headers,
                    partition=options.partition,
                    timestamp_ms=options.timestamp_ms,
                )
                pending.append(sent)
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


def never() -> bool:
    return False


def offset_out_of_range(offset: int, *, earliest: int, latest: int) -> bool:
    """Whether a fetch at `offset` would be refused with OFFSET_OUT_OF_RANGE: below the log
    start offset, or past the HWM (the HWM itself is the next record's place)."""
    return offset < earliest or offset > latest


def _seek_offset(consumer: Any, tp: Any, offset: int, warn: Callable[[str], None]) -> None:
    """Seek `tp` to `offset`, or to the HWM after a warning when it is out of range."""
    earliest = int(consumer.beginning_offsets([tp])[tp])
    latest = int(consumer.end_offsets([tp])[tp])
    if not offset_out_of_range(offset, earliest=earliest, latest=latest):
        consumer.seek(tp, offset)
        return
    warn(
        f"--offset {offset} is out of range for partition {tp.topic}-{tp.partition}: its "
        f"offsets run from {earliest} (earliest) to {latest} (latest); starting at the "
        f"latest, {latest} (auto.offset.reset=latest, as kafka-console-consumer does)"
    )
    consumer.seek(tp, latest)


def metadata_before_joining(consumer: Any) -> set[str]:
    """The topics of a Metadata answer for every topic, asked by a subscribed kafka-python
    consumer before its first poll joins the group: its metadata then holds the partitions
    of the topics it subscribed to (when the answer lists them), which a group leader
    assigns from.

    kafka-python 3.0.12 bootstraps without topics and asks Metadata for the subscribed ones
    retry_backoff_ms later, so its first poll may join before that answer (a JoinGroup takes
    a few ms): a leader with no partitions for a topic assigns none, then rejoins when the
    answer arrives, asked by that metadata change alone. A rejoin so asked that completes
    after the poll that sent it has returned is dropped (the next poll sees nothing to
    rejoin for: the leader's snapshot is current since it assigned), so the member never
    takes its assignment nor heartbeats again, and the group drops it at its session
    timeout. Kafka brokers with group.initial.rebalance.delay.ms=0 see the same."""
    return set(consumer.topics())


def _position_consumer(
    consumer: Any, options: ConsumeOptions, partitions: list[int], warn: Callable[[str], None]
) -> None:
    """Subscribe (with a group) or assign and seek (without one)."""
    if options.group is not None:
        consumer.subscribe([options.topic])
        metadata_before_joining(consumer)
        return
    assigned = [TopicPartition(options.topic, number) for number in partitions]
    consumer.assign(assigned)
    if options.offset is not None:
        for tp in assigned:
            _seek_offset(consumer, tp, options.offset, warn)
    elif options.from_beginning:
        consumer.seek_to_beginning(*assigned)
    else:
        consumer.seek_to_end(*assigned)


def consume_records(
    client: ClientSettings,
    options: ConsumeOptions,
    *,
    stop: Callable[[], bool] = never,
    warn: Callable[[str], None],
) -> Generator[ConsumedRecord, None, None]:
    """Yield records of `options.topic` until `max_messages`, `idle_timeout_ms` of silence
    or `stop()`; `warn` gets what the user should know that is no error (a start offset
    out of range)."""
    if options.group is not None and (options.partition is not None or options.offset is not None):
        raise ClientError("--group cannot be combined with --partition or --offset")
    with admin_client(client) as admin:
        partitions = topic_partitions(admin, options.topic, options.partition)
    needs = "consumer groups" if options.group is not None else "this request"
    with kafka_errors(client, needs=needs):
        consumer = _new_consumer(client, options)
        committed: dict[Any, Any] = {}
        try:
            _position_consumer(consumer, options, partitions, warn)
            yield from _poll_loop(consumer, options, committed, stop)
        finally:
            if options.group is not None and committed:
                consumer.commit(committed)
            consumer.close(autocommit=False)


def consumed_record(record: Any) -> ConsumedRecord:
    """Our value of one of kafka-python's ConsumerRecords."""
    kind = TIMESTAMP_TYPES.get(record.timestamp_type, NO_TIMESTAMP_TYPE)
    return ConsumedRecord(
        record.topic,
        record.partition,
        record.offset,
        -1 if record.timestamp is None else record.timestamp,
        record.key,
        record.value,
        tuple((str(key), value) for key, value in record.headers or ()),
        kind,
    )


def _poll_loop(
    consumer: Any, options: ConsumeOptions, committed: dict[Any, Any], stop: Callable[[], bool]
) -> Iterator[ConsumedRecord]:
    """Poll until enough records, enough silence or `stop()`; `committed` gathers what to
    commit: each partition's position once everything polled was taken (so control batches
    the consumer skipped count as consumed and a drained partition shows lag 0), else the
    offset after the last record taken. A record is taken when the caller asks for the next
    one: a record whose printing failed is not committed."""
    count = 0
    idle_s = None if options.idle_timeout_ms is None else options.idle_timeout_ms / 1000
    idle_deadline = None if idle_s is None else time.monotonic() + idle_s
    while not stop() and (options.max_messages is None or count < options.max_messages):
        wait_ms = POLL_INTERVAL_MS_MAX
        if idle_deadline is not None:
            wait_ms = min(wait_ms, int((idle_deadline - time.monotonic()) * 1000))
            if wait_ms <= 0:
                return
        polled = consumer.poll(timeout_ms=wait_ms)
        records = sorted(
            (record for batch in polled.values() for record in batch),
            key=lambda r: (r.partition, r.offset),
        )
        left = None if options.max_messages is None else options.max_messages - count
        whole = left is None or len(records) <= left
        for record in records if whole else records[:left]:
            yield consumed_record(record)
            count += 1
            committed[TopicPartition(record.topic, record.partition)] = OffsetAndMetadata(
                record.offset + 1, "", -1
            )
        moved = whole and options.group is not None and _commit_positions(consumer, committed)
        if records and idle_s is not None:
            idle_deadline = time.monotonic() + idle_s
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
