"""`tidelog perf produce|consume|latency`: load tests that print what Kafka's tools print.

- `produce` is kafka-producer-perf-test: a confluent-kafka (librdkafka) producer sends
  `--num-records` records of `--record-size` bytes, as fast as it can (`--throughput -1`)
  or at that many records/s; a progress line every `--reporting-interval` ms, then
  `N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
  P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.` Latency is from `produce()` to
  the delivery report (the broker's acknowledgement), as in Kafka's tool.
- `consume` is kafka-consumer-perf-test: one confluent-kafka consumer reads `--messages`
  records from the start of every partition (assigned, no group: nothing is committed) and
  prints Kafka's header and one CSV line (start, end, MB consumed, MB/s, records, records/s,
  rebalance ms, fetch ms, fetch MB/s, fetch records/s).
- `latency` is kafka-e2e-latency with more percentiles: one acks=all record in flight at a
  time; produce-to-acknowledge and produce-to-consume latency, in ms with decimals.

Every command takes `--command-config FILE` (`tools.client_options`): its properties go to
librdkafka as they are, under the command's own `--producer-props` / `--consumer-props`.
MB is 1024 * 1024 bytes, as in Kafka's tools. `--json` prints one JSON object instead (no
progress lines). Every loop is bounded by a count and a deadline (`--timeout`).
"""

from __future__ import annotations

import functools
import json
import statistics
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final, ParamSpec

import click
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as ConfluentPartition

from tidelog.client_config import parse_properties
from tidelog.tools.client_kafka import ClientError, ClientSettings
from tidelog.tools.client_options import client_options, json_option, reports_errors

P = ParamSpec("P")
MB: Final = 1024 * 1024
REPORTING_INTERVAL_MS_DEFAULT: Final = 5000
TIMEOUT_MS_DEFAULT: Final = 60_000
RECORDS_MAX: Final = 1_000_000_000
RECORD_SIZE_MAX: Final = 1 << 20
# Records are handed to librdkafka CHUNK_RECORDS at a time (`produce_batch`: one Python call
# for many), or THROTTLED_CHUNK_S worth of them under --throughput.
CHUNK_RECORDS: Final = 1000
THROTTLED_CHUNK_S: Final = 0.005
QUEUE_FULL_WAIT_S: Final = 0.005
CONSUME_BATCH_MAX: Final = 10_000
CONSUME_POLL_S: Final = 0.1
METADATA_TIMEOUT_S: Final = 10.0
RETRY_WAIT_S: Final = 0.1
THROUGHPUT_PRODUCER_PROPS: Final = {
    # A producer tuned for throughput, as Kafka's benchmarks tune theirs: batches of up to
    # 100,000 records or 1 MiB, up to 50 ms of linger, a queue deep enough to fill them.
    # The benchmarks' "batched" rows (`make bench-peers`) and bench-spark's fill use them.
    "linger.ms": "50",
    "batch.size": str(1 << 20),
    "batch.num.messages": "100000",
    "queue.buffering.max.messages": "1000000",
    "queue.buffering.max.kbytes": str(1 << 20),
}
CONSUMER_DEFAULTS: Final = {
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 64 * MB,
    "max.partition.fetch.bytes": 4 * MB,
    "queued.max.messages.kbytes": 256 * 1024,
    # librdkafka fetches again only when fewer records than this are queued: its default
    # (100,000) leaves a fast consumer waiting a fetch round trip every 10 MB.
    "queued.min.messages": 1_000_000,
}
KAFKA_TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S:%f"
CONSUME_HEADER: Final = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


# ---------------------------------------------------------------------- statistics -----
def percentile_ms(sorted_s: Sequence[float], fraction: float) -> float:
    """The value at `fraction` of an ascending list of seconds, in ms (Kafka's index)."""
    if not sorted_s:
        return 0.0
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * fraction))] * 1000


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Latencies in ms: average, max and the percentiles Kafka's tools print."""

    count: int
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> LatencySummary:
        ordered = sorted(seconds)
        return cls(
            count=len(ordered),
            avg_ms=statistics.fmean(ordered) * 1000 if ordered else 0.0,
            max_ms=ordered[-1] * 1000 if ordered else 0.0,
            p50_ms=percentile_ms(ordered, 0.5),
            p95_ms=percentile_ms(ordered, 0.95),
            p99_ms=percentile_ms(ordered, 0.99),
            p999_ms=percentile_ms(ordered, 0.999),
        )


