"""ISR mode against the majority quorum, side by side in one run (a measurement, not a test).

    PYTHONPATH=src .venv/bin/python bench/isr_vs_quorum.py [--runs 3] [--records 50000]
        [--quick] [--modes quorum,isr]

For each mode, a fresh 5-node cluster on 127.0.0.1 (free ports, a temporary directory;
five nodes so that the metadata log, a majority of all nodes, outlives two of a topic's
three replicas), and the same topics in it: `rate` (RATE_PARTITIONS partitions),
`latency` and `faults` (1 partition each), all of replication factor 3. `quorum` keeps
the default min.insync.replicas (a majority, 2 of 3: Raft's commit rule);
`isr` is `replication.mode=isr` with min.insync.replicas=1, Kafka's default (docs/isr.md).
The rows of the table, one column per mode and their ratio isr/quorum:

- `produce rate`: records/s acknowledged (acks=all, 100-byte values, linger.ms 5, no
  idempotence) for --records records spread over `rate`, from the first send to the last
  acknowledgement; median (and min-max) of --runs runs.
- `latency p50/p99`: one record in flight (the next is sent when the previous one is
  acknowledged, acks=all, linger.ms 0), LATENCY_RECORDS records to `latency`.
- Faults, on `faults`, under a steady idempotent acks=all producer (ProducerLoad,
  LOAD_RATE_PER_S records/s):
  - `1 down: first ack`: SIGKILL the leader; seconds until the first acknowledgement
    after the kill. `1 down: acked` counts acknowledgements in the OUTAGE_S window from
    the kill to the restart (records that waited in the producer during a failover are
    acknowledged later in the window, so a short failover loses none of the count). In
    ISR mode the controller elects a new leader only once it fences the dead broker, so
    broker_session_timeout_ms (9 s, as Kafka's broker.session.timeout.ms) bounds `first
    ack` from below; in quorum mode a follower's election timeout does.
  - `1 down: back in ISR`: restart it; seconds until the leader counts it in sync again
    (the committed ISR, `reported_isr`, in ISR mode; the leader's `isr` in quorum mode).
  - `2 down: first ack`: with the ISR whole again, kill the leader, wait for the next
    leader's first acknowledgement, then kill that one too: seconds from the second kill
    to the first acknowledgement ("none" if none came within the OUTAGE_S window, which a
    majority quorum promises). `2 down: acked` counts them over that window.
  - `2 down: writes again` / `2 down: ISR whole`: restart both at once; seconds until
    an acknowledgement after the restart began, and until all three replicas are in the
    (committed) ISR again.
  - `acked`, `delivery errors`: the producer's totals; `lost` / `doubled`: the whole
    partition read back with a consumer: acknowledged values missing or not at the offset
    they were acknowledged at, and values present more than once. Both must be 0: no
    unclean election happens here.
  - `controller killed`: whether a killed leader was also the metadata log's leader
    (its failover then waits for a new controller too).

The machine's load makes every figure noisy: compare medians, and runs made together.
Every wait is bounded; the script stops (`cluster down`) only the clusters it started.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from kafka import KafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from tidelog.status import read_status
from tidelog.testing.live import LiveCluster, ProducerLoad, create_topic, tidelog
from tidelog.tools.cluster import (
    ClusterError,
    has_exited,
    ports_in_use,
    read_cluster,
    signal_node,
    start_node,
    wait_ready,
    wait_until,
    write_cluster,
)

NODES = 5
RATE_TOPIC = "rate"
RATE_PARTITIONS = 3
LATENCY_TOPIC = "latency"
FAULTS_TOPIC = "faults"
MODES: dict[str, dict[str, str]] = {
    "quorum": {},
    "isr": {"replication.mode": "isr", "min.insync.replicas": "1"},
}
VALUE_BYTES = 100
RUNS_DEFAULT = 3
RUNS_MAX = 20
RECORDS_DEFAULT = 300_000
RECORDS_MAX = 2_000_000
RECORDS_QUICK = 50_000
LATENCY_RECORDS = 3_000
LATENCY_RECORDS_QUICK = 500
LOAD_RATE_PER_S = 200.0
LOAD_SECONDS_MAX = 900.0
OUTAGE_S = 30.0
OUTAGE_S_QUICK = 15.0  # above the broker session timeout (9 s): ISR mode fences first
FAILOVER_TIMEOUT_S = 60.0
RECOVER_TIMEOUT_S = 90.0
READY_TIMEOUT_S = 60.0
STATUS_TIMEOUT_S = 1.0
POLL_S = 0.02
FLUSH_TIMEOUT_S = 120.0
DELIVERY_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 60.0
WARM_ACKS = 100
TABLE_WIDTH = 110
# Low client backoffs, as bench/failover.py: the figures are the cluster's, not librdkafka's.
FAST_CLIENT: dict[str, Any] = {
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 50,
    "log_level": 0,  # librdkafka would log every refused connection to a killed node
}


@dataclass
class Outcome:
    """What one mode measured; None where nothing came within the bound."""

    rates: list[float] = field(default_factory=list)
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    one_first_ack_s: float | None = None
    one_acked: int = 0
    one_rejoin_s: float | None = None
    two_first_ack_s: float | None = None
    two_acked: int = 0
    two_writes_again_s: float | None = None
    two_whole_s: float | None = None
    acked: int = 0
    errors: int = 0
    first_error: str = ""
    lost: int = 0
    doubled: int = 0
    controller_killed: list[bool] = field(default_factory=list)
    failure: str = ""  # the first bound that did not hold: the figures after it are missing


# -- the cluster ------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_cluster(outcome: Outcome) -> Iterator[LiveCluster]:
    """A 5-node cluster in a temporary directory; `cluster down` at the end, and the
    directory removed unless `outcome` records a failure (its node-N/broker.log say what
    happened)."""
    directory = Path(tempfile.mkdtemp(prefix="tidelog-isr-bench-"))
    try:
        yield LiveCluster(directory, nodes=NODES)
    finally:
        if (directory / "cluster.json").exists():
            tidelog("cluster", "down", "--data-dir", str(directory))
        if outcome.failure:
            outcome.failure += f" (cluster kept in {directory})"
        else:
            shutil.rmtree(directory, ignore_errors=True)


def partition_status(cluster: LiveCluster, node: int, topic: str) -> dict[str, Any] | None:
    entry = cluster.record["nodes"][node - 1]
    status = read_status(entry["admin"], timeout_s=STATUS_TIMEOUT_S) or {}
    return next((p for p in status.get("partitions", []) if p["topic"] == topic), None)


def metadata_leader(cluster: LiveCluster, among: tuple[int, ...]) -> int | None:
    for node in among:
        status = read_status(cluster.record["nodes"][node - 1]["admin"], timeout_s=STATUS_TIMEOUT_S)
        if status is not None and status.get("metadata_leader") is not None:
            return int(status["metadata_leader"])
    return None


def leader_status(
    cluster: LiveCluster, among: tuple[int, ...], topic: str
) -> dict[str, Any] | None:
    """The partition as the replica that leads it in the newest epoch reports it."""
    found = [
        s
        for node in among
        if (s := partition_status(cluster, node, topic)) is not None and s["role"] == "leader"
    ]
    return max(found, key=lambda s: int(s["epoch"]), default=None)


def in_sync(status: dict[str, Any] | None) -> list[int]:
    """The replicas the leader counts in sync: the committed ISR in ISR mode."""
    if status is None:
        return []
    key = "reported_isr" if status.get("replication") == "isr" else "isr"
    return list(status.get(key) or [])


def wait_whole(cluster: LiveCluster, topic: str, partitions: int) -> None:
    """Until every partition of `topic` has a leader counting all 3 replicas in sync."""
    whole = functools.partial(all_partitions_whole, cluster, topic, partitions)
    assert wait_until(whole, timeout_s=READY_TIMEOUT_S), f"{topic}: not in sync"


def all_partitions_whole(cluster: LiveCluster, topic: str, partitions: int) -> bool:
    whole: set[int] = set()
    for entry in cluster.record["nodes"]:
        status = read_status(entry["admin"], timeout_s=STATUS_TIMEOUT_S) or {}
        for p in status.get("partitions", []):
            if p["topic"] == topic and p["role"] == "leader" and len(in_sync(p)) == 3:
                whole.add(p["partition"])
    return len(whole) == partitions


def kill(cluster: LiveCluster, node: int) -> float:
    """SIGKILL `node` (as `cluster kill`, without a CLI's start-up in the timing)."""
    record = read_cluster(cluster.directory)
    assert signal_node(record.node(node), signal.SIGKILL), f"node {node} is not running"
    return time.monotonic()


def restart(cluster: LiveCluster, nodes: tuple[int, ...]) -> None:
    """Start killed `nodes` again, all at once, with the same flags; until ready."""
    record = read_cluster(cluster.directory)

    def gone() -> bool:
        chosen = [record.node(n) for n in nodes]
        return all(has_exited(n.pid) for n in chosen) and not ports_in_use(chosen)

    assert wait_until(gone, timeout_s=READY_TIMEOUT_S), f"nodes {nodes}: ports still held"
    for node in nodes:
        record = record.with_pid(node, start_node(record, record.node(node)))
    write_cluster(cluster.directory, record)
    wait_ready([record.node(n) for n in nodes], timeout_s=READY_TIMEOUT_S)


# -- rate and latency -------------------------------------------------------------------


def measure_rate(bootstrap: str, records: int) -> float:
    """Records/s acknowledged by a batching acks=all producer, first send to last ack."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **FAST_CLIENT}
    )
    producer.produce(RATE_TOPIC, value=b"warm")  # metadata and connections first
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "no warm-up ack"
    acked = [0]
    failed: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is None:
            acked[0] += 1
        else:
            failed.append(str(error))

    value = b"v" * VALUE_BYTES
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(RATE_TOPIC, value=value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, f"unacknowledged after {FLUSH_TIMEOUT_S} s"
    elapsed = time.monotonic() - started
    assert not failed, f"{len(failed)} failed, first: {failed[0]}"
    return acked[0] / elapsed


def measure_latency(bootstrap: str, count: int) -> tuple[float, float]:
    """p50 and p99 in ms of acks=all with one record in flight."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **FAST_CLIENT}
    )
    value = b"l" * VALUE_BYTES
    producer.produce(LATENCY_TOPIC, value=value)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "no warm-up ack"
    latencies: list[float] = []
    for _ in range(count):
        sent = time.monotonic()
        producer.produce(LATENCY_TOPIC, value=value)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "a record not acknowledged"
        latencies.append((time.monotonic() - sent) * 1000)
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49], cuts[98]


