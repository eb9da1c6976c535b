"""Cutting the leader away from the others, through TCP proxies on every peer link.

Each node dials each other node through a proxy of its own (six proxies for three nodes),
so a test can cut exactly the links of one node. Cut the partition leader away: the others
must elect a new leader, and the old one must stop serving reads; it must already refuse
them by the time the new leader exists (its read lease has run out). After healing, all
three converge.

A node cut away does not name itself leader once it has stepped down, though the latest
report it holds does: it answers Metadata with no leader. The others fence it after the
broker session (2 s here) and leave it out of their Metadata, so a new client bootstrapped
on them never meets it.

The metrics count what a replica did to converge: a leader cut away with a record it
could not commit truncates it when it is back (`tidelog_log_truncations_total`), and a
follower cut away while the log start passed its log end starts its log again at the
leader's log start (`tidelog_log_resets_total`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.status import read_status
from tidelog.testing.live import (
    ask_once,
    collect_leaked_sockets,
    create_topic,
    poll,
    sample,
    scrape,
    tidelog,
)
from tidelog.testing.proxy import CutMode, TcpProxy

NODES = (1, 2, 3)
TOPIC = "cut"
DEADLINE_S = 30.0
POLL_S = 0.05
SESSION_MS = 2_000  # broker_session_timeout_ms: the others fence a node cut away this soon


class ProxiedCluster:
    """Three brokers whose every peer link runs through its own TcpProxy."""

    def __init__(self, directory: Path) -> None:
        # The brokers' ports stay bound until every proxy has taken a port of its own: a
        # port released at once could be handed to a proxy (a broker then fails to start).
        held = [socket.socket() for _ in range(3 * len(NODES))]
        try:
            for sock in held:
                sock.bind(("127.0.0.1", 0))
            ports = iter(int(sock.getsockname()[1]) for sock in held)
            self.kafka = {n: next(ports) for n in NODES}
            self.peer = {n: next(ports) for n in NODES}
            self.admin = {n: next(ports) for n in NODES}
            self.proxies = {
                (a, b): TcpProxy(target=("127.0.0.1", self.peer[b])).start()
                for a in NODES
                for b in NODES
                if a != b
            }
        finally:
            for sock in held:
                sock.close()
        self.config = directory / "broker.toml"
        self.config.write_text(f"broker_session_timeout_ms = {SESSION_MS}\n")
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        for node in NODES:
            self.processes[node] = self.start(node, directory)

    def start(self, node: int, directory: Path) -> subprocess.Popen[bytes]:
        addresses = {
            other: self.peer[node] if other == node else self.proxies[node, other].address[1]
            for other in NODES
        }
        peers = ",".join(f"{other}@127.0.0.1:{port}" for other, port in addresses.items())
        log = (directory / f"node-{node}.log").open("ab")
        argv = [
            sys.executable,
            "-m",
            "tidelog",
            "broker",
            "--node-id",
            str(node),
            "--data-dir",
            str(directory / f"node-{node}"),
            "--listen",
            f"127.0.0.1:{self.kafka[node]}",
            "--peer-listen",
            f"127.0.0.1:{self.peer[node]}",
            "--peers",
            peers,
            "--admin-listen",
            f"127.0.0.1:{self.admin[node]}",
            "--config",
            str(self.config),
        ]
        with log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka[n]}" for n in NODES)

    def status(self, node: int) -> dict[str, Any] | None:
        return read_status(f"127.0.0.1:{self.admin[node]}")

    def partition(self, node: int) -> dict[str, Any] | None:
        state = self.status(node)
        found = [p for p in (state or {}).get("partitions", []) if p["topic"] == TOPIC]
        return found[0] if found else None

    def isolate(self, node: int, mode: CutMode) -> None:
        for (a, b), proxy in self.proxies.items():
            if node in (a, b):
                proxy.cut(mode)

    def fenced_by_others(self, node: int) -> bool:
        """Whether every other node has fenced `node`: out of their Metadata."""
        return all(
            node in (self.status(other) or {}).get("fenced", []) for other in NODES if other != node
        )

    def heal(self) -> None:
        for proxy in self.proxies.values():
            proxy.heal()

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        for proxy in self.proxies.values():
            proxy.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    running = ProxiedCluster(tmp_path)
    try:
        yield running
    finally:
        running.stop()
        collect_leaked_sockets()


def wait_for(condition: Any, what: str) -> Any:
    """The first true value of `condition`."""
    return poll(lambda: condition() or None, what, deadline_s=DEADLINE_S)


def latest_offset_error(port: int) -> int:
    """The error code of a ListOffsets(latest) for the partition, asked of one node."""
    request_class = _APIS[ApiKey.LIST_OFFSETS].request_class
    topic = request_class.ListOffsetsTopic
    request = request_class(
        version=1,
        replica_id=-1,
        topics=[
            topic(
                name=TOPIC, partitions=[topic.ListOffsetsPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )
    error: int = ask_once(("127.0.0.1", port), request).topics[0].partitions[0].error_code
    return error


def metadata_leader(port: int) -> tuple[int, int]:
    """(error code, leader id) of the partition in a Metadata answer, asked of one node."""
    request_class = _APIS[ApiKey.METADATA].request_class
    request = request_class(version=1, topics=[request_class.MetadataRequestTopic(name=TOPIC)])
    partition = ask_once(("127.0.0.1", port), request).topics[0].partitions[0]
    return partition.error_code, partition.leader_id


def stable_leader(cluster: ProxiedCluster) -> int | None:
    """The node that leads the partition and answers reads (a fresh leader may not yet)."""
    for node in NODES:
        if (cluster.partition(node) or {}).get("role") == "leader":
            return node if latest_offset_error(cluster.kafka[node]) == 0 else None
    return None


def test_cutting_the_leader_away_elects_another_and_the_old_stops_reading(
    cluster: ProxiedCluster,
) -> None:
    wait_for(lambda: all((cluster.status(n) or {}).get("ready") for n in NODES), "cluster ready")
    create_topic(cluster.bootstrap, TOPIC, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(20):
        producer.send(TOPIC, value=f"before-{i}".encode())
    producer.flush(timeout=30)
    producer.close()
    old = wait_for(lambda: stable_leader(cluster), "a leader that serves reads")
    old_epoch = cluster.partition(old)["epoch"]  # type: ignore[index]

    cluster.isolate(old, CutMode.RESET)
    others = [n for n in NODES if n != old]
    new = wait_for(
        lambda: next(
            (
                n
                for n in others
                if (p := cluster.partition(n)) and p["role"] == "leader" and p["epoch"] > old_epoch
            ),
            None,
        ),
        "a new leader among the others",
    )
    # No other leader can exist while the old one's lease holds: it refuses reads already.
    assert latest_offset_error(cluster.kafka[old]) != 0
    wait_for(lambda: latest_offset_error(cluster.kafka[new]) == 0, "the new leader serves reads")
    wait_for(
        lambda: (cluster.partition(old) or {}).get("role") != "leader", "the old leader steps down"
    )
    # Its latest report names it, but it knows better: no leader it can name.
    assert metadata_leader(cluster.kafka[old]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)

    cluster.heal()
    wait_for(
        lambda: (
            len(
                {
                    (p["hwm"], p["log_end_offset"], p["epoch"])
                    for p in [
                        cluster.partition(n) or {"hwm": -1, "log_end_offset": -2, "epoch": n}
                        for n in NODES
                    ]
                }
            )
            == 1
        ),
        "all replicas converged after healing",
    )


def test_a_truncation_and_a_reset_are_counted_where_they_happen(cluster: ProxiedCluster) -> None:
    wait_for(lambda: all((cluster.status(n) or {}).get("ready") for n in NODES), "cluster ready")
    create_topic(cluster.bootstrap, TOPIC, partitions=1)

    def produce(bootstrap: str, count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        try:
            for i in range(count):
                producer.send(TOPIC, value=f"r-{i}".encode()).get(timeout=DEADLINE_S)
        finally:
            producer.close()

    def counted(node: int, name: str) -> float | None:
        return sample(scrape(f"127.0.0.1:{cluster.admin[node]}"), name, topic=TOPIC, partition=0)

    def log_end(node: int) -> int:
        return int((cluster.partition(node) or {}).get("log_end_offset", -1))

    produce(cluster.bootstrap, 5)
    old = wait_for(lambda: stable_leader(cluster), "a leader that serves reads")
    others = [n for n in NODES if n != old]
    committed = log_end(old)
    cluster.isolate(old, CutMode.RESET)
    # Asked of the old leader alone: it appends, and cannot commit.
    outcomes: list[object] = []
    lone = Producer(
        {"bootstrap.servers": f"127.0.0.1:{cluster.kafka[old]}", "message.timeout.ms": 3000}
    )
    lone.produce(
        TOPIC, b"never committed", partition=0, on_delivery=lambda e, m: outcomes.append(e)
    )
    lone.flush(DEADLINE_S)
    assert len(outcomes) == 1 and outcomes[0] is not None, outcomes
    assert log_end(old) == committed + 1
    new = wait_for(
        lambda: next(
            (n for n in others if (cluster.partition(n) or {}).get("role") == "leader"), None
        ),
        "a new leader among the others",
    )
    wait_for(lambda: cluster.fenced_by_others(old), "the old leader fenced by the others")
    produce(",".join(f"127.0.0.1:{cluster.kafka[n]}" for n in others), 3)
    assert counted(old, "tidelog_log_truncations_total") is None
    cluster.heal()
    wait_for(lambda: counted(old, "tidelog_log_truncations_total") == 1, "the truncation counted")
    wait_for(lambda: log_end(old) == log_end(new), "the old leader caught up")

    behind = next(n for n in NODES if n != new)
    cluster.isolate(behind, CutMode.RESET)
    reachable = ",".join(f"127.0.0.1:{cluster.kafka[n]}" for n in NODES if n != behind)
    wait_for(lambda: cluster.fenced_by_others(behind), "the follower fenced by the others")
    produce(reachable, 4)
    cut = log_end(new) - 1
    deleted = tidelog(
        "delete-records", TOPIC, "--partition", "0", "--offset", str(cut),
        "--bootstrap-server", f"127.0.0.1:{cluster.kafka[new]}",
    )  # fmt: skip
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert counted(behind, "tidelog_log_resets_total") is None
    cluster.heal()
    wait_for(lambda: counted(behind, "tidelog_log_resets_total") == 1, "the reset counted")
    wait_for(
        lambda: (cluster.partition(behind) or {}).get("log_start_offset") == cut,
        "the follower starts where its leader does",
    )