# ---------------------------------------------------------------------- produce --------
@dataclass(frozen=True, slots=True)
class ProduceReport:
    records: int
    failed: int
    records_per_s: float
    mb_per_s: float
    elapsed_s: float
    latency: LatencySummary

    def line(self) -> str:
        """The final line of kafka-producer-perf-test."""
        lat = self.latency
        return (
            f"{self.records} records sent, {self.records_per_s:f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {lat.avg_ms:.2f} ms avg latency, "
            f"{lat.max_ms:.2f} ms max latency, {int(lat.p50_ms)} ms 50th, "
            f"{int(lat.p95_ms)} ms 95th, {int(lat.p99_ms)} ms 99th, {int(lat.p999_ms)} ms 99.9th."
        )


class ProduceStats:
    """Delivery reports of one run: every latency (seconds, float32), failures, windows."""

    def __init__(self, record_size: int, report: Callable[[str], None] | None) -> None:
        self.record_size = record_size
        self.report = report
        self.latencies = array("f")
        self.failed: list[str] = []
        self.window_start = time.monotonic()
        self.window_index = 0

    def on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))
            return
        self.latencies.append(message.latency() or 0.0)

    @property
    def settled(self) -> int:
        return len(self.latencies) + len(self.failed)

    def maybe_report(self, now: float, interval_s: float) -> None:
        """Print a progress line (Kafka's window line) once per `interval_s`."""
        if self.report is None or now - self.window_start < interval_s:
            return
        window = self.latencies[self.window_index :]
        elapsed = now - self.window_start
        count = len(window)
        avg = statistics.fmean(window) * 1000 if count else 0.0
        peak = max(window) * 1000 if count else 0.0
        self.report(
            f"{count} records sent, {count / elapsed:.1f} records/sec "
            f"({count * self.record_size / MB / elapsed:.2f} MB/sec), {avg:.1f} ms avg latency, "
            f"{peak:.1f} ms max latency."
        )
        self.window_start, self.window_index = now, len(self.latencies)


def run_produce(
    bootstrap: str,
    topic: str,
    *,
    num_records: int,
    record_size: int,
    throughput: float,
    props: dict[str, str],
    timeout_s: float,
    reporting_interval_s: float,
    report: Callable[[str], None] | None,
) -> ProduceReport:
    """Send the records, wait for every delivery report; the summary of the run."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all"}
    config.update(props)
    producer = Producer(config)
    stats = ProduceStats(record_size, report)
    value = bytes(i % 251 for i in range(record_size))
    poll, callback = producer.poll, stats.on_delivery
    chunk = CHUNK_RECORDS
    if throughput > 0:
        chunk = max(1, min(CHUNK_RECORDS, int(throughput * THROTTLED_CHUNK_S)))
    started = time.monotonic()
    deadline = started + timeout_s
    sent = 0
    while sent < num_records:
        count = min(chunk, num_records - sent)
        # One dict per record: librdkafka marks the ones it could not queue (`_error`).
        waiting = [{"value": value} for _ in range(count)]
        while waiting:
            queued = producer.produce_batch(topic, waiting, on_delivery=callback)
            waiting = refused_for_now(waiting, queued)
            if waiting:  # librdkafka's queue is full: serve deliveries, retry the rest
                poll(QUEUE_FULL_WAIT_S)
                check_deadline(deadline, f"produce ({sent} of {num_records} sent)")
        sent += count
        if throughput > 0:
            throttle(started, sent, throughput, time.monotonic())
        poll(0)
        stats.maybe_report(time.monotonic(), reporting_interval_s)
        check_deadline(deadline, f"produce ({sent} of {num_records} sent)")
    while stats.settled < num_records:
        producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
        stats.maybe_report(time.monotonic(), reporting_interval_s)
        check_deadline(deadline, f"produce ({stats.settled} of {num_records} acknowledged)")
    elapsed = time.monotonic() - started
    return ProduceReport(
        records=num_records,
        failed=len(stats.failed),
        records_per_s=num_records / elapsed,
        mb_per_s=num_records * record_size / MB / elapsed,
        elapsed_s=elapsed,
        latency=LatencySummary.of(stats.latencies),
    )


def refused_for_now(messages: list[dict[str, Any]], queued: int) -> list[dict[str, Any]]:
    """The messages of a `produce_batch` that queued `queued` of them which did not fit
    librdkafka's queue, cleared to be given again; any other refusal (a record too large) is
    the run's end, as `produce` raises it."""
    waiting = []
    for message in messages:
        error = message.pop("_error", None)
        if error is None:
            continue
        if error.code() != KafkaError._QUEUE_FULL:
            raise KafkaException(error)
        waiting.append(message)
    if queued + len(waiting) != len(messages):  # never seen: each is queued or marked
        raise ClientError(f"produce: {len(messages) - queued} records not queued, no reason given")
    return waiting


