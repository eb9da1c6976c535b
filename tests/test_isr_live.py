"""ISR mode with real processes and real clients (docs/isr.md, scenario isr-04 live).

Five nodes (the metadata log, a majority of all nodes, survives two of them down), a topic
with `replication.mode=isr`, replication factor 3 and min.insync.replicas=1. An idempotent
acks=all confluent-kafka producer writes numbered records throughout while the test kills
the partition's leader (SIGKILL), then the next one: with one replica of three left, the
controller shrinks the ISR to it and writes are acknowledged again, which a majority quorum
cannot do. Then both come back and rejoin the ISR. Every acknowledged record is in the
final log exactly once, at its offset, and the three replicas hold the same batches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tidelog.status import read_status
from tidelog.testing.live import (
    LiveCluster,
    ProducerLoad,
    create_topic,
    dump_log,
    eventually,
    poll,
    tidelog,
)

TOPIC = "isr"
ACK_DEADLINE_S = 45.0  # a failover: the broker session timeout (9 s) and the client's retries


def partition_status(cluster: LiveCluster, node: int) -> dict[str, Any] | None:
    entry = cluster.record["nodes"][node - 1]
    status = read_status(entry["admin"])
    if status is None:
        return None
    return next((p for p in status["partitions"] if p["topic"] == TOPIC), None)


def leader_status(cluster: LiveCluster, among: tuple[int, ...]) -> dict[str, Any] | None:
    for node in among:
        found = partition_status(cluster, node)
        if found is not None and found["role"] == "leader":
            return found
    return None


def replicas_of(cluster: LiveCluster) -> tuple[int, ...]:
    found = poll(
        lambda: next(
            (s for n in cluster.nodes if (s := partition_status(cluster, n)) is not None), None
        ),
        "a replica of the topic",
    )
    return tuple(found["replicas"])


def kill(cluster: LiveCluster, node: int) -> float:
    result = tidelog("cluster", "kill", "--data-dir", str(cluster.directory), "--node", str(node))
    assert result.returncode == 0, result.stderr
    return time.monotonic()


def test_isr_mode_writes_on_with_two_of_three_replicas_down(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, nodes=5)
    try:
        create_topic(
            cluster.bootstrap,
            TOPIC,
            partitions=1,
            configs={"replication.mode": "isr", "min.insync.replicas": "1"},
        )
        replicas = replicas_of(cluster)
        described = tidelog("topics", "describe", TOPIC, "--bootstrap-server", cluster.bootstrap)
        assert "ReplicationMode: isr" in described.stdout, described.stdout + described.stderr
        eventually(lambda: leader_status(cluster, replicas), "a leader")
        load = ProducerLoad(cluster.bootstrap, TOPIC, records=20_000, rate_per_s=150)
        load.start()
        try:
            eventually(lambda: len(load.acked) >= 100, "writes before the faults")
            first = poll(lambda: leader_status(cluster, replicas), "a leader")["leader"]
            killed_at = kill(cluster, first)
            survivors = tuple(n for n in replicas if n != first)
            eventually(
                lambda: load.acked_since(killed_at) > 0,
                "a write acknowledged after the first kill",
                deadline_s=ACK_DEADLINE_S,
            )
            second = poll(lambda: leader_status(cluster, survivors), "a new leader")["leader"]
            killed_at = kill(cluster, second)
            last = next(n for n in survivors if n != second)
            eventually(
                lambda: load.acked_since(killed_at) > 0,
                "a write acknowledged with one replica of three left",
                deadline_s=ACK_DEADLINE_S,
            )
            alone = poll(lambda: leader_status(cluster, (last,)), "the last replica leads")
            assert alone["reported_isr"] == [last]  # the committed ISR: it alone
            for node in (first, second):
                restart = tidelog(
                    "cluster", "restart", "--data-dir", str(tmp_path), "--node", str(node)
                )
                assert restart.returncode == 0, restart.stderr
            eventually(
                lambda: (
                    len((leader_status(cluster, replicas) or {}).get("reported_isr") or []) == 3
                ),
                "both back in the ISR",
            )
            back_at = time.monotonic()
            eventually(lambda: load.acked_since(back_at) > 50, "writes with the ISR whole")
        finally:
            load.stop()
            load.join(90)
        assert not load.is_alive()
        check_outcome(cluster, load, replicas)
    finally:
        cluster.down()


def read_all(cluster: LiveCluster) -> dict[int, bytes]:
    """The partition's records by offset, read from the start by a consumer."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    final = {record.offset: record.value for record in consumer}
    consumer.close()
    return final


