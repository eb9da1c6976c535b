"""Measure leader failover on a real 3-node cluster (a measurement, not a test).

    .venv/bin/python bench/failover.py [--rounds 7] [--no-idempotence]

A fresh cluster on 127.0.0.1 (free ports, a temporary directory), topic `failover` with 1
partition and replication factor 3. One confluent-kafka producer (acks=all, idempotent
unless --no-idempotence) writes continuously with one message in flight: it sends the next
message when the last one is acknowledged. Each round kills the partition's leader with
SIGKILL and measures

- `status`: from the kill until a survivor's admin /status reports itself leader of the
  partition in a newer epoch (polled every STATUS_POLL_S);
- `write`: from the kill until the first acknowledgement of a message produced after the
  kill (so it came from the new leader; at most one round trip later than the failover);

then restarts the killed node and waits until it is back in sync (in the leader's ISR, in
the leader's epoch, its log end at least the leader's HWM when it became ready). The
producer's retry and reconnect backoffs are set low (PRODUCER_CONFIG), so the figures are
the cluster's rather than the client's backoff; librdkafka still re-queries a partition
whose metadata names a dead leader only about once a second, which bounds `write` from
below. Prints each round and the median, min and max. Every wait is bounded; the script
stops only the cluster it started.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tidelog.status import read_status
from tidelog.testing.live import LiveCluster
from tidelog.tools.client_kafka import ClientSettings, create_topic
from tidelog.tools.cluster import (
    ClusterRecord,
    has_exited,
    ports_in_use,
    read_cluster,
    signal_node,
    start_node,
    stop_nodes,
    wait_ready,
    wait_until,
    write_cluster,
)
from tidelog.tools.demo import wait_for_broker_lists

TOPIC = "failover"
ROUNDS_DEFAULT = 7
ROUNDS_MAX = 50
STATUS_POLL_S = 0.01
STATUS_TIMEOUT_S = 0.2
FAILOVER_TIMEOUT_S = 20.0
READY_TIMEOUT_S = 30.0
SYNC_TIMEOUT_S = 30.0
FLOW_TIMEOUT_S = 10.0
DELIVERY_WAIT_S = 0.05
MESSAGES_MAX = 10_000_000
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 0,
    "message.timeout.ms": 60_000,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 50,
    "log_level": 0,  # librdkafka would log every refused connection to the killed node
}


def report(reports: list[Any], error: Any, _message: Any) -> None:
    reports.append(error)


class SteadyProducer(threading.Thread):
    """One message in flight: send, wait for its delivery report, send the next."""

    def __init__(self, bootstrap: str, *, idempotence: bool) -> None:
        super().__init__(daemon=True)
        config = {**PRODUCER_CONFIG, "enable.idempotence": idempotence}
        self.producer = Producer({"bootstrap.servers": bootstrap, **config})
        self.acks: list[tuple[float, float]] = []  # (produced at, acknowledged at), monotonic
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        for number in range(MESSAGES_MAX):
            if self.stopping.is_set():
                break
            reports: list[Any] = []
            produced_at = time.monotonic()
            self.producer.produce(
                TOPIC, value=b"m%09d" % number, on_delivery=functools.partial(report, reports)
            )
            while not reports and not self.stopping.is_set():  # message.timeout.ms bounds it
                self.producer.poll(DELIVERY_WAIT_S)
            if reports and reports[0] is None:
                self.acks.append((produced_at, time.monotonic()))
            elif reports:
                self.errors.append(str(reports[0]))
        self.producer.flush(FAILOVER_TIMEOUT_S)

    def first_ack_after(self, moment: float, *, start: int) -> float | None:
        """When the first message produced after `moment` was acknowledged (looking from
        the `start`-th acknowledgement on)."""
        later = (acked for produced, acked in self.acks[start:] if produced > moment)
        return next(later, None)


def leader(record: ClusterRecord, *, skip: int = 0) -> tuple[int, int] | None:
    """(node id, epoch) of the node that reports itself leader in the newest epoch."""
    found: list[tuple[int, int]] = []
    for node in record.nodes:
        if node.id == skip:
            continue
        status = read_status(node.admin, timeout_s=STATUS_TIMEOUT_S) or {}
        for p in status.get("partitions", []):
            if p.get("topic") == TOPIC and p.get("role") == "leader":
                found.append((int(p["epoch"]), node.id))
    if not found:
        return None
    epoch, node_id = max(found)
    return node_id, epoch


def partition_status(record: ClusterRecord, node_id: int) -> dict[str, Any] | None:
    status = read_status(record.node(node_id).admin, timeout_s=STATUS_TIMEOUT_S) or {}
    return next((p for p in status.get("partitions", []) if p.get("topic") == TOPIC), None)


@dataclass(frozen=True)
class Round:
    killed: int
    old_epoch: int
    new_leader: int
    new_epoch: int
    status_s: float
    write_s: float
    resync_s: float

    def row(self) -> str:
        return (
            f"{self.killed:>6} {self.old_epoch:>5} {self.new_leader:>10} {self.new_epoch:>5} "
            f"{self.status_s * 1000:>9.0f} {self.write_s * 1000:>8.0f} {self.resync_s:>8.1f}"
        )


def run_round(directory: Path, producer: SteadyProducer) -> Round:
    record = read_cluster(directory)
    current = leader(record)
    assert current is not None, "no leader before the kill"
    victim, old_epoch = current
    acked = len(producer.acks)
    assert wait_until(lambda: len(producer.acks) > acked, timeout_s=FLOW_TIMEOUT_S), "no flow"
    start = len(producer.acks)
    assert signal_node(record.node(victim), signal.SIGKILL), f"node {victim} is not running"
    killed_at = time.monotonic()
    deadline = killed_at + FAILOVER_TIMEOUT_S
    status_at, new = None, None
    while time.monotonic() < deadline and (
        status_at is None or producer.first_ack_after(killed_at, start=start) is None
    ):
        if status_at is None:
            new = leader(record, skip=victim)
            if new is not None and new[1] > old_epoch:
                status_at = time.monotonic()
        time.sleep(STATUS_POLL_S)
    write_at = producer.first_ack_after(killed_at, start=start)
    assert status_at is not None and new is not None, f"no new leader after {FAILOVER_TIMEOUT_S} s"
    assert write_at is not None, f"no write acknowledged {FAILOVER_TIMEOUT_S} s after the kill"
    resync_s = restart_and_resync(directory, record, victim)
    return Round(
        victim, old_epoch, new[0], new[1], status_at - killed_at, write_at - killed_at, resync_s
    )


def restart_and_resync(directory: Path, record: ClusterRecord, node_id: int) -> float:
    """Start the killed node again; seconds until it is ready and back in sync."""
    started = time.monotonic()
    assert wait_until(lambda: not ports_held(record, node_id), timeout_s=READY_TIMEOUT_S)
    record = record.with_pid(node_id, start_node(record, record.node(node_id)))
    write_cluster(directory, record)
    wait_ready([record.node(node_id)], timeout_s=READY_TIMEOUT_S)
    current = leader(record)
    assert current is not None
    head = partition_status(record, current[0]) or {}
    target_hwm = int(head.get("hwm", 0))

    def in_sync() -> bool:
        now = leader(record)
        follower = partition_status(record, node_id)
        head = partition_status(record, now[0]) if now else None
        return (
            now is not None
            and head is not None
            and follower is not None
            and node_id in head.get("isr", [])
            and follower["epoch"] == head["epoch"]
            and follower["log_end_offset"] >= target_hwm
        )

    assert wait_until(in_sync, timeout_s=SYNC_TIMEOUT_S), f"node {node_id} did not resync"
    return time.monotonic() - started


def ports_held(record: ClusterRecord, node_id: int) -> bool:
    node = record.node(node_id)
    return not has_exited(node.pid) or bool(ports_in_use([node]))


@contextlib.contextmanager
def fresh_cluster() -> Iterator[LiveCluster]:
    """A 3-node cluster in a temporary directory; stopped and removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="tidelog-bench-"))
    try:
        cluster = LiveCluster(directory)
        # Every broker must list every broker before an admin client can rely on it.
        wait_for_broker_lists(read_cluster(directory))
        yield cluster
    finally:
        if (directory / "cluster.json").exists():
            stop_nodes(list(read_cluster(directory).nodes))
        shutil.rmtree(directory, ignore_errors=True)