def throttle(started: float, sent: int, throughput: float, now: float) -> None:
    """Sleep while ahead of `throughput` records/s (Kafka's ThroughputThrottler)."""
    ahead_s = sent / throughput - (now - started)
    if ahead_s > 0:
        time.sleep(ahead_s)


def check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() >= deadline:
        raise ClientError(f"{what}: not done before --timeout")


# ---------------------------------------------------------------------- consume --------
@dataclass(frozen=True, slots=True)
class ConsumeReport:
    start: str
    end: str
    mb: float
    mb_per_s: float
    records: int
    records_per_s: float
    rebalance_ms: int
    fetch_ms: int

    def line(self) -> str:
        """The data line of kafka-consumer-perf-test (no group: no rebalance)."""
        return (
            f"{self.start}, {self.end}, {self.mb:.4f}, {self.mb_per_s:.4f}, {self.records}, "
            f"{self.records_per_s:.4f}, {self.rebalance_ms}, {self.fetch_ms}, "
            f"{self.mb_per_s:.4f}, {self.records_per_s:.4f}"
        )


def kafka_time(epoch_s: float) -> str:
    """Kafka's tool timestamp: yyyy-MM-dd HH:mm:ss:SSS."""
    return datetime.fromtimestamp(epoch_s).strftime(KAFKA_TIME_FORMAT)[:-3]


def topic_partitions(client: Any, topic: str) -> list[int]:
    """The partition numbers of `topic`. Raises ClientError when it does not exist."""
    metadata = client.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise ClientError(f"topic {topic!r} not found ({found.error if found else 'absent'})")
    return sorted(found.partitions)


