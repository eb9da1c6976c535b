"""Scenario 16 with real brokers: a follower whose committed data rots repairs itself.

A byte flips in the middle of a committed batch in a follower's segment file. Found at a
restart (recovery scans the active segment) or by a read (a Fetch with a rack id, served by
the follower itself), the batch is never served: the follower sets the damage aside in
quarantine/, starts that partition again under repair, fetches the rest from its leader,
and ends with a log identical to every other replica's, batch for batch. No acknowledged
record is lost, the node starts (or keeps running), and its other partitions serve
throughout: a producer writes to them with acks=all and sees no error.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.records import HEADER_SIZE, iter_batches
from tidelog.spark.replicas import ReplicaRead, ReplicaReadError, fetch_once
from tidelog.spark.wire import BrokerConnection
from tidelog.testing.live import LiveCluster, create_topic, eventually, poll, tidelog

pytestmark = pytest.mark.slow

T = TypeVar("T")
DEADLINE_S = 60.0
POLL_S = 0.2
RECORDS = 3000
BATCHES = 10
# Admin endpoints are on 127.0.0.1: never route them through an http_proxy from the env.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def produce(bootstrap: str, topic: str, count: int) -> set[bytes]:
    """`count` records with acks=all, in BATCHES flushes (so as many batches at least);
    the values acknowledged (every one)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: set[bytes] = set()

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        acked.add(message.value())

    for i in range(count):
        producer.produce(topic, f"{topic}-{i}".encode(), on_delivery=delivered)
        producer.poll(0)
        if i % (count // BATCHES) == 0:
            assert producer.flush(DEADLINE_S) == 0
    assert producer.flush(DEADLINE_S) == 0
    assert len(acked) == count
    return acked


def consume_all(bootstrap: str, topic: str, count: int) -> set[bytes]:
    """Every value of partition 0 of `topic`, read from the start, at least `count`."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(seen) < count:
            assert time.monotonic() < deadline, f"read {len(seen)} of {count}"
            for message in consumer.consume(500, timeout=POLL_S):
                assert message.error() is None, message.error()
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


def statuses(cluster: LiveCluster) -> dict[int, dict[str, Any]] | None:
    """Each node's admin /status; None while one does not answer."""
    out = {}
    for node in cluster.record["nodes"]:
        try:
            with DIRECT.open(f"http://{node['admin']}/status", timeout=2) as reply:
                out[node["id"]] = json.load(reply)
        except (OSError, ValueError):
            return None
    return out


def replicas_of(cluster: LiveCluster, topic: str) -> dict[int, dict[str, Any]] | None:
    """node -> its replica of `topic`-0, once all three have one leader, the same HWM
    equal to their log end, and none is repairing; else None."""
    found = statuses(cluster)
    if found is None:
        return None
    replicas = {
        node: entry
        for node, status in found.items()
        for entry in status["partitions"]
        if entry["topic"] == topic and entry["partition"] == 0
    }
    marks = {
        (e["leader"], e["hwm"], e["log_end_offset"], e["repairing"]) for e in replicas.values()
    }
    if len(replicas) != 3 or len(marks) != 1:
        return None
    leader, hwm, end, repairing = marks.pop()
    return replicas if leader is not None and hwm == end and not repairing else None


def batches_of(directory: Path) -> list[tuple[int, int, int, bool]]:
    """(base offset, last offset, CRC, valid) of each batch dump-log finds in `directory`."""
    dumped = tidelog("dump-log", str(directory), "--json")
    assert dumped.returncode == 0, dumped.stderr
    rows = [json.loads(line) for line in dumped.stdout.splitlines()]
    return [(r["baseOffset"], r["lastOffset"], r["crc"], r["isValid"]) for r in rows]


@dataclass(frozen=True)
class Damage:
    """A byte flipped in a follower's copy of a committed data batch."""

    follower: int
    partition_dir: Path
    base_offset: int


def rot_a_follower(cluster: LiveCluster, topic: str) -> Damage:
    """Invert a byte in the middle of the records of a follower's middle data batch of
    `topic`-0 below its HWM (covered by its CRC-32C)."""
    replicas = poll(lambda: replicas_of(cluster, topic), f"{topic} in sync")
    leader = next(iter(replicas.values()))["leader"]
    follower = min(node for node in replicas if node != leader)
    partition_dir = Path(cluster.record["nodes"][follower - 1]["data_dir"]) / f"{topic}-0"
    segment = partition_dir / "00000000000000000000.log"
    dumped = tidelog("dump-log", str(segment), "--json")
    rows = [json.loads(line) for line in dumped.stdout.splitlines()]
    data = [r for r in rows if not r["isControl"] and r["lastOffset"] < replicas[follower]["hwm"]]
    assert len(data) > 1, data
    batch = data[len(data) // 2]
    position = batch["position"] + HEADER_SIZE + (batch["size"] - HEADER_SIZE) // 2
    with segment.open("r+b") as file:
        file.seek(position)
        (value,) = file.read(1)
        file.seek(position)
        file.write(bytes([value ^ 0xFF]))
    assert not next(r for r in batches_of(segment) if r[0] == batch["baseOffset"])[3]
    return Damage(follower, partition_dir, batch["baseOffset"])


def assert_repaired(cluster: LiveCluster, topic: str, damage: Damage, acked: set[bytes]) -> None:
    """Every replica in sync and holding the same valid batches; the damaged bytes kept in
    quarantine/; every acknowledged record readable."""
    poll(lambda: replicas_of(cluster, topic), f"{topic} repaired")
    copies = [batches_of(Path(node["data_dir"]) / f"{topic}-0") for node in cluster.record["nodes"]]
    assert copies[0] == copies[1] == copies[2]
    assert all(valid for *_, valid in copies[0])
    quarantine = damage.partition_dir / "quarantine" / f"{damage.base_offset:020d}"
    set_aside = batches_of(quarantine)
    assert set_aside[0][0] == damage.base_offset
    assert not set_aside[0][3]  # the damaged batch, as it was found
    assert consume_all(cluster.bootstrap, topic, len(acked)) >= acked
    broker_log = (damage.partition_dir.parent / "broker.log").read_text()
    assert f"{topic}-0: under repair: damaged records were set aside" in broker_log
    assert f"{topic}-0: repaired" in broker_log


class Writer(threading.Thread):
    """acks=all writes to `topic` until stopped; every delivery report is kept."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic = topic
        self.stopping = threading.Event()
        self.acked = 0
        self.failed: list[str] = []

    def delivered(self, error: Any, _message: Any) -> None:
        if error is None:
            self.acked += 1
        else:
            self.failed.append(str(error))

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            number += 1
            self.producer.produce(self.topic, str(number).encode(), on_delivery=self.delivered)
            self.producer.poll(0.005)
        self.producer.flush(DEADLINE_S)


def test_a_follower_that_finds_a_rotten_batch_at_restart_starts_and_repairs(
    cluster: LiveCluster,
) -> None:
    topic = "rotten"
    create_topic(cluster.bootstrap, topic, partitions=1)
    acked = produce(cluster.bootstrap, topic, RECORDS)
    damage = rot_a_follower(cluster, topic)

    # A clean stop checkpoints the HWM; the start's recovery finds the batch below it.
    restarted = tidelog(
        "cluster", "restart", "--data-dir", str(cluster.directory), "--node", str(damage.follower)
    )

    assert restarted.returncode == 0, restarted.stderr
    assert_repaired(cluster, topic, damage, acked)


def test_a_read_that_finds_a_rotten_batch_repairs_that_partition_alone(
    cluster: LiveCluster,
) -> None:
    topic, bystander = "rotting", "bystander"
    create_topic(cluster.bootstrap, topic, partitions=1)
    create_topic(cluster.bootstrap, bystander, partitions=3)
    acked = produce(cluster.bootstrap, topic, RECORDS)
    writer = Writer(cluster.bootstrap, bystander)
    writer.start()
    try:
        damage = rot_a_follower(cluster, topic)
        pid = cluster.node_status(damage.follower)["pid"]
        address = cluster.record["nodes"][damage.follower - 1]["kafka"]
        read = ReplicaRead(topic, 0, damage.follower, address, 0)

        # The follower serves a Fetch with a rack id itself: the batch fails its CRC there.
        with BrokerConnection(address) as connection, pytest.raises(ReplicaReadError) as refused:
            while True:  # up to the damaged batch
                answer = fetch_once(connection, read, read.start_offset)
                read = ReplicaRead(topic, 0, damage.follower, address, next_offset(answer))

        assert str(refused.value) == "KAFKA_STORAGE_ERROR"
        assert_repaired(cluster, topic, damage, acked)
    finally:
        writer.stopping.set()
        writer.join(DEADLINE_S)
    assert (writer.failed, writer.acked > 0) == ([], True)
    assert cluster.node_status(damage.follower)["pid"] == pid  # the node never stopped


def next_offset(answer: Any) -> int:
    """The offset after the last batch of a Fetch answer (it holds one at least)."""
    headers = [header for _, header in iter_batches(bytes(answer.records or b""))]
    assert headers, "the replica answered no batch below its HWM"
    return int(headers[-1].next_offset)


def lose_a_followers_copy(
    cluster: LiveCluster, topic: str, lose: Callable[[Path], None], pick: Callable[..., int]
) -> tuple[int, int]:
    """Write to a new `topic`, kill the follower of its partition 0 that `pick` chooses,
    `lose` part of its data directory (given the directory), start it again and write
    more: it catches up, every replica ends with the same batches and no acknowledged
    record is lost. (leader, follower)."""
    create_topic(cluster.bootstrap, topic, partitions=1)
    acked = produce(cluster.bootstrap, topic, RECORDS)
    replicas = poll(lambda: replicas_of(cluster, topic), f"{topic} in sync")
    leader = next(iter(replicas.values()))["leader"]
    follower = pick(node for node in replicas if node != leader)
    killed = tidelog(
        "cluster", "kill", "--data-dir", str(cluster.directory), "--node", str(follower)
    )
    assert killed.returncode == 0, killed.stderr
    lose(Path(cluster.record["nodes"][follower - 1]["data_dir"]))

    restarted = tidelog(
        "cluster", "restart", "--data-dir", str(cluster.directory), "--node", str(follower)
    )

    assert restarted.returncode == 0, restarted.stderr
    acked |= produce(cluster.bootstrap, topic, RECORDS // 10)
    poll(lambda: replicas_of(cluster, topic), f"{topic}: the emptied follower caught up")
    copies = [batches_of(Path(node["data_dir"]) / f"{topic}-0") for node in cluster.record["nodes"]]
    assert copies[0] == copies[1] == copies[2]
    assert consume_all(cluster.bootstrap, topic, len(acked)) >= acked
    return leader, follower


def test_a_follower_whose_copy_was_lost_catches_up(cluster: LiveCluster) -> None:
    """Scenario 26 live: a follower's partition directory is lost while it is down (its
    disk replaced, or deleted by hand). It starts empty, with nothing that says what it
    held; its leader learns it from its answers, forgets its match and sends it the whole
    log: every replica ends with the same batches, and no acknowledged record is lost."""
    topic = "lost"
    leader, follower = lose_a_followers_copy(
        cluster, topic, lambda data_dir: shutil.rmtree(data_dir / f"{topic}-0"), min
    )
    leader_dir = Path(cluster.record["nodes"][leader - 1]["data_dir"])
    warned = f"{topic}-0: node {follower}'s copy ends at 0, below the "
    assert warned in (leader_dir / "broker.log").read_text()


def wipe(data_dir: Path) -> None:
    """A data directory's disk replaced: the directory is there again, empty."""
    shutil.rmtree(data_dir)
    data_dir.mkdir()


def test_a_node_whose_whole_data_directory_was_lost_rejoins(cluster: LiveCluster) -> None:
    """A node's disk replaced while it is down: its whole data directory (the metadata
    log, every partition, the offsets of the groups) is gone. It starts empty, fetches
    the metadata log, hosts every partition again and catches up each one from its
    leader (scenario 26 for each): the copies end identical, no acknowledged record is
    lost, and a topic created after it came back has a replica on it in sync."""
    before = statuses(cluster)
    assert before is not None
    _, follower = lose_a_followers_copy(cluster, "wiped", wipe, max)
    later = "after-the-wipe"
    create_topic(cluster.bootstrap, later, partitions=3)
    cluster.wait_hosted_everywhere(later, 3)
    data_dir = Path(cluster.record["nodes"][follower - 1]["data_dir"])
    assert sorted(p.name for p in data_dir.iterdir() if p.name.startswith(later)) == [
        f"{later}-{partition}" for partition in range(3)
    ]
    # KIP-858: the new disk is a new directory, and the copies on it new voters. Every
    # partition's leaders replaced the old copy's key by the new one's in their voter sets.
    old_id = before[follower]["directory_id"]
    new_id = poll(lambda: (statuses(cluster) or {}).get(follower), "the node's status")[
        "directory_id"
    ]
    assert new_id not in (old_id, 0)

    def replaced() -> bool:
        found = statuses(cluster)
        if found is None:
            return False
        copies: dict[tuple[str, int], list[list[int]]] = {}
        rows = []
        for node, status in found.items():
            for entry in status["partitions"]:
                if entry["topic"] in ("wiped", later):
                    key = (entry["topic"], entry["partition"])
                    copies.setdefault(key, []).append([node, entry["directory"]])
                    rows.append(entry)
        return len(rows) == 3 * (1 + 3) and all(
            sorted(row["voters"]) == sorted(copies[(row["topic"], row["partition"])])
            for row in rows
        )

    eventually(replaced, "every voter set names the new directory")
