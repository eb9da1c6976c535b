"""Producing lines and consuming records with kafka-python's KafkaProducer and KafkaConsumer.

Rules:

- The topic (and partition) is checked with an admin Metadata request first, so an unknown
  topic is a clear `UnknownTopic` at once rather than a metadata wait of `max_block_ms`.
- `produce_lines` sends every line, flushes, then reads every send's outcome: a failed send
  is counted and described, never raised; the caller decides the exit status.
- acks=all turns idempotence on (the producer's default in kafka-python 3); acks 0 and 1
  turn it off, since Kafka allows idempotence only with acks=all.
- The producer and consumer take Kafka's defaults (request.timeout.ms 30000,
  retry.backoff.ms 100; delivery.timeout.ms 120000 and max.block.ms 60000 for the producer),
  then the `--producer-property`/`--consumer-property` settings (`client_properties`), which
  win over the flags. A producer retries every retriable failure (a leader moving, a broker
  not answering) until delivery.timeout.ms; a record still unacknowledged then fails naming
  it. A delivery.timeout.ms below linger.ms + request.timeout.ms lowers the request timeout
  to fit, unless request.timeout.ms was given too (then it is refused).
- The topic check and the consumer's set-up are retried while they fail retriably, until
  default.api.timeout.ms (`retrying`).
- Every record of one `produce_lines` call carries the same headers and timestamp (none:
  the producer's clock), then the line's own headers when `header_format` says lines start
  with them; a line refused before it is sent (too long, no key separator or headers
  delimiter without `ignore_error`) is counted and described like a failed send.
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
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeAlias

from tidelog.tools.client_kafka import (
    BOOTSTRAP_TIMEOUT_MS,
    KAFKA_CLIENT_ID,
    ClientError,
    ClientSettings,
    KafkaConsumer,
    KafkaProducer,
    KafkaTimeoutError,
    OffsetAndMetadata,
    TopicPartition,
    answering,
    ask_admin,
    describe_kafka_error,
    kafka_errors,
    retrying,
    topic_partitions,
)
from tidelog.tools.client_properties import (
    DELIVERY_TIMEOUT_MS_DEFAULT,
    MAX_BLOCK_MS_DEFAULT,
    NONE,
    ClientProperties,
)

FLUSH_MARGIN_S: Final = 5.0
"""How long the final flush may take beyond delivery.timeout.ms (by then every send has
been acknowledged or has expired)."""
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
    properties: ClientProperties = NONE
    """The --producer-property settings, checked; they win over the fields above."""
    header_format: HeaderFormat | None = None
    """Each line starts with its own headers (kafka-console-producer's parse.headers)."""
    ignore_error: bool = False
    """A missing separator is no error (Kafka's ignore.error): no key (or no headers, or a
    header without a value), the rest of the line the value."""


@dataclass(frozen=True, slots=True)
class HeaderFormat:
    """kafka-console-producer's parse.headers: a line is HEADERS<delimiter>REST, HEADERS
    pairs KEY<key_separator>VALUE joined by `separator`."""

    delimiter: bytes = b"\t"
    separator: bytes = b","
    key_separator: bytes = b":"


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
    properties: ClientProperties = NONE
    """The --consumer-property settings, checked; they win over the fields above."""


def split_line(
    line: bytes, key_separator: bytes | None, *, ignore_error: bool = False
) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line. Raises ClientError when the separator is missing,
    unless `ignore_error` (then the whole line is the value, without a key)."""
    if key_separator is None:
        return None, line
    key, found, value = line.partition(key_separator)
    if not found and ignore_error:
        return None, line
    if not found:
        raise ClientError(f"no key separator {key_separator.decode(errors='replace')!r}")
    return key, value


def split_headers(
    line: bytes, form: HeaderFormat | None, *, ignore_error: bool = False
) -> tuple[tuple[Header, ...], bytes]:
    """(headers, rest) of one input line as parse.headers reads it; ClientError when a
    separator is missing (unless `ignore_error`) or a header key is not UTF-8."""
    if form is None:
        return (), line
    shown, found, rest = line.partition(form.delimiter)
    if not found:
        if ignore_error:
            return (), line
        raise ClientError(f"no headers delimiter {form.delimiter.decode(errors='replace')!r}")
    headers: list[Header] = []
    for pair in shown.split(form.separator) if shown else ():
        key, found, value = pair.partition(form.key_separator)
        if not found and not ignore_error:
            raise ClientError(f"no header key separator in {pair.decode(errors='replace')!r}")
        try:
            headers.append((key.decode(), value if found else None))
        except UnicodeDecodeError:
            raise ClientError(f"header key {key!r} is not UTF-8 text") from None
    return tuple(headers), rest


def request_bytes_max(options: ProduceOptions) -> int:
    """The producer's max_request_size: its default, or room for the longest line's record
    with its headers; the topic's max.message.bytes still decides on the broker."""
    headers_bytes = sum(len(key.encode()) + len(value or b"") for key, value in options.headers)
    needed = options.line_bytes_max + headers_bytes + RECORD_OVERHEAD_BYTES_MAX
    return max(REQUEST_BYTES_MIN, needed)


def producer_settings(client: ClientSettings, options: ProduceOptions) -> dict[str, Any]:
    """kafka-python's KafkaProducer arguments: Kafka's defaults, the flags, then the
    --producer-property settings (this module's rules); ClientError when they conflict."""
    if options.acks not in ACKS:
        raise ClientError(f"bad acks {options.acks!r} (want all, 1 or 0)")
    given = options.properties.kafka_python
    settings: dict[str, Any] = {
        **client.kafka_python,
        "client_id": KAFKA_CLIENT_ID,
        "acks": ACKS[options.acks],
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        "delivery_timeout_ms": DELIVERY_TIMEOUT_MS_DEFAULT,
        "max_block_ms": MAX_BLOCK_MS_DEFAULT,
        "max_request_size": request_bytes_max(options),
        "allow_auto_create_topics": False,
        **given,
    }
    settings.setdefault("enable_idempotence", settings["acks"] == "all")
    if settings["enable_idempotence"] and settings["acks"] != "all":
        raise ClientError("enable.idempotence=true needs acks=all (Kafka allows no other)")
    room_ms = settings["delivery_timeout_ms"] - settings.get("linger_ms", 0)
    if settings["request_timeout_ms"] > room_ms:
        if "request_timeout_ms" in given or room_ms <= 0:
            raise ClientError("delivery.timeout.ms must be at least linger.ms + request.timeout.ms")
        settings["request_timeout_ms"] = room_ms
    return settings


def _new_producer(client: ClientSettings, options: ProduceOptions) -> Any:
    return KafkaProducer(**producer_settings(answering(client), options))


def send_error(error: BaseException, delivery_timeout_ms: int) -> str:
    """One failed send's error for the user; an expired one names delivery.timeout.ms."""
    described = describe_kafka_error(error)
    if isinstance(error, KafkaTimeoutError):
        return f"{described} (delivery.timeout.ms={delivery_timeout_ms})"
    return described


def _settle(producer: Any, pending: list[Any], summary: ProduceSummary) -> None:
    """Flush (delivery.timeout.ms and FLUSH_MARGIN_S at most), then count each pending send
    as produced or failed."""
    delivery_timeout_ms = int(producer.config["delivery_timeout_ms"])
    with suppress(KafkaTimeoutError):  # the sends still pending are counted below
        producer.flush(timeout=delivery_timeout_ms / 1000 + FLUSH_MARGIN_S)
    for future in pending:
        if not future.is_done:
            summary.record_error(
                f"not acknowledged within delivery.timeout.ms={delivery_timeout_ms}"
            )
        elif future.exception is not None:
            summary.record_error(send_error(future.exception, delivery_timeout_ms))
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
    client = client.timed(options.properties.timing(client.timing, "--producer-property"))
    client = answering(client)  # once: a broker that does not answer costs its probe once
    ask_admin(client, lambda admin: topic_partitions(admin, options.topic, options.partition))
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
                    own, rest = split_headers(
                        line, options.header_format, ignore_error=options.ignore_error
                    )
                    key, value = split_line(
                        rest, options.key_separator, ignore_error=options.ignore_error
                    )
                except ClientError as error:
                    summary.record_error(f"line {number}: {error}")
                    continue
                sent = producer.send(
                    options.topic,
                    value=value,
                    key=key,
                    headers=[*(headers or ()), *own] if own else headers,
                    partition=options.partition,
                    timestamp_ms=options.timestamp_ms,
                )
                pending.append(sent)
                if len(pending) >= PENDING_SENDS_MAX:
                    _settle(producer, pending, summary)
            _settle(producer, pending, summary)
        finally:
            producer.close(timeout=FLUSH_MARGIN_S)
    return summary


def consumer_settings(client: ClientSettings, options: ConsumeOptions) -> dict[str, Any]:
    """kafka-python's KafkaConsumer arguments: Kafka's defaults, the flags, then the
    --consumer-property settings (this module's rules)."""
    return {
        **client.kafka_python,
        "client_id": KAFKA_CLIENT_ID,
        "group_id": options.group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest" if options.from_beginning else "latest",
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        "fetch_max_wait_ms": POLL_INTERVAL_MS_MAX,
        "allow_auto_create_topics": False,
        **options.properties.kafka_python,
    }


def _new_consumer(client: ClientSettings, options: ConsumeOptions) -> Any:
    return KafkaConsumer(**consumer_settings(answering(client), options))


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
    group = options.properties.kafka_python.get("group_id", options.group)
    options = replace(options, group=group)
    if options.group is not None and (options.partition is not None or options.offset is not None):
        raise ClientError("--group cannot be combined with --partition or --offset")
    client = client.timed(options.properties.timing(client.timing, "--consumer-property"))
    client = answering(client)  # once: a broker that does not answer costs its probe once
    partitions = ask_admin(
        client, lambda admin: topic_partitions(admin, options.topic, options.partition)
    )
    consumer = retrying(client, lambda: _positioned_consumer(client, options, partitions, warn))
    committed: dict[Any, Any] = {}
    with kafka_errors(client, needs=needs_of(options)):
        try:
            yield from _poll_loop(consumer, options, committed, stop)
        finally:
            if options.group is not None and committed:
                consumer.commit(committed)
            consumer.close(autocommit=False)


def needs_of(options: ConsumeOptions) -> str:
    """The Kafka API a consume depends on, for kafka_errors."""
    return "consumer groups" if options.group is not None else "this request"


def _positioned_consumer(
    client: ClientSettings,
    options: ConsumeOptions,
    partitions: list[int],
    warn: Callable[[str], None],
) -> Any:
    """A new consumer, subscribed or assigned and positioned; closed again when that fails."""
    with kafka_errors(client, needs=needs_of(options)):
        consumer = _new_consumer(client, options)
        try:
            _position_consumer(consumer, options, partitions, warn)
        except BaseException:
            consumer.close(autocommit=False)
            raise
    return consumer


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