def run_consume(
    bootstrap: str, topic: str, *, messages: int, props: dict[str, str], timeout_s: float
) -> ConsumeReport:
    """Read `messages` records from the start of every partition of `topic`."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": f"perf-{topic}"}
    config.update(CONSUMER_DEFAULTS)
    config.update(props)
    consumer = Consumer(config)
    try:
        started_wall, started = time.time(), time.monotonic()
        partitions = topic_partitions(consumer, topic)
        consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records, size_bytes, last = 0, 0, started
        idle_deadline = started + timeout_s
        while records < messages:
            batch = consumer.consume(min(CONSUME_BATCH_MAX, messages - records), CONSUME_POLL_S)
            now = time.monotonic()
            if not batch:
                check_deadline(idle_deadline, f"consume ({records} of {messages} read)")
                continue
            # map() over the C methods: no Python frame per record.
            if any(map(Message.error, batch)):
                error = next(m.error() for m in batch if m.error() is not None)
                raise ClientError(f"consume: {error}")
            records += len(batch)
            size_bytes += sum(map(len, filter(None, map(Message.value, batch))))
            last, idle_deadline = now, now + timeout_s
    finally:
        consumer.close()
    elapsed = max(last - started, 1e-9)
    return ConsumeReport(
        start=kafka_time(started_wall),
        end=kafka_time(started_wall + elapsed),
        mb=size_bytes / MB,
        mb_per_s=size_bytes / MB / elapsed,
        records=records,
        records_per_s=records / elapsed,
        rebalance_ms=0,
        fetch_ms=int(elapsed * 1000),
    )


# ---------------------------------------------------------------------- latency --------
@dataclass(frozen=True, slots=True)
class LatencyReport:
    records: int
    acknowledge: LatencySummary
    consume: LatencySummary

    def lines(self) -> list[str]:
        return [
            latency_line("produce to acknowledge", self.records, self.acknowledge),
            latency_line("produce to consume", self.records, self.consume),
        ]


def latency_line(what: str, records: int, lat: LatencySummary) -> str:
    return (
        f"{records} records, {what}: {lat.avg_ms:.3f} ms avg latency, {lat.max_ms:.3f} ms max "
        f"latency, {lat.p50_ms:.3f} ms 50th, {lat.p95_ms:.3f} ms 95th, "
        f"{lat.p99_ms:.3f} ms 99th, {lat.p999_ms:.3f} ms 99.9th."
    )


class EndToEnd:
    """The consumer side of `latency`: a thread that notes when each record arrives."""

    def __init__(self, consumer: Consumer, count: int) -> None:
        self.consumer = consumer
        self.arrived = [0.0] * count
        self.events = threading.Condition()
        self.received = 0
        self.error: str | None = None
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            message = self.consumer.poll(CONSUME_POLL_S)
            if message is None:
                continue
            now = time.perf_counter()
            if message.error() is not None:
                self.error = str(message.error())
                return
            number = int.from_bytes((message.value() or b"")[:8], "big")
            with self.events:
                if number < len(self.arrived):
                    self.arrived[number] = now
                    self.received = max(self.received, number + 1)
                self.events.notify_all()

    def wait_for(self, number: int, deadline: float) -> None:
        with self.events:
            while self.received <= number and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientError(f"latency: record {number} not consumed in time")
                self.events.wait(left)
        if self.error is not None:
            raise ClientError(f"latency: consume: {self.error}")


def run_latency(
    bootstrap: str,
    topic: str,
    *,
    num_records: int,
    record_size: int,
    timeout_s: float,
    props: dict[str, str] | None = None,
) -> LatencyReport:
    """One acks=all record in flight, to partition 0; each also read back by a consumer."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "socket.nagle.disable": True,
            **(props or {}),
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"perf-latency-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "socket.nagle.disable": True,
            **(props or {}),
        }
    )
    topic_partitions(consumer, topic)
    # Start at the HWM, known before the first send, so the consumer misses nothing.
    hwm = latest_offset(consumer, topic, timeout_s)
    consumer.assign([ConfluentPartition(topic, 0, hwm)])
    reader = EndToEnd(consumer, num_records)
    thread = threading.Thread(target=reader.run, name="perf-latency-consumer", daemon=True)
    thread.start()
    try:
        producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        sent, acked = measure_latency(
            producer,
            reader,
            topic,
            num_records=num_records,
            record_size=record_size,
            timeout_s=timeout_s,
        )
    finally:
        reader.stopped = True
        thread.join(timeout_s)
        consumer.close()
    consumed = [arrived - start for arrived, start in zip(reader.arrived, sent, strict=True)]
    return LatencyReport(
        records=num_records,
        acknowledge=LatencySummary.of([a - s for a, s in zip(acked, sent, strict=True)]),
        consume=LatencySummary.of(consumed),
    )


def latest_offset(consumer: Consumer, topic: str, timeout_s: float) -> int:
    """The HWM of partition 0, retried while the client's metadata is still coming."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, hwm = consumer.get_watermark_offsets(
                ConfluentPartition(topic, 0), timeout=METADATA_TIMEOUT_S
            )
            return int(hwm)
        except KafkaException as error:
            check_deadline(deadline, f"latency: no HWM for {topic}-0 ({error})")
            time.sleep(RETRY_WAIT_S)


def measure_latency(
    producer: Producer,
    reader: EndToEnd,
    topic: str,
    *,
    num_records: int,
    record_size: int,
    timeout_s: float,
) -> tuple[list[float], list[float]]:
    """Send each record alone; (send times, acknowledge times), perf_counter seconds."""
    padding = bytes(max(0, record_size - 8))
    sent: list[float] = []
    acked: list[float] = []
    failed: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        acked.append(time.perf_counter())
        if error is not None:
            failed.append(str(error))

    deadline = time.monotonic() + timeout_s
    for number in range(num_records):
        sent.append(time.perf_counter())
        producer.produce(
            topic, number.to_bytes(8, "big") + padding, partition=0, on_delivery=delivered
        )
        while len(acked) <= number:
            producer.poll(CONSUME_POLL_S)
            check_deadline(deadline, f"latency: record {number} not acknowledged")
        if failed:
            raise ClientError(f"latency: produce: {failed[0]}")
        reader.wait_for(number, deadline)
    return sent, acked


# ---------------------------------------------------------------------- commands -------
def kafka_errors(command: Callable[P, None]) -> Callable[P, None]:
    """A client library error is a ClientError: `error: ...` on stderr, exit 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except KafkaException as error:
            raise ClientError(f"{error.args[0] if error.args else error}") from error

    return wrapper


