"""`tidelog cluster` with real brokers: up, a Kafka client, kill the leader, up again, down.

The brokers are real processes on 127.0.0.1 started by the command under test; the test
signals nothing itself (the fixture stops only the PIDs cluster.json records).
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tidelog.cli import main
from tidelog.tools.cluster import plan_cluster, ports_in_use, read_cluster, stop_nodes

DEADLINE_S = 60.0
POLL_S = 0.2
TOPIC = "events"
PORT_TRIES = 20
BASE_PORTS = range(30_000, 40_000, 300)
GC_PASSES = 3

# kafka-python may leave the socket of a refused connection unclosed.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["cluster", *args])
    assert result.exit_code == 0, result.stderr
    return result.exit_code, result.stdout


def eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(POLL_S)


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    if (tmp_path / "cluster.json").exists():
        stop_nodes(list(read_cluster(tmp_path).nodes), timeout_s=DEADLINE_S)
    # Collect those sockets now, with their warning ignored, not later in another test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(GC_PASSES):
            gc.collect()


def free_base_port(directory: Path) -> int:
    for base in BASE_PORTS[:PORT_TRIES]:
        record = plan_cluster(directory, nodes=3, base_port=base, module="tidelog")
        if not ports_in_use(list(record.nodes)):
            return base
    raise AssertionError("no free block of ports")


def status_of(directory: Path) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = json.loads(
        cli("status", "--data-dir", str(directory), "--json")[1]
    )["nodes"]
    return nodes


def leader_of_topic(directory: Path) -> int | None:
    leaders = [n["id"] for n in status_of(directory) if f"{TOPIC}-0" in n["leads"]]
    return leaders[0] if len(leaders) == 1 else None


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20)
    try:
        for value in values:
            producer.send(TOPIC, value, partition=0).get(timeout=DEADLINE_S)
    finally:
        producer.close(timeout=DEADLINE_S)


def consume_all(bootstrap: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
    finally:
        consumer.close()


def test_a_cluster_survives_losing_its_leader(cluster_dir: Path) -> None:
    base = free_base_port(cluster_dir)
    _, bootstrap = cli(
        "up", "--nodes", "3", "--data-dir", str(cluster_dir), "--base-port", str(base)
    )
    bootstrap = bootstrap.strip()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
    finally:
        admin.close()
    eventually(lambda: leader_of_topic(cluster_dir) is not None)
    produce(bootstrap, [b"a", b"b"])
    old_leader = leader_of_topic(cluster_dir)
    assert old_leader is not None
    cli("kill", "--data-dir", str(cluster_dir), "--node", str(old_leader))
    eventually(lambda: leader_of_topic(cluster_dir) not in (None, old_leader))
    # The client waits until the node is back: kafka-python leaks the sockets of refused
    # connections, and they would surface as warnings in a later test.
    cli("up", "--data-dir", str(cluster_dir))
    produce(bootstrap, [b"c"])
    assert [node["state"] for node in status_of(cluster_dir)] == ["up", "up", "up"]
    assert consume_all(bootstrap, 3) == [b"a", b"b", b"c"]
    _, stdout = cli("down", "--data-dir", str(cluster_dir))
    assert stdout == "node 1: stopped\nnode 2: stopped\nnode 3: stopped\n"