# -- faults -----------------------------------------------------------------------------


def first_ack_after(load: ProducerLoad, moment: float, *, until: float) -> float | None:
    """Seconds from `moment` to the first acknowledgement after it, waiting at most
    until the monotonic time `until`; None if none came."""

    def later() -> float | None:
        return next((at for at in list(load.acked_at) if at > moment), None)

    while (at := later()) is None and time.monotonic() < until:
        time.sleep(POLL_S)
    return None if at is None else at - moment


def acked_between(load: ProducerLoad, start: float, end: float) -> int:
    return sum(1 for at in list(load.acked_at) if start < at <= end)


def wait_for(condition: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until `condition` held, or None if it did not within `timeout_s`."""
    started = time.monotonic()
    if wait_until(condition, timeout_s=timeout_s):
        return time.monotonic() - started
    return None


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


class Faults:
    """The fault phases of one mode on FAULTS_TOPIC, under one ProducerLoad."""

    def __init__(self, cluster: LiveCluster, load: ProducerLoad, outage_s: float) -> None:
        self.cluster = cluster
        self.load = load
        self.outage_s = outage_s
        found = leader_status(cluster, cluster.nodes, FAULTS_TOPIC)
        assert found is not None, "no leader of faults"
        self.replicas: tuple[int, ...] = tuple(found["replicas"])

    def leader(self, among: tuple[int, ...]) -> int:
        found = None

        def led() -> bool:
            nonlocal found
            found = leader_status(self.cluster, among, FAULTS_TOPIC)
            return found is not None

        assert wait_until(led, timeout_s=FAILOVER_TIMEOUT_S), f"no leader among {among}"
        assert found is not None
        return int(found["leader"])

    def whole(self) -> bool:
        return len(in_sync(leader_status(self.cluster, self.replicas, FAULTS_TOPIC))) == 3

    def kill_leader(self, among: tuple[int, ...], outcome: Outcome) -> tuple[int, float]:
        victim = self.leader(among)
        controller = metadata_leader(self.cluster, self.cluster.nodes)
        outcome.controller_killed.append(controller == victim)
        return victim, kill(self.cluster, victim)

    def one_down(self, outcome: Outcome) -> None:
        victim, killed_at = self.kill_leader(self.replicas, outcome)
        window_end = killed_at + self.outage_s
        outcome.one_first_ack_s = first_ack_after(
            self.load, killed_at, until=killed_at + FAILOVER_TIMEOUT_S
        )
        sleep_until(window_end)
        outcome.one_acked = acked_between(self.load, killed_at, window_end)
        started = time.monotonic()
        restart(self.cluster, (victim,))

        def back() -> bool:
            found = leader_status(self.cluster, self.replicas, FAULTS_TOPIC)
            return victim in in_sync(found)

        rejoined = wait_for(back, RECOVER_TIMEOUT_S)
        outcome.one_rejoin_s = None if rejoined is None else time.monotonic() - started

    def two_down(self, outcome: Outcome) -> None:
        assert wait_until(self.whole, timeout_s=RECOVER_TIMEOUT_S), "ISR not whole before"
        first, killed_at = self.kill_leader(self.replicas, outcome)
        survivors = tuple(n for n in self.replicas if n != first)
        resumed = first_ack_after(self.load, killed_at, until=killed_at + FAILOVER_TIMEOUT_S)
        assert resumed is not None, "no write after the first kill"
        second, killed_at = self.kill_leader(survivors, outcome)
        window_end = killed_at + self.outage_s
        outcome.two_first_ack_s = first_ack_after(self.load, killed_at, until=window_end)
        sleep_until(window_end)
        outcome.two_acked = acked_between(self.load, killed_at, window_end)
        started = time.monotonic()
        restart(self.cluster, (first, second))
        writes = first_ack_after(self.load, started, until=started + RECOVER_TIMEOUT_S)
        outcome.two_writes_again_s = writes
        whole = wait_for(self.whole, RECOVER_TIMEOUT_S)
        outcome.two_whole_s = None if whole is None else time.monotonic() - started


def measure_faults(cluster: LiveCluster, outcome: Outcome, outage_s: float) -> None:
    load = ProducerLoad(
        cluster.bootstrap,
        FAULTS_TOPIC,
        records=int(LOAD_RATE_PER_S * LOAD_SECONDS_MAX),
        rate_per_s=LOAD_RATE_PER_S,
        deadline_s=LOAD_SECONDS_MAX,
        **FAST_CLIENT,
    )
    load.start()
    try:
        assert wait_until(lambda: len(load.acked) >= WARM_ACKS, timeout_s=FAILOVER_TIMEOUT_S)
        faults = Faults(cluster, load, outage_s)
        faults.one_down(outcome)
        faults.two_down(outcome)
        settled = time.monotonic()
        assert wait_until(
            lambda: acked_between(load, settled, time.monotonic()) >= WARM_ACKS,
            timeout_s=RECOVER_TIMEOUT_S,
        ), "no writes after the recovery"
    finally:
        load.stop()
        load.join(FLUSH_TIMEOUT_S)
    outcome.acked = len(load.acked)
    outcome.errors = len(load.failed)
    outcome.first_error = load.failed[0] if load.failed else ""
    outcome.lost, outcome.doubled = check_log(cluster, load.acked)


def check_log(cluster: LiveCluster, acked: dict[bytes, int]) -> tuple[int, int]:
    """(lost, doubled): acknowledged values not found exactly at their offset, and
    values in the partition more than once; reads to the partition's end."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    try:
        partition = TopicPartition(FAULTS_TOPIC, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        offsets: dict[bytes, list[int]] = {}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        next_offset = 0
        while next_offset < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    offsets.setdefault(record.value, []).append(record.offset)
                    next_offset = record.offset + 1
        assert next_offset >= end, f"read to {next_offset} of {end} in {CONSUME_TIMEOUT_S} s"
    finally:
        consumer.close()
    lost = sum(1 for value, offset in acked.items() if offsets.get(value) != [offset])
    doubled = sum(1 for found in offsets.values() if len(found) > 1)
    return lost, doubled


# -- one mode, the table ----------------------------------------------------------------


def measure_mode(mode: str, args: argparse.Namespace, console: Console) -> Outcome:
    """Every figure of one mode, on a cluster of its own. A bound that does not hold
    (an AssertionError, or a node that does not start again) ends the mode: the figures
    so far are kept, and so is the cluster's directory."""
    outcome = Outcome()
    with fresh_cluster(outcome) as cluster:
        try:
            measure_in(cluster, mode, args, outcome, console)
        except (AssertionError, ClusterError) as error:
            outcome.failure = f"{type(error).__name__}: {error}"
    return outcome


def measure_in(
    cluster: LiveCluster, mode: str, args: argparse.Namespace, outcome: Outcome, console: Console
) -> None:
    topics = ((RATE_TOPIC, RATE_PARTITIONS), (LATENCY_TOPIC, 1), (FAULTS_TOPIC, 1))
    for topic, partitions in topics:
        create_topic(cluster.bootstrap, topic, partitions=partitions, configs=MODES[mode])
        wait_whole(cluster, topic, partitions)
    for run in range(args.runs):
        outcome.rates.append(measure_rate(cluster.bootstrap, args.records))
        console.log(f"{mode}: rate run {run + 1}: {outcome.rates[-1]:,.0f} records/s")
    outcome.latency_p50_ms, outcome.latency_p99_ms = measure_latency(
        cluster.bootstrap, args.latency_records
    )
    console.log(f"{mode}: latency p50 {outcome.latency_p50_ms:.1f} ms")
    measure_faults(cluster, outcome, args.outage_s)
    console.log(f"{mode}: faults done, {outcome.acked} acked, {outcome.lost} lost")


def seconds(value: float | None, *, none: str) -> str:
    return none if value is None else f"{value:.2f} s"


def ratio(isr: float | None, quorum: float | None) -> str:
    if isr is None or quorum is None or quorum == 0:
        return "-"
    return f"{isr / quorum:.2f}"


def rows(o: Outcome, outage_s: float) -> list[tuple[str, str, float | None]]:
    """(row name, shown value, number for the ratio) for one mode."""
    rate = statistics.median(o.rates) if o.rates else None
    none = f"none in {outage_s:g} s"
    return [
        ("produce rate (records/s, median)", f"{rate:,.0f}" if rate else "-", rate),
        ("  min - max", f"{min(o.rates):,.0f} - {max(o.rates):,.0f}" if o.rates else "-", None),
        ("latency p50 (ms)", f"{o.latency_p50_ms:.1f}", o.latency_p50_ms),
        ("latency p99 (ms)", f"{o.latency_p99_ms:.1f}", o.latency_p99_ms),
        ("1 down: first ack", seconds(o.one_first_ack_s, none="none"), o.one_first_ack_s),
        (f"1 down: acked in {outage_s:g} s", str(o.one_acked), o.one_acked),
        ("1 down: back in ISR", seconds(o.one_rejoin_s, none="never"), o.one_rejoin_s),
        ("2 down: first ack", seconds(o.two_first_ack_s, none=none), o.two_first_ack_s),
        (f"2 down: acked in {outage_s:g} s", str(o.two_acked), o.two_acked),
        ("2 down: writes again", seconds(o.two_writes_again_s, none="never"), None),
        ("2 down: ISR whole", seconds(o.two_whole_s, none="never"), o.two_whole_s),
        ("acked (faults topic)", str(o.acked), None),
        ("delivery errors", str(o.errors), None),
        ("lost", str(o.lost), None),
        ("doubled", str(o.doubled), None),
        (
            "controller killed (kills 1, 2, 3)",
            " ".join("yes" if k else "no" for k in o.controller_killed),
            None,
        ),
    ]


def print_table(outcomes: dict[str, Outcome], args: argparse.Namespace, console: Console) -> None:
    table = Table(
        title=f"ISR vs quorum: {NODES} nodes, RF 3, `{RATE_TOPIC}` {RATE_PARTITIONS} partitions,"
        f" `{FAULTS_TOPIC}` 1 partition",
        caption="quorum: majority commit, min.insync.replicas 2 (default); "
        "isr: replication.mode=isr, min.insync.replicas 1 (Kafka's default). "
        f"{args.runs} rate run(s) of {args.records} records, {args.latency_records} latency "
        f"records, load {LOAD_RATE_PER_S:g} records/s",
    )
    table.add_column("measure")
    for mode in outcomes:
        table.add_column(mode, justify="right")
    both = set(outcomes) == set(MODES)
    if both:
        table.add_column("isr/quorum", justify="right")
    per_mode = {mode: rows(o, args.outage_s) for mode, o in outcomes.items()}
    first = next(iter(per_mode.values()))
    for index, (name, _, _) in enumerate(first):
        cells = [per_mode[mode][index][1] for mode in outcomes]
        if both:
            cells.append(ratio(per_mode["isr"][index][2], per_mode["quorum"][index][2]))
        table.add_row(name, *cells)
    console.print(table)
    for mode, o in outcomes.items():
        if o.first_error:
            console.print(f"{mode}: first delivery error: {o.first_error}")
        if o.failure:
            console.print(f"[bold red]{mode}: stopped early[/]: {o.failure}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=RUNS_DEFAULT,
        choices=range(1, RUNS_MAX + 1),
        metavar="N",
        help="rate runs per mode (the median is shown)",
    )
    parser.add_argument("--records", type=int, default=None, help="records per rate run")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke check: 1 short rate run, fewer latency records, "
        f"{OUTAGE_S_QUICK:g} s outages",
    )
    parser.add_argument("--modes", default="quorum,isr", help="comma-separated: quorum,isr")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    assert all(m in MODES for m in args.modes), f"modes are {', '.join(MODES)}"
    if args.quick:
        args.runs = 1
    args.records = args.records or (RECORDS_QUICK if args.quick else RECORDS_DEFAULT)
    assert 1 <= args.records <= RECORDS_MAX, f"--records: 1 to {RECORDS_MAX}"
    args.latency_records = LATENCY_RECORDS_QUICK if args.quick else LATENCY_RECORDS
    args.outage_s = OUTAGE_S_QUICK if args.quick else OUTAGE_S
    return args


def main() -> None:
    args = parse_args()
    console = Console()
    if not console.is_terminal:  # a file or a pipe: wide enough for one line a row
        console = Console(width=TABLE_WIDTH)
    started = time.monotonic()
    outcomes = {mode: measure_mode(mode, args, console) for mode in args.modes}
    print_table(outcomes, args, console)
    console.print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