timeout_option = click.option(
    "--timeout",
    "timeout_ms",
    type=click.IntRange(min=1),
    default=TIMEOUT_MS_DEFAULT,
    show_default=True,
    help="Give up (exit 1) after this many ms without progress (produce, latency: in all).",
)
records_option = click.option(
    "--num-records", type=click.IntRange(1, RECORDS_MAX), required=True, help="Records to send."
)
size_option = click.option(
    "--record-size", type=click.IntRange(8, RECORD_SIZE_MAX), default=100, show_default=True
)
topic_option = click.option("--topic", required=True, help="An existing topic.")


@click.group()
def perf() -> None:
    """Load tests with the output of Kafka's perf tools (confluent-kafka clients)."""


@perf.command("produce")
@topic_option
@records_option
@size_option
@click.option(
    "--throughput",
    type=float,
    default=-1,
    show_default=True,
    help="Records/s to aim at; -1: as fast as possible.",
)
@click.option(
    "--acks", type=click.Choice(["all", "-1", "1", "0"]), default="all", show_default=True
)
@click.option(
    "--producer-props",
    multiple=True,
    metavar="K=V",
    help="librdkafka producer properties (linger.ms=5 ...); repeat.",
)
@click.option(
    "--reporting-interval",
    "interval_ms",
    type=click.IntRange(min=1),
    default=REPORTING_INTERVAL_MS_DEFAULT,
    show_default=True,
    help="ms between lines.",
)
@timeout_option
@client_options
@json_option
@reports_errors
@kafka_errors
def produce_command(
    *,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str,
    producer_props: tuple[str, ...],
    interval_ms: int,
    timeout_ms: int,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """kafka-producer-perf-test: send records, print throughput and latency percentiles.

    --json: {"records", "failed", "records_per_s", "mb_per_s", "elapsed_s", "latency":
    {"count", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms"}}
    """
    own = {"acks": acks, **parse_properties(producer_props, "--producer-props")}
    result = run_produce(
        client.bootstrap,
        topic,
        num_records=num_records,
        record_size=record_size,
        throughput=throughput,
        props={**client.properties, **own},
        timeout_s=timeout_ms / 1000,
        reporting_interval_s=interval_ms / 1000,
        report=None if as_json else click.echo,
    )
    if as_json:
        click.echo(json.dumps(asdict(result)))
    else:
        click.echo(result.line())
    if result.failed:
        raise ClientError(f"{result.failed} records failed")


@perf.command("consume")
@topic_option
@click.option(
    "--messages", type=click.IntRange(1, RECORDS_MAX), required=True, help="Records to read."
)
@click.option(
    "--consumer-props", multiple=True, metavar="K=V", help="librdkafka consumer properties; repeat."
)
@timeout_option
@client_options
@json_option
@reports_errors
@kafka_errors
def consume_command(
    *,
    topic: str,
    messages: int,
    consumer_props: tuple[str, ...],
    timeout_ms: int,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """kafka-consumer-perf-test: read records from the start, print the rates.

    --json: {"start", "end", "mb", "mb_per_s", "records", "records_per_s", "rebalance_ms",
    "fetch_ms"}
    """
    own = parse_properties(consumer_props, "--consumer-props")
    result = run_consume(
        client.bootstrap,
        topic,
        messages=messages,
        props={**client.properties, **own},
        timeout_s=timeout_ms / 1000,
    )
    if as_json:
        click.echo(json.dumps(asdict(result)))
    else:
        click.echo(CONSUME_HEADER)
        click.echo(result.line())


@perf.command("latency")
@topic_option
@records_option
@size_option
@timeout_option
@client_options
@json_option
@reports_errors
@kafka_errors
def latency_command(
    *,
    topic: str,
    num_records: int,
    record_size: int,
    timeout_ms: int,
    client: ClientSettings,
    as_json: bool,
) -> None:
    """kafka-e2e-latency: one acks=all record in flight (partition 0); percentiles of
    produce-to-acknowledge and produce-to-consume.

    --json: {"records", "acknowledge": {...}, "consume": {...}} (as produce's "latency")
    """
    result = run_latency(
        client.bootstrap,
        topic,
        num_records=num_records,
        record_size=record_size,
        timeout_s=timeout_ms / 1000,
        props=dict(client.properties),
    )
    if as_json:
        click.echo(json.dumps(asdict(result)))
    else:
        for line in result.lines():
            click.echo(line)