def check_outcome(cluster: LiveCluster, load: ProducerLoad, replicas: tuple[int, ...]) -> None:
    final = read_all(cluster)
    by_value: dict[bytes, list[int]] = {}
    for offset, value in final.items():
        by_value.setdefault(value, []).append(offset)
    assert len(load.acked) > 500
    lost = [v for v, offset in load.acked.items() if by_value.get(v) != [offset]]
    assert lost == [], f"{len(lost)} acknowledged records lost or moved"
    assert all(len(offsets) == 1 for offsets in by_value.values()), "a record is in the log twice"
    hwm = max(final) + 1

    def batches(node: int) -> list[tuple[Any, ...]]:
        found = dump_log(cluster.directory / f"node-{node}" / f"{TOPIC}-0")
        return [
            (b["baseOffset"], b["partitionLeaderEpoch"], b["crc"])
            for b in found
            if b["lastOffset"] < hwm
        ]

    eventually(
        lambda: len({tuple(batches(node)) for node in replicas}) == 1,
        "the replicas hold the same batches",
    )


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """Each value written with acks=all; the offsets acknowledged."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", retries=20, request_timeout_ms=10_000
    )
    try:
        futures = [producer.send(topic, value, partition=0) for value in values]
        return [future.get(timeout=60).offset for future in futures]
    finally:
        producer.close()


def test_an_unclean_election_brings_a_partition_back_and_names_what_was_lost(
    tmp_path: Path,
) -> None:
    """isr-06 live: the ISR shrinks to the leader alone, which acknowledges writes, then
    dies; with unclean.leader.election.enable a replica outside the ISR takes over, and the
    old leader, back, gives up what only it held, and says so."""
    cluster = LiveCluster(tmp_path, nodes=5)
    topic = "unclean"
    configs = {
        "replication.mode": "isr",
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "true",
    }
    try:
        create_topic(cluster.bootstrap, topic, partitions=1, configs=configs)
        first = produce(cluster.bootstrap, topic, [b"a%d" % i for i in range(10)])

        def status_of(among: tuple[int, ...]) -> dict[str, Any] | None:
            for node in among:
                status = read_status(cluster.record["nodes"][node - 1]["admin"])
                for p in (status or {}).get("partitions", []):
                    if p["topic"] == topic and p["role"] == "leader":
                        return dict(p)
            return None

        leading = poll(lambda: status_of(cluster.nodes), "a leader")
        leader, replicas = leading["leader"], tuple(leading["replicas"])
        followers = [n for n in replicas if n != leader]
        for node in followers:
            kill(cluster, node)
        eventually(
            lambda: (status_of((leader,)) or {}).get("reported_isr") == [leader],
            "the ISR shrunk to the leader alone",
        )
        alone = produce(cluster.bootstrap, topic, [b"b%d" % i for i in range(10)])
        assert alone[0] > first[-1]
        kill(cluster, leader)
        restart = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path), "--node", str(followers[0])
        )
        assert restart.returncode == 0, restart.stderr
        poll(lambda: status_of((followers[0],)), "the unclean election", deadline_s=45)
        logs = "".join(cluster.log_of(node) for node in cluster.nodes)
        assert "unclean leader election" in logs
        after = produce(cluster.bootstrap, topic, [b"c%d" % i for i in range(5)])
        assert after[0] <= alone[-1]  # the new leader's log is the truth: offsets written again
        restart = tidelog("cluster", "restart", "--data-dir", str(tmp_path), "--node", str(leader))
        assert restart.returncode == 0, restart.stderr
        named = poll(
            lambda: re.search(r"gave up offsets (\d+)\.\.(\d+)", cluster.log_of(leader)),
            "the old leader names what it gave up",
        )
        assert int(named[1]) <= alone[0] and int(named[2]) >= alone[-1]
        consumer = KafkaConsumer(
            bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
        )
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning(TopicPartition(topic, 0))
        values = [record.value for record in consumer]
        consumer.close()
        assert values == [b"a%d" % i for i in range(10)] + [b"c%d" % i for i in range(5)]
    finally:
        cluster.down()


def metadata_commands(cluster: LiveCluster, node: int) -> list[dict[str, Any]]:
    """The commands of a node's metadata log, in offset order."""
    found = subprocess.run(
        [sys.executable, "-m", "tidelog", "dump-log", "--json", "--records",
         str(cluster.directory / f"node-{node}" / "__cluster_metadata-0")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    commands = []
    for line in found.splitlines():
        for record in json.loads(line).get("records") or []:
            if (record.get("payload") or "").startswith("{"):  # not a control record
                commands.append(json.loads(record["payload"]))
    return commands


def test_a_replica_whose_disk_was_replaced_rejoins_only_once_caught_up(tmp_path: Path) -> None:
    """Rule 9 live (docs/isr.md): a follower's copy of the partition is lost while it is
    down (the disk of that log replaced). Its node starts again and registers again, as a
    new incarnation; the controller takes it out of the ISR, and the leader proposes it
    back only on what its replica reports from then on: once it holds the log again. No
    acknowledged record is lost and its log ends up the leader's."""
    cluster = LiveCluster(tmp_path, nodes=3)
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1, configs={"replication.mode": "isr"})
        replicas = replicas_of(cluster)
        eventually(lambda: leader_status(cluster, replicas), "a leader")
        before = [f"before-{i}".encode() for i in range(300)]
        offsets = produce(cluster.bootstrap, TOPIC, before)
        leader = poll(lambda: leader_status(cluster, replicas), "a leader")["leader"]
        follower = next(n for n in replicas if n != leader)
        kill(cluster, follower)
        shutil.rmtree(cluster.directory / f"node-{follower}" / f"{TOPIC}-0")
        restart = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path), "--node", str(follower)
        )
        assert restart.returncode == 0, restart.stderr
        eventually(
            lambda: len((leader_status(cluster, (leader,)) or {}).get("reported_isr") or []) == 3,
            "the wiped replica back in the ISR",
        )
        after = [f"after-{i}".encode() for i in range(100)]
        offsets += produce(cluster.bootstrap, TOPIC, after)
        commands = metadata_commands(cluster, leader)
        registrations = [
            i for i, c in enumerate(commands)
            if c.get("type") == "register_broker" and c.get("node") == follower
        ]  # fmt: skip
        assert len({commands[i]["incarnation"] for i in registrations}) == 2, registrations
        readmitted = [
            c for c in commands[registrations[-1]:]
            if c.get("type") == "alter_partition" and follower in c.get("isr", [])
        ]  # fmt: skip
        assert readmitted, "proposed back into the ISR after its registration"

        final = read_all(cluster)
        assert [final.get(o) for o in offsets] == before + after

        def batches(node: int) -> list[tuple[Any, ...]]:
            found = dump_log(cluster.directory / f"node-{node}" / f"{TOPIC}-0")
            return [(b["baseOffset"], b["partitionLeaderEpoch"], b["crc"]) for b in found]

        eventually(
            lambda: batches(follower) == batches(leader),
            "the wiped replica holds the leader's log",
        )
    finally:
        cluster.down()