def summary(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"{name:<22} median {statistics.median(ms):7.0f} ms   "
        f"min {min(ms):7.0f} ms   max {max(ms):7.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS_DEFAULT, choices=range(1, ROUNDS_MAX + 1), metavar="N"
    )
    parser.add_argument(
        "--no-idempotence",
        dest="idempotence",
        action="store_false",
        help="A plain acks=all producer (librdkafka then skips the idempotent drain).",
    )
    arguments = parser.parse_args()
    rounds = arguments.rounds
    with fresh_cluster() as cluster:
        create_topic(
            ClientSettings(cluster.bootstrap), TOPIC, partitions=1, replication_factor=3, configs={}
        )
        record = read_cluster(cluster.directory)
        assert wait_until(lambda: leader(record) is not None, timeout_s=READY_TIMEOUT_S)
        producer = SteadyProducer(cluster.bootstrap, idempotence=arguments.idempotence)
        producer.start()
        results: list[Round] = []
        try:
            print(
                f"{'round':>5} {'killed':>6} {'epoch':>5} {'new leader':>10} {'epoch':>5}"
                f" {'status ms':>9} {'write ms':>8} {'resync s':>8}"
            )
            for number in range(1, rounds + 1):
                r = run_round(cluster.directory, producer)
                results.append(r)
                print(f"{number:>5} {r.row()}", flush=True)
        finally:
            producer.stopping.set()
            producer.join(FAILOVER_TIMEOUT_S)
    print(summary("new leader in /status", [r.status_s for r in results]))
    print(summary("first acked write", [r.write_s for r in results]))
    print(
        f"{len(producer.acks)} writes acknowledged, {len(producer.errors)} failed"
        + (f" (first: {producer.errors[0]})" if producer.errors else "")
    )


if __name__ == "__main__":
    main()
