"""Thousands of partitions on 3 nodes (a measurement, not a test; issue 42).

    .venv/bin/python bench/partitions.py [--partitions 100,1000,3000,10000]
        [--idle-seconds 30] [--idle-minutes 10] [--produce-seconds 10] [--json PATH]

For each P of `--partitions` in turn, a fresh 3-node cluster on 127.0.0.1 (free ports, a
temporary directory; `LiveCluster`), and in it:

1. `create s`: P partitions of replication factor 3 created through the Kafka AdminClient
   (confluent-kafka), as topics of TOPIC_PARTITIONS partitions each (the last may be
   smaller), TOPICS_PER_REQUEST topics a CreateTopics request, one request after the
   other (a topic refused with a retriable error, such as NOT_CONTROLLER while the metadata
   log elects, is asked again after CREATE_BACKOFF_S): seconds until the last is answered.
   `led s`: seconds from the first request until every one of the P partitions has a
   leader (some node's /leaders says it leads it).
   Then, not timed in the table, until every node hosts every partition with its leader
   counting all 3 replicas in sync (`in_sync_s` in the JSON), and SETTLE_S more.
2. `idle CPU %`: each broker's CPU (utime + stime of /proc/PID/stat) over `--idle-seconds`
   while nothing is asked of the cluster, as a percentage of one core; `RSS MiB`: VmRSS of
   /proc/PID/status at its end. Median and max over the 3 brokers.
3. `elections`: epochs begun over every partition (the newest leader epoch any node's
   /status reports, as bench/steady_leaders.py counts them; __consumer_offsets included)
   from the start of the idle CPU window until `--idle-minutes` have passed (0: skipped).
   /status does not show the metadata log: its elections (the brokers' logs' lines saying
   a node became its leader) are counted apart, during creation and in the idle window
   (`metadata_elections` in the JSON).
4. `produce`: acknowledged records/s of an idempotent acks=all confluent-kafka producer
   (VALUE_BYTES-byte values, linger.ms 5, at most PRODUCE_QUEUE_MAX records waiting in it)
   writing round robin over all P partitions for `--produce-seconds` (and at most
   PRODUCE_RECORDS_MAX records), from the first send to the last acknowledgement within
   that window, after one warm-up record to each partition (acknowledged first; its time
   is `spread_warm_s` in the JSON); then the same over a topic of TWELVE_PARTITIONS
   partitions, and their ratio (spread / 12).
5. `failover s`: the node that leads the most partitions is killed with SIGKILL (by the
   PID its cluster.json records, checked to be that node's broker): seconds until the
   survivors' /leaders show every partition (all topics) led by one of them.

Prints one table, a row per P, and writes the figures as JSON (`--json PATH`, rewritten
after each P). A bound that does not hold ends that P (its row shows what came before,
and its cluster's directory is kept for the brokers' logs); the next P goes on. Every wait
is bounded; the script stops only the brokers it started (by their PIDs), also on Ctrl-C,
SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from tidelog.status import read_status
from tidelog.testing.live import LiveCluster
from tidelog.tools.cluster import NodeRecord, is_our_broker, read_cluster, signal_node, stop_nodes

NODES = 3
REPLICATION_FACTOR = 3
PARTITIONS_DEFAULT = "100,1000,3000,10000"
PARTITIONS_TOTAL_MAX = 20_000
TOPIC_PARTITIONS = 50
TOPIC_PREFIX = "parts"
TWELVE_TOPIC = "twelve"
TWELVE_PARTITIONS = 12
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 4  # the brokers' offsets_topic_partitions
TOPICS_PER_REQUEST = 20
CREATE_BACKOFF_S = 0.5
# Asked again: librdkafka's admin client does not retry these itself.
CREATE_RETRIED = frozenset(
    {
        KafkaError.NOT_CONTROLLER,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)
METADATA_LEADER_LINE = "__cluster_metadata-0: leader in epoch"
ERRORS_KEPT = 5
CREATE_REQUEST_TIMEOUT_S = 300.0
CREATE_DEADLINE_S = 900.0
IN_SYNC_DEADLINE_S = 300.0
FAILOVER_DEADLINE_S = 300.0
SETTLE_S = 5.0
IDLE_SECONDS_DEFAULT = 30.0
IDLE_MINUTES_DEFAULT = 10.0
IDLE_MINUTES_MAX = 120.0
PRODUCE_SECONDS_DEFAULT = 10.0
PRODUCE_SECONDS_MAX = 600.0
PRODUCE_RECORDS_MAX = 20_000_000
PRODUCE_QUEUE_MAX = 20_000
VALUE_BYTES = 100
WARM_TIMEOUT_S = 300.0
FLUSH_TIMEOUT_S = 120.0
STATUS_TIMEOUT_S = 10.0
STATUS_TRIES = 5
POLL_S = 0.1
IN_SYNC_POLL_S = 1.0  # a full /status of thousands of partitions loads a node: seldom
PROGRESS_S = 60.0
TABLE_WIDTH = 160
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "message.timeout.ms": 300_000,  # a slow cluster is measured, not timed out
    "queue.buffering.max.messages": PRODUCE_QUEUE_MAX,
    "log_level": 0,  # librdkafka would log every refused connection to the killed node
}

Key = tuple[str, int]  # (topic, partition)


class Bound(Exception):
    """A bounded wait ran out: the P it happened in ends there."""


@dataclass
class Result:
    """What one P measured; None where it did not get that far."""

    partitions: int
    topics: int = 0
    create_s: float | None = None
    create_retried: int = 0  # topics asked again after a retriable error
    create_errors: list[str] = field(default_factory=list)  # the first ERRORS_KEPT
    led_s: float | None = None
    in_sync_s: float | None = None
    cpu_percent: list[float] = field(default_factory=list)  # per broker, node 1..3
    rss_mib: list[float] = field(default_factory=list)
    load_average: float | None = None  # 1-minute, at the end of the idle CPU window
    idle_window_s: float | None = None
    elections: int | None = None
    elected: dict[str, int] = field(default_factory=dict)  # partition: epochs begun
    metadata_elections: dict[str, int] = field(default_factory=dict)  # phase: elections
    spread_per_s: float | None = None
    twelve_per_s: float | None = None
    spread_warm_s: float | None = None
    twelve_warm_s: float | None = None
    produce_unacked: int = 0
    ratio: float | None = None
    produce_errors: int = 0
    first_produce_error: str = ""
    killed: int | None = None
    killed_led: int | None = None
    killed_controller: bool | None = None
    failover_partitions: int | None = None
    failover_s: float | None = None
    failure: str = ""
    seconds: float = 0.0


# -- the cluster ------------------------------------------------------------------------


def raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def fresh_cluster(result: Result) -> Iterator[LiveCluster]:
    """A 3-node cluster in a temporary directory. At the end its brokers are stopped by
    the PIDs of its cluster.json (each checked to be that node's broker), and the directory
    removed unless `result` records a failure."""
    directory = Path(tempfile.mkdtemp(prefix="tidelog-partitions-"))
    try:
        yield LiveCluster(directory / "cluster", nodes=NODES)
    finally:
        if (directory / "cluster" / "cluster.json").exists():
            stop_nodes(list(read_cluster(directory / "cluster").nodes))
        if result.failure:
            result.failure += f" (cluster kept in {directory})"
        else:
            shutil.rmtree(directory, ignore_errors=True)


def statuses(nodes: list[NodeRecord]) -> dict[int, dict[str, Any] | None]:
    """Each node's /status, read at once (None: no answer in STATUS_TIMEOUT_S)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        found = pool.map(lambda n: read_status(n.admin, timeout_s=STATUS_TIMEOUT_S), nodes)
        return {node.id: status for node, status in zip(nodes, found, strict=True)}


def rows_of(found: dict[int, dict[str, Any] | None]) -> Iterator[tuple[int, dict[str, Any]]]:
    for node, status in found.items():
        for row in (status or {}).get("partitions", []):
            yield node, row


def leaders(nodes: list[NodeRecord]) -> set[Key]:
    """The partitions some node of `nodes` says it leads (its `/leaders`: a poll that costs
    a node little at thousands of partitions, where `/status` would load it)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        found = pool.map(
            lambda n: read_status(n.admin, timeout_s=STATUS_TIMEOUT_S, path="/leaders"), nodes
        )
        return {(t, p) for answer in found if answer is not None for t, p in answer["leaders"]}


def wait_led(nodes: list[NodeRecord], wanted: set[Key], deadline_s: float, what: str) -> float:
    """Seconds until every partition of `wanted` is led by one of `nodes`."""
    started = time.monotonic()
    missing = len(wanted)
    while time.monotonic() - started < deadline_s:
        missing = len(wanted - leaders(nodes))
        if not missing:
            return time.monotonic() - started
        time.sleep(POLL_S)
    raise Bound(f"{what}: {missing} of {len(wanted)} partitions without a leader after "
                f"{deadline_s:g} s")  # fmt: skip


def in_sync(found: dict[int, dict[str, Any] | None], wanted: set[Key]) -> bool:
    """Every node hosts every partition of `wanted`, and each one's leader counts all its
    replicas in sync."""
    if any(status is None for status in found.values()):
        return False
    hosted: dict[int, set[Key]] = {node: set() for node in found}
    whole: set[Key] = set()
    for node, p in rows_of(found):
        key = (p["topic"], p["partition"])
        hosted[node].add(key)
        if p["role"] == "leader" and len(p["isr"]) == len(p["replicas"]):
            whole.add(key)
    return all(wanted <= keys for keys in hosted.values()) and wanted <= whole


def wait_in_sync(nodes: list[NodeRecord], wanted: set[Key], deadline_s: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if in_sync(statuses(nodes), wanted):
            return time.monotonic() - started
        time.sleep(IN_SYNC_POLL_S)
    return None


def epochs(nodes: list[NodeRecord]) -> dict[Key, int]:
    """The newest epoch any node reports for each partition, from every node's answer."""
    for _ in range(STATUS_TRIES):
        found = statuses(nodes)
        if all(status is not None for status in found.values()):
            newest: dict[Key, int] = {}
            for _, p in rows_of(found):
                key = (p["topic"], p["partition"])
                newest[key] = max(newest.get(key, 0), int(p["epoch"]))
            return newest
    raise Bound(f"no /status from every node in {STATUS_TRIES} tries")


def names(keys: set[Key]) -> set[str]:
    return {topic for topic, _ in keys}


def bench_partitions(partitions: int) -> dict[str, int]:
    """The topics of the P partitions: name -> partitions (TOPIC_PARTITIONS each, the
    last may be smaller)."""
    topics: dict[str, int] = {}
    for index, first in enumerate(range(0, partitions, TOPIC_PARTITIONS)):
        topics[f"{TOPIC_PREFIX}-{index:04d}"] = min(TOPIC_PARTITIONS, partitions - first)
    return topics


def create_topics(bootstrap: str, topics: dict[str, int], deadline_s: float) -> list[str]:
    """Create `topics` through the AdminClient, TOPICS_PER_REQUEST a request, one request
    after the other; a topic refused with a retriable error is asked again (TOPIC_ALREADY_
    EXISTS then says the first request created it). The retriable errors met; Bound if the
    topics are not all created within `deadline_s`."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    started = time.monotonic()
    pending = list(topics)
    asked: set[str] = set()
    met: list[str] = []
    while pending:
        batch = pending[:TOPICS_PER_REQUEST]
        left = deadline_s - (time.monotonic() - started)
        if left <= 0:
            created = len(topics) - len(pending)
            raise Bound(f"{created} of {len(topics)} topics created in {deadline_s:g} s")
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=topics[name], replication_factor=REPLICATION_FACTOR)
             for name in batch],
            request_timeout=min(CREATE_REQUEST_TIMEOUT_S, left),
        )  # fmt: skip
        again: list[str] = []
        for name, future in futures.items():
            try:
                future.result(timeout=max(deadline_s - (time.monotonic() - started), 1.0))
            except FutureTimeout:
                raise Bound(
                    f"CreateTopics for {name} not answered "
                    f"{time.monotonic() - started:.0f} s after the first request"
                ) from None
            except KafkaException as exception:
                error: KafkaError = exception.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS and name in asked:
                    continue
                if not (error.retriable() or error.code() in CREATE_RETRIED):
                    raise
                again.append(name)
                met.append(f"{time.monotonic() - started:.1f} s: {name}: {error.str()}")
        asked.update(batch)
        pending = again + pending[len(batch) :]
        if again:
            time.sleep(CREATE_BACKOFF_S)
    return met


def metadata_leaderships(cluster: LiveCluster) -> int:
    """How many times, in all, the brokers' logs say a node became the metadata log's
    leader."""
    return sum(cluster.log_of(node).count(METADATA_LEADER_LINE) for node in cluster.nodes)


# -- /proc ------------------------------------------------------------------------------


def cpu_ticks(node: NodeRecord) -> int:
    """utime + stime of the node's broker (all its threads), in clock ticks."""
    assert is_our_broker(node), f"node {node.id}: pid {node.pid} is not its broker"
    fields = Path(f"/proc/{node.pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def rss_mib(node: NodeRecord) -> float:
    assert is_our_broker(node), f"node {node.id}: pid {node.pid} is not its broker"
    for line in Path(f"/proc/{node.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle_cpu(nodes: list[NodeRecord], seconds: float) -> list[float]:
    """Each broker's CPU over `seconds`, as a percentage of one core."""
    before = [cpu_ticks(node) for node in nodes]
    started = time.monotonic()
    time.sleep(seconds)
    after = [cpu_ticks(node) for node in nodes]
    elapsed = time.monotonic() - started
    return [(b - a) / CLOCK_TICKS / elapsed * 100 for a, b in zip(before, after, strict=True)]


# -- produce ----------------------------------------------------------------------------


@dataclass
class Rate:
    """One produce run: records/s acknowledged in its window, and what else it saw."""

    per_s: float
    warm_s: float  # the warm-up: one record to each partition, until all are acknowledged
    errors: list[str]  # delivery errors, in the window or after it
    unacked: int  # records still unacknowledged FLUSH_TIMEOUT_S after the window (dropped)


def produce_rate(bootstrap: str, targets: list[Key], seconds: float) -> Rate:
    """Records/s acknowledged while sending round robin over `targets` for `seconds` (at
    most PRODUCE_RECORDS_MAX records, PRODUCE_QUEUE_MAX waiting in the producer), counted
    from the first send to the last acknowledgement within the window, after one warm-up
    record to each target (acknowledged before the window opens)."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    failed: list[str] = []
    acked_at: list[float] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is None:
            acked_at.append(time.monotonic())
        else:
            failed.append(str(error))

    def send(key: Key, value: bytes, until: float) -> None:
        while time.monotonic() < until:
            try:
                producer.produce(key[0], value=value, partition=key[1], on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)

    warm_started = time.monotonic()
    for key in targets:  # metadata, connections, each partition's producer state
        send(key, b"warm", warm_started + WARM_TIMEOUT_S)
    left = producer.flush(max(warm_started + WARM_TIMEOUT_S - time.monotonic(), 0.0))
    warm_s = time.monotonic() - warm_started
    if left or failed or len(acked_at) < len(targets):
        producer.purge()
        raise Bound(f"warm-up: {len(acked_at)} of {len(targets)} acknowledged in "
                    f"{WARM_TIMEOUT_S:g} s, {len(failed)} failed {failed[:1]}")  # fmt: skip
    acked_at.clear()
    value = b"v" * VALUE_BYTES
    started = time.monotonic()
    end = started + seconds
    sent = 0
    while time.monotonic() < end and sent < PRODUCE_RECORDS_MAX:
        send(targets[sent % len(targets)], value, end)
        sent += 1
        producer.poll(0)
    while time.monotonic() < end:  # the count bound came first: acknowledgements go on
        producer.poll(0.01)
    unacked = producer.flush(FLUSH_TIMEOUT_S)
    errors = list(failed)  # not what purging says of those left
    if unacked:
        producer.purge()
        producer.flush(0)
    within = [at for at in acked_at if at <= end]
    per_s = len(within) / max((within[-1] if within else end) - started, 1e-9)
    return Rate(per_s, warm_s, errors, unacked)


# -- one P ------------------------------------------------------------------------------


def measure(partitions: int, args: argparse.Namespace, console: Console) -> Result:
    """Every figure of one P, on a cluster of its own. A bound that does not hold ends
    the P: the figures so far are kept, and so is the cluster's directory."""
    result = Result(partitions)
    started = time.monotonic()
    try:
        with fresh_cluster(result) as cluster:
            try:
                measure_in(cluster, result, args, console)
            except Exception as error:
                result.failure = f"{type(error).__name__}: {error}"
    finally:
        result.seconds = round(time.monotonic() - started, 1)
    return result


def measure_in(
    cluster: LiveCluster, result: Result, args: argparse.Namespace, console: Console
) -> None:
    p = result.partitions
    record = read_cluster(cluster.directory)
    nodes = list(record.nodes)
    topics = bench_partitions(p)
    result.topics = len(topics)
    wanted = {(topic, i) for topic, n in topics.items() for i in range(n)}

    leaderships = metadata_leaderships(cluster)
    started = time.monotonic()
    met = create_topics(cluster.bootstrap, topics, args.create_deadline)
    result.create_s = round(time.monotonic() - started, 2)
    result.create_retried, result.create_errors = len(met), met[:ERRORS_KEPT]
    console.log(f"P={p}: {len(topics)} topics created in {result.create_s} s"
                + (f" ({len(met)} asked again, first: {met[0]})" if met else ""))  # fmt: skip
    left = args.create_deadline - (time.monotonic() - started)
    wait_led(nodes, wanted, max(left, 1.0), "create")
    result.led_s = round(time.monotonic() - started, 2)
    console.log(f"P={p}: every partition led {result.led_s} s after the first request")
    offsets = {(OFFSETS_TOPIC, i) for i in range(OFFSETS_PARTITIONS)}
    synced = wait_in_sync(nodes, wanted | offsets, IN_SYNC_DEADLINE_S)
    result.in_sync_s = None if synced is None else round(synced, 2)
    if synced is None:
        console.log(f"[yellow]P={p}: not every replica in sync after {IN_SYNC_DEADLINE_S:g} s")
    else:
        console.log(f"P={p}: every replica in sync {synced:.1f} s later")
    time.sleep(SETTLE_S)
    counted = metadata_leaderships(cluster)
    result.metadata_elections["create"], leaderships = counted - leaderships, counted

    idle_started = time.monotonic()
    before = epochs(nodes) if args.idle_minutes > 0 else {}
    cpu = idle_cpu(nodes, args.idle_seconds)
    result.cpu_percent = [round(c, 1) for c in cpu]
    result.rss_mib = [round(rss_mib(node), 1) for node in nodes]
    result.load_average = round(os.getloadavg()[0], 2)
    console.log(f"P={p}: idle CPU {result.cpu_percent} % of a core, RSS {result.rss_mib} MiB, "
                f"load average {result.load_average}")  # fmt: skip
    if args.idle_minutes > 0:
        window_end = idle_started + args.idle_minutes * 60
        while (now := time.monotonic()) < window_end:
            time.sleep(min(PROGRESS_S, window_end - now))
            if time.monotonic() < window_end:
                console.log(f"P={p}: idle, {window_end - time.monotonic():.0f} s to go")
        after = epochs(nodes)
        result.idle_window_s = round(time.monotonic() - idle_started, 1)
        begun = {key: after[key] - before[key] for key in before.keys() & after.keys()}
        result.elections = sum(begun.values())
        result.elected = {f"{t}-{i}": n for (t, i), n in sorted(begun.items()) if n}
        result.metadata_elections["idle"] = metadata_leaderships(cluster) - leaderships
        console.log(f"P={p}: {result.elections} elections in {result.idle_window_s} s idle")

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    future = admin.create_topics(
        [NewTopic(TWELVE_TOPIC, num_partitions=TWELVE_PARTITIONS,
                  replication_factor=REPLICATION_FACTOR)],
        request_timeout=CREATE_REQUEST_TIMEOUT_S,
    )[TWELVE_TOPIC]  # fmt: skip
    future.result(timeout=CREATE_REQUEST_TIMEOUT_S)
    twelve = [(TWELVE_TOPIC, i) for i in range(TWELVE_PARTITIONS)]
    wait_led(nodes, set(twelve), IN_SYNC_DEADLINE_S, TWELVE_TOPIC)
    wait_in_sync(nodes, set(twelve), IN_SYNC_DEADLINE_S)
    spread = produce_rate(cluster.bootstrap, sorted(wanted), args.produce_seconds)
    result.spread_per_s, result.spread_warm_s = round(spread.per_s), round(spread.warm_s, 2)
    over_12 = produce_rate(cluster.bootstrap, twelve, args.produce_seconds)
    result.twelve_per_s, result.twelve_warm_s = round(over_12.per_s), round(over_12.warm_s, 2)
    result.ratio = round(spread.per_s / over_12.per_s, 2) if over_12.per_s else None
    errors = spread.errors + over_12.errors
    result.produce_errors = len(errors)
    result.first_produce_error = errors[0] if errors else ""
    result.produce_unacked = spread.unacked + over_12.unacked
    console.log(f"P={p}: produce {result.spread_per_s} records/s over {p} partitions "
                f"(warm-up {result.spread_warm_s} s), {result.twelve_per_s} over 12 "
                f"({result.ratio}x), {len(errors)} delivery errors")  # fmt: skip

    found = statuses(nodes)
    every = {(row["topic"], row["partition"]) for _, row in rows_of(found)}
    leads = {node.id: 0 for node in nodes}
    for node, row in rows_of(found):
        leads[node] += row["role"] == "leader"
    victim = args.kill_node or max(leads, key=lambda n: (leads[n], -n))
    controllers = {s.get("metadata_leader") for s in found.values() if s is not None}
    result.killed, result.killed_led = victim, leads[victim]
    result.killed_controller = victim in controllers
    result.failover_partitions = len(every)
    assert signal_node(record.node(victim), signal.SIGKILL), f"node {victim} is not running"
    killed_at = time.monotonic()
    survivors = [node for node in nodes if node.id != victim]
    wait_led(survivors, every, FAILOVER_DEADLINE_S, f"kill -9 node {victim}")
    result.failover_s = round(time.monotonic() - killed_at, 2)
    console.log(f"P={p}: node {victim} killed (it led {leads[victim]}, controller: "
                f"{result.killed_controller}): all {len(every)} partitions led again in "
                f"{result.failover_s} s")  # fmt: skip


# -- the table --------------------------------------------------------------------------


def pair(values: list[float], form: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{form}} / {max(values):{form}}"


def shown(value: float | None, form: str) -> str:
    return "-" if value is None else f"{value:{form}}"


def print_table(results: list[Result], args: argparse.Namespace, console: Console) -> None:
    window = f"{args.idle_minutes:g} min" if args.idle_minutes > 0 else "skipped"
    table = Table(
        title=f"Partitions: {NODES} nodes, RF {REPLICATION_FACTOR}, topics of "
        f"{TOPIC_PARTITIONS} partitions",
        caption=f"idle CPU over {args.idle_seconds:g} s (% of one core), elections "
        + (f"over {window} idle" if args.idle_minutes > 0 else "not counted")
        + f", produce acks=all idempotent for {args.produce_seconds:g} s each; "
        "CPU and RSS: median / max over the brokers",
    )
    table.add_column("P", justify="right")
    table.add_column("create s", justify="right")
    table.add_column("led s", justify="right")
    table.add_column("idle CPU %", justify="right")
    table.add_column("RSS MiB", justify="right")
    table.add_column("load avg", justify="right")
    table.add_column(f"elections ({window})", justify="right")
    table.add_column("produce spread / 12 (rec/s)", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("failover s", justify="right")
    for r in results:
        produce = (
            "-"
            if r.spread_per_s is None
            else f"{r.spread_per_s:,.0f} / {shown(r.twelve_per_s, ',.0f')}"
        )
        table.add_row(
            f"{r.partitions:,}",
            shown(r.create_s, ".1f"),
            shown(r.led_s, ".1f"),
            pair(r.cpu_percent, ".1f"),
            pair(r.rss_mib, ".0f"),
            shown(r.load_average, ".1f"),
            shown(r.elections, "d"),
            produce,
            shown(r.ratio, ".2f"),
            shown(r.failover_s, ".1f"),
        )
    console.print(table)
    for r in results:
        if r.create_retried:
            console.print(f"P={r.partitions}: {r.create_retried} topics asked again, first: "
                          f"{r.create_errors[0]}")  # fmt: skip
        if any(r.metadata_elections.values()):
            console.print(f"P={r.partitions}: metadata log elections {r.metadata_elections}")
        if r.produce_unacked:
            console.print(f"P={r.partitions}: {r.produce_unacked} records unacknowledged "
                          f"{FLUSH_TIMEOUT_S:g} s after a produce window (dropped)")  # fmt: skip
        if r.produce_errors:
            console.print(f"P={r.partitions}: {r.produce_errors} delivery errors, first: "
                          f"{r.first_produce_error}")  # fmt: skip
        if r.failure:
            console.print(f"[bold red]P={r.partitions}: stopped early[/]: {r.failure}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default=PARTITIONS_DEFAULT, help="a comma list of P")
    parser.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS_DEFAULT)
    parser.add_argument(
        "--idle-minutes", type=float, default=IDLE_MINUTES_DEFAULT, help="0: no election count"
    )
    parser.add_argument("--produce-seconds", type=float, default=PRODUCE_SECONDS_DEFAULT)
    parser.add_argument(
        "--create-deadline",
        type=float,
        default=CREATE_DEADLINE_S,
        help="seconds for every partition to be created and led",
    )
    parser.add_argument(
        "--kill-node", type=int, default=None, help="the node to kill (default: the most leaders)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    try:
        args.partitions = [int(p) for p in args.partitions.split(",") if p.strip()]
    except ValueError:
        parser.error("--partitions: a comma list of numbers")
    if not args.partitions or not all(1 <= p <= PARTITIONS_TOTAL_MAX for p in args.partitions):
        parser.error(f"--partitions: each 1..{PARTITIONS_TOTAL_MAX}")
    if not 0 < args.idle_seconds <= IDLE_MINUTES_MAX * 60:
        parser.error(f"--idle-seconds: above 0, at most {IDLE_MINUTES_MAX * 60:g}")
    if not 0 <= args.idle_minutes <= IDLE_MINUTES_MAX:
        parser.error(f"--idle-minutes: 0..{IDLE_MINUTES_MAX:g}")
    if not 0 < args.produce_seconds <= PRODUCE_SECONDS_MAX:
        parser.error(f"--produce-seconds: above 0, at most {PRODUCE_SECONDS_MAX:g}")
    if not 0 < args.create_deadline <= 4 * CREATE_DEADLINE_S:
        parser.error(f"--create-deadline: above 0, at most {4 * CREATE_DEADLINE_S:g}")
    if args.kill_node is not None and not 1 <= args.kill_node <= NODES:
        parser.error(f"--kill-node: 1..{NODES}")
    return args


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # stop the clusters as on Ctrl-C
    console = Console()
    if not console.is_terminal:  # a file or a pipe: wide enough for one line a row
        console = Console(width=TABLE_WIDTH)
    results: list[Result] = []
    started = time.monotonic()
    try:
        for partitions in args.partitions:
            results.append(measure(partitions, args, console))
            if args.json is not None:
                figures = {"args": {k: str(v) for k, v in vars(args).items()},
                           "results": [asdict(r) for r in results]}  # fmt: skip
                args.json.write_text(json.dumps(figures, indent=2) + "\n")
    except KeyboardInterrupt:
        console.print("[bold red]interrupted[/]: the clusters started are stopped")
    print_table(results, args, console)
    console.print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
