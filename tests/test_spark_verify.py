"""`tidelog verify-replicas` (a Spark batch job) against a real 3-node cluster.

Replicas that hold the same committed batches verify clean, with lag 0 once every follower
has caught up. A batch whose bytes rot on a follower's disk is never served by that broker:
the broker checks each batch's CRC-32C as it reads and answers KAFKA_STORAGE_ERROR, so the
report names that replica and the command exits 1; the follower then sets the damage aside
and fetches it again from its leader, and the next verification is clean. A broker that
finds such a batch below its checkpointed HWM when it starts does the same.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from tidelog.cli import main
from tidelog.records import HEADER_SIZE
from tidelog.spark.replicas import (
    BATCH,
    REPLICA,
    SCHEMA,
    BatchCopy,
    Mismatch,
    ReplicaRead,
    compare_rows,
    verify_replicas,
)
from tidelog.testing.live import LiveCluster, create_topic, poll, tidelog
from tidelog.tools.verify_cmd import report_lines

pytestmark = pytest.mark.slow

T = TypeVar("T")
DEADLINE_S = 60.0
POLL_S = 0.2
STATUS_TIMEOUT_S = 2.0
RECORDS = 2_000
VERIFY_TIMEOUT_S = 240.0  # a JVM of its own, on a loaded 2-core machine
LAG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}: max lag is (?P<lag>\d+) for partition "
    r"(?P<topic>\S+)-(?P<partition>\d+) at offset (?P<offset>\d+) among (?P<among>.+) replicas$"
)
# Admin endpoints are on 127.0.0.1: never route them through an http_proxy from the env.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Marks = dict[int, dict[int, dict[str, Any]]]
"""partition -> node -> that replica's entry of the node's admin /status."""


def produce(bootstrap: str, topic: str, count: int) -> None:
    """`count` keyed records with acks=all; every one acknowledged."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0}
    )
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for i in range(count):
        producer.produce(topic, f"value-{i}".encode(), f"k{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []


def replica_marks(cluster: LiveCluster, topic: str, nodes: list[int]) -> Marks | None:
    """Each replica on `nodes` of `topic`, from its node's admin /status; None while a node
    does not answer."""
    marks: Marks = {}
    for node in cluster.record["nodes"]:
        if node["id"] not in nodes:
            continue
        try:
            with DIRECT.open(f"http://{node['admin']}/status", timeout=STATUS_TIMEOUT_S) as reply:
                status = json.load(reply)
        except (OSError, ValueError):
            return None
        for entry in status["partitions"]:
            if entry["topic"] == topic:
                marks.setdefault(entry["partition"], {})[node["id"]] = entry
    return marks


def caught_up(cluster: LiveCluster, topic: str, partitions: int, nodes: list[int]) -> Marks | None:
    """The marks once every replica on `nodes` of every partition has one leader and the
    same HWM, equal to its log end offset; else None."""
    marks = replica_marks(cluster, topic, nodes)
    if marks is None or sorted(marks) != list(range(partitions)):
        return None
    for replicas in marks.values():
        entries = list(replicas.values())
        if sorted(replicas) != sorted(nodes) or entries[0]["leader"] is None:
            return None
        if {(e["hwm"], e["log_end_offset"], e["leader"]) for e in entries} != {
            (entries[0]["hwm"], entries[0]["hwm"], entries[0]["leader"])
        }:
            return None
    return marks


def wait_caught_up(
    cluster: LiveCluster, topic: str, partitions: int, nodes: tuple[int, ...] = (1, 2, 3)
) -> Marks:
    return poll(lambda: caught_up(cluster, topic, partitions, list(nodes)), f"{topic} in sync")


def verify_cli(cluster: LiveCluster, topic: str, *flags: str) -> Result:
    return CliRunner().invoke(
        main, ["verify-replicas", topic, "--bootstrap-server", cluster.bootstrap, *flags]
    )


@dataclass(frozen=True)
class Victim:
    """A follower's copy of one data batch below its HWM, in a topic of its own."""

    follower: int
    segment: Path  # the follower's segment file
    batch: Any  # the batch as dump-log --json describes it
    hwm: int  # the follower's HWM
    address: str  # the follower's Kafka address


def victim_batch(cluster: LiveCluster, topic: str) -> Victim:
    """A new topic of 1 partition with RECORDS records, every replica caught up; a follower
    of its partition, and that follower's first data batch below its HWM."""
    create_topic(cluster.bootstrap, topic, partitions=1)
    produce(cluster.bootstrap, topic, RECORDS)
    marks = wait_caught_up(cluster, topic, 1)
    leader = next(iter(marks[0].values()))["leader"]
    follower = min(node for node in marks[0] if node != leader)
    data_dir = Path(cluster.record["nodes"][follower - 1]["data_dir"])
    segment = data_dir / f"{topic}-0" / "00000000000000000000.log"
    dumped = tidelog("dump-log", str(segment), "--json")
    assert dumped.returncode == 0, dumped.stderr
    batches = [json.loads(line) for line in dumped.stdout.splitlines()]
    hwm = marks[0][follower]["hwm"]
    batch = next(b for b in batches if not b["isControl"] and b["lastOffset"] < hwm)
    address = cluster.record["nodes"][follower - 1]["kafka"]
    return Victim(follower, segment, batch, hwm, address)


def flip_record_byte(segment: Path, batch: Any) -> None:
    """Invert one byte in the middle of the batch's records (covered by its CRC-32C)."""
    position = batch["position"] + HEADER_SIZE + (batch["size"] - HEADER_SIZE) // 2
    with segment.open("r+b") as file:
        file.seek(position)
        (value,) = file.read(1)
        file.seek(position)
        file.write(bytes([value ^ 0xFF]))


def batch_validity(segment: Path, base_offset: int) -> bool:
    dumped = tidelog("dump-log", str(segment), "--json")
    batches = [json.loads(line) for line in dumped.stdout.splitlines()]
    return bool(next(b for b in batches if b["baseOffset"] == base_offset)["isValid"])


@pytest.mark.timeout(VERIFY_TIMEOUT_S + 300)  # its own job's runs, then the command's JVM
def test_in_sync_replicas_verify_clean(
    cluster: LiveCluster, spark: SparkSession, tmp_path: Path
) -> None:
    topic = "verified"
    create_topic(cluster.bootstrap, topic, partitions=3)
    produce(cluster.bootstrap, topic, RECORDS)
    marks = wait_caught_up(cluster, topic, 3)
    hwms = {p: replicas[1]["hwm"] for p, replicas in marks.items()}

    rounds: list[tuple[int, ...]] = []
    report = verify_replicas(
        spark,
        cluster.bootstrap,
        topic,
        on_partitions=lambda done: rounds.append(tuple(p.partition for p in done.partitions)),
    )

    assert rounds == [(0,), (1,), (2,)]  # one round per partition, each reported when done
    assert report.ok
    assert (report.mismatch_count, report.mismatches, report.errors) == (0, (), ())
    assert [(p.partition, p.lag, p.end_offset, p.hwm_max) for p in report.partitions] == [
        (p, 0, hwms[p], hwms[p]) for p in range(3)
    ]
    assert all(
        p.start_offset == 0 and p.answered_count == p.replica_count == 3 for p in report.partitions
    )
    for check in report.partitions:
        replicas = [r for r in report.replicas if r.partition == check.partition]
        assert [(r.replica, r.hwm, r.log_start_offset) for r in replicas] == [
            (node, hwms[check.partition], 0) for node in (1, 2, 3)
        ]
        # A control batch and at least one data batch, the same count on every replica.
        assert check.batch_count >= 2
        assert {r.batch_count for r in replicas} == {check.batch_count}

    # The command in a pipe, as a script runs it (its own process and JVM): each partition's
    # line arrives on its own, in the order the partitions are verified, stamped when it
    # was, before the verdict.
    argv = [sys.executable, "-m", "tidelog", "verify-replicas", topic]
    argv += ["--bootstrap-server", cluster.bootstrap]
    arrivals = lines_as_they_come(argv, tmp_path / "stderr", timeout_s=VERIFY_TIMEOUT_S)
    lines = [line for _, line in arrivals]
    found = [LAG_LINE.match(line) for line in lines[:3]]
    assert [m.groupdict() if m else lines for m in found] == [
        {"lag": "0", "topic": topic, "partition": str(p), "offset": str(hwms[p]), "among": "3"}
        for p in range(3)
    ]
    assert lines[3:] == [f"verified {report.batch_count} batches in 3 partitions: 0 mismatches"]
    stamps = [line.partition(": ")[0] for line in lines[:3]]
    assert stamps == sorted(stamps), lines
    times = [at for at, _ in arrivals[:3]]
    assert times == sorted(set(times)), arrivals  # each partition's line in a read of its own

    as_json = json.loads(verify_cli(cluster, topic, "--json").output)
    assert (as_json["ok"], as_json["mismatch_count"]) == (True, 0)
    assert [p["lag"] for p in as_json["partitions"]] == [0, 0, 0]


def lines_as_they_come(
    argv: list[str], stderr: Path, *, timeout_s: float
) -> list[tuple[float, str]]:
    """A command's stdout lines, each with the time its read returned (its stderr goes to
    the file `stderr`); fails unless it exits 0 in time."""
    arrivals: list[tuple[float, str]] = []
    pending = b""
    deadline = time.monotonic() + timeout_s
    with (
        stderr.open("wb") as errors,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors) as command,
    ):
        assert command.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(command.stdout.fileno(), selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(timeout=deadline - time.monotonic()):
                    continue
                chunk = os.read(command.stdout.fileno(), 65536)
                if not chunk:
                    break
                at = time.monotonic()
                *whole, pending = (pending + chunk).split(b"\n")
                arrivals += [(at, line.decode()) for line in whole]
        status = command.wait(timeout=max(deadline - time.monotonic(), 1.0))
    assert status == 0, (arrivals, stderr.read_text(errors="replace")[-4000:])
    return arrivals


def test_a_rotten_batch_on_a_running_follower_is_reported_then_repaired(
    cluster: LiveCluster, spark: SparkSession
) -> None:
    topic = "rotting"
    victim = victim_batch(cluster, topic)
    follower, segment, batch = victim.follower, victim.segment, victim.batch
    hwm, address = victim.hwm, victim.address
    flip_record_byte(segment, batch)
    assert not batch_validity(segment, batch["baseOffset"])

    result = verify_cli(cluster, topic)

    # The broker checks the CRC as it reads and answers KAFKA_STORAGE_ERROR instead of the
    # batch: the replica is an error (no HWM known), the two others still agree.
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    lag = LAG_LINE.match(lines[0])
    assert lag is not None, lines
    assert (lag["lag"], lag["offset"], lag["among"]) == ("0", str(hwm), "2 of 3")
    assert lines[1] == (
        f"replica {follower} of partition {topic}-0 could not be read: "
        f"{address}, fetch offset 0: KAFKA_STORAGE_ERROR"
    )
    assert re.fullmatch(
        r"verified \d+ batches in 1 partition: 0 mismatches, 1 replica error", lines[2]
    ), lines
    broker_log = (segment.parents[1] / "broker.log").read_text()
    assert f"needs repair: corrupt batch at offset {batch['baseOffset']}" in broker_log
    assert_repaired(cluster, spark, topic)


def assert_repaired(cluster: LiveCluster, spark: SparkSession, topic: str) -> None:
    """Every replica caught up again, and a verification finds them identical."""
    wait_caught_up(cluster, topic, 1)
    report = verify_replicas(spark, cluster.bootstrap, topic)
    assert report.ok
    assert (report.mismatch_count, report.errors) == (0, ())
    (check,) = report.partitions
    assert (check.answered_count, check.lag) == (3, 0)


def test_a_rotten_batch_found_at_restart_is_repaired(
    cluster: LiveCluster, spark: SparkSession
) -> None:
    topic = "rotten"
    victim = victim_batch(cluster, topic)
    segment, batch = victim.segment, victim.batch
    cluster.down()  # a clean stop checkpoints each HWM
    flip_record_byte(segment, batch)

    up = tidelog("cluster", "up", "--data-dir", str(cluster.directory))

    # Recovery finds the batch below the checkpointed HWM: the broker sets it aside, starts,
    # and its replica fetches the rest from its leader.
    assert up.returncode == 0, up.stderr
    broker_log = (segment.parents[1] / "broker.log").read_text()
    assert f"{topic}-0: under repair: damaged records were set aside" in broker_log
    assert_repaired(cluster, spark, topic)


def batch_row(
    partition: int, replica: int, copy: tuple[int, int, int, int, bool]
) -> tuple[Any, ...]:
    base, last, epoch, crc, crc_ok = copy
    fields = (base, last, epoch, crc, crc_ok, None, None, None)
    return (BATCH, "t", partition, replica, f"h:{replica}", *fields)


def replica_row(
    partition: int, replica: int, hwm: int | None, start: int | None, error: str | None = None
) -> tuple[Any, ...]:
    return (REPLICA, "t", partition, replica, f"h:{replica}", *[None] * 5, hwm, start, error)


def test_differing_missing_and_crc_failing_copies_are_mismatches(spark: SparkSession) -> None:
    """The comparison alone, on rows as the source yields them: partition 0 is compared on
    [max log start 2, min HWM 8); partition 1 without its replica 3, which failed."""
    copies = {
        1: [(0, 1, 1, 0xA, True), (2, 2, 1, 0xB, True), (3, 4, 1, 0xC, True)],
        2: [(2, 2, 1, 0xB, True), (3, 4, 1, 0xC, True), (5, 6, 1, 0xD, False)],
        3: [(0, 1, 1, 0xA, True), (2, 2, 1, 0xB, True), (5, 6, 1, 0xD, True)],
    }
    copies[1] += [(5, 6, 1, 0xD, True), (7, 7, 2, 0xE, True), (8, 9, 2, 0xF, True)]
    copies[2] += [(7, 7, 2, 0xE, True), (8, 9, 2, 0xF, True)]
    copies[3] += [(7, 7, 3, 0x77, True)]
    rows = [batch_row(0, r, c) for r, batches in copies.items() for c in batches]
    rows += [replica_row(0, 1, 10, 0), replica_row(0, 2, 10, 2), replica_row(0, 3, 8, 0)]
    rows += [batch_row(1, r, c) for r in (1, 2) for c in [(0, 0, 1, 1, True), (1, 4, 1, 2, True)]]
    rows += [
        replica_row(1, 1, 5, 0),
        replica_row(1, 2, 5, 0),
        replica_row(1, 3, None, None, "boom"),
    ]
    reads = [ReplicaRead("t", p, r, f"h:{r}", 0) for p in (0, 1) for r in (1, 2, 3)]

    report = compare_rows("t", reads, spark.createDataFrame(rows, SCHEMA))

    assert report.mismatches == (
        Mismatch(0, 3, (BatchCopy(1, 4, 1, 0xC, True), BatchCopy(2, 4, 1, 0xC, True)), (3,)),
        Mismatch(0, 5, tuple(BatchCopy(r, 6, 1, 0xD, r != 2) for r in (1, 2, 3)), ()),
        Mismatch(
            0,
            7,
            (
                BatchCopy(1, 7, 2, 0xE, True),
                BatchCopy(2, 7, 2, 0xE, True),
                BatchCopy(3, 7, 3, 0x77, True),
            ),
            (),
        ),
    )
    assert [(r.partition, r.replica, r.batch_count) for r in report.replicas] == [
        (0, 1, 6),
        (0, 2, 5),
        (0, 3, 4),
        (1, 1, 2),
        (1, 2, 2),
        (1, 3, 0),
    ]
    assert report_lines(report, datetime(2026, 1, 2, 3, 4, 5, 678_000)) == [
        "2026-01-02 03:04:05,678: max lag is 2 for partition t-0 at offset 8 among 3 replicas",
        "2026-01-02 03:04:05,678: max lag is 0 for partition t-1 at offset 5 among 2 of 3 replicas",
        "replica 3 of partition t-1 could not be read: boom",
        "mismatch in partition t-0 at offset 3: replica 1 (last offset 4, epoch 1, crc "
        "0x0000000c), replica 2 (last offset 4, epoch 1, crc 0x0000000c), replica 3 missing",
        "mismatch in partition t-0 at offset 5: replica 1 (last offset 6, epoch 1, crc "
        "0x0000000d), replica 2 (last offset 6, epoch 1, crc 0x0000000d, CRC-32C WRONG), "
        "replica 3 (last offset 6, epoch 1, crc 0x0000000d)",
        "mismatch in partition t-0 at offset 7: replica 1 (last offset 7, epoch 2, crc "
        "0x0000000e), replica 2 (last offset 7, epoch 2, crc 0x0000000e), replica 3 (last "
        "offset 7, epoch 3, crc 0x00000077)",
        "verified 6 batches in 2 partitions: 3 mismatches, 1 replica error",
    ]
