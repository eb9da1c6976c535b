"""A full disk under real brokers, on small tmpfs mounts (mounting one needs root).

- Under the partitions of one topic on one node (their directories on a tmpfs that fills
  up; the node leads one of them): that node stops acknowledging their writes, says so in
  one log line with no traceback, stays up, and catches up by itself once space returns;
  the partition it led moves to another node; an idempotent acks=all producer loses
  nothing and sees no error, and the replicas end identical.
- Under a whole node: `tidelog cluster restart` refuses to start it with a clear message,
  and starts it once space returns.
- A broker whose disk has no room to create its files exits with EXIT_DISK and one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.server.app import EXIT_DISK
from tidelog.testing.live import LiveCluster, create_topic, free_base_port, poll, tidelog

pytestmark = pytest.mark.slow

T = TypeVar("T")
DEADLINE_S = 60.0
POLL_S = 0.2
TMPFS_SIZE = "8m"
FILL_CHUNK_BYTES = 1 << 20
FILES_MAX = 100_000
PARTITIONS = 3
ACKED_AFTER_FULL = 200
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `path` (created) for the block; unmounted after (lazily: a broker
    may still hold a file open there)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert mounted.returncode == 0, f"mounting a tmpfs (needs root): {mounted.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file in `directory` until its disk has no byte left; the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    size = FILL_CHUNK_BYTES
    try:
        while size:
            try:
                os.write(fd, bytes(size))
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                size //= 2  # then smaller writes, down to a byte
    finally:
        os.close(fd)
    return filler


def node_status(cluster: LiveCluster, node: int) -> dict[str, Any] | None:
    admin = cluster.record["nodes"][node - 1]["admin"]
    try:
        with DIRECT.open(f"http://{admin}/status", timeout=2) as reply:
            status: dict[str, Any] = json.load(reply)
    except (OSError, ValueError):
        return None
    return status


def replica(cluster: LiveCluster, node: int, topic: str, partition: int) -> dict[str, Any] | None:
    status = node_status(cluster, node)
    entries = [] if status is None else status["partitions"]
    return next((e for e in entries if e["topic"] == topic and e["partition"] == partition), None)


def in_sync(cluster: LiveCluster, topic: str, partition: int) -> bool | None:
    """True once the three replicas of the partition have one leader and one HWM equal to
    their log end, none repairing or waiting for its disk; else None."""
    entries = [replica(cluster, node, topic, partition) for node in (1, 2, 3)]
    if any(entry is None for entry in entries):
        return None
    marks = {
        (e["leader"], e["hwm"], e["log_end_offset"], e["repairing"], e["disk_error"])
        for e in entries
        if e is not None
    }
    if len(marks) != 1:
        return None
    leader, hwm, end, repairing, disk_error = marks.pop()
    return (leader is not None and hwm == end and not repairing and disk_error is None) or None


class Writer(threading.Thread):
    """Idempotent acks=all writes of numbered values until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )
        self.topic = topic
        self.stopping = threading.Event()
        self.acked: set[bytes] = set()
        self.failed: list[str] = []

    def delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked.add(message.value())
        else:
            self.failed.append(str(error))

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            number += 1
            self.producer.produce(self.topic, str(number).encode(), on_delivery=self.delivered)
            self.producer.poll(0.002)
        self.producer.flush(DEADLINE_S)

    def stop(self) -> None:
        self.stopping.set()
        self.join(DEADLINE_S)


def consume_all(bootstrap: str, topic: str, wanted: set[bytes]) -> set[bytes]:
    """The values of every partition of `topic`, read from the start, until all `wanted`."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not wanted <= seen:
            assert time.monotonic() < deadline, f"read {len(seen & wanted)} of {len(wanted)}"
            for message in consumer.consume(1000, timeout=POLL_S):
                assert message.error() is None, message.error()
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


def batches_of(directory: Path) -> list[tuple[int, int, int]]:
    dumped = tidelog("dump-log", str(directory), "--json")
    assert dumped.returncode == 0, dumped.stderr
    rows = [json.loads(line) for line in dumped.stdout.splitlines()]
    return [(r["baseOffset"], r["lastOffset"], r["crc"]) for r in rows]


def test_a_full_disk_under_a_topic_on_one_node_stops_its_acks_and_recovers_alone(
    tmp_path: Path,
) -> None:
    topic, node = "full", 2
    directory = tmp_path / "cluster"
    node_dir = directory / f"node-{node}"
    with tmpfs(node_dir / "tmpfs", f"size={TMPFS_SIZE}") as mount:
        for partition in range(PARTITIONS):  # every partition of the topic on the tmpfs
            (mount / f"{topic}-{partition}").mkdir()
            (node_dir / f"{topic}-{partition}").symlink_to(mount / f"{topic}-{partition}")
        cluster = LiveCluster(directory)
        writer = Writer(cluster.bootstrap, topic)
        try:
            create_topic(cluster.bootstrap, topic, partitions=PARTITIONS)
            pid = cluster.node_status(node)["pid"]
            writer.start()
            poll(lambda: len(writer.acked) > ACKED_AFTER_FULL or None, "writes acknowledged")
            filler = fill(mount)
            poll(lambda: waits_for_disk(cluster, node, topic), "disk full")
            acked = len(writer.acked)
            poll(lambda: len(writer.acked) > acked + ACKED_AFTER_FULL or None, "writes go on")
            assert node_status(cluster, node) is not None  # the node serves throughout

            filler.unlink()
            for partition in range(PARTITIONS):
                poll(lambda p=partition: in_sync(cluster, topic, p), f"{topic}-{partition}")
            writer.stop()
            assert writer.failed == []
            assert consume_all(cluster.bootstrap, topic, writer.acked) >= writer.acked
            for partition in range(PARTITIONS):
                poll(lambda p=partition: in_sync(cluster, topic, p), f"{topic}-{partition}")
                copies = [
                    batches_of(directory / f"node-{n}" / f"{topic}-{partition}") for n in (1, 2, 3)
                ]
                assert copies[0] == copies[1] == copies[2]
            assert cluster.node_status(node)["pid"] == pid
            broker_log = poll(lambda: outage_over(node_dir / "broker.log"), "outage logged")
        finally:
            writer.stop()
            cluster.down()
    outage = [line for line in broker_log.splitlines() if " ERROR " in line]
    assert len(outage) == 1, outage
    assert f"ERROR tidelog.server.partition: {topic}-" in outage[0]
    assert f": disk full (No space left on device: {node_dir}/{topic}-" in outage[0]
    assert "Traceback" not in broker_log


def waits_for_disk(cluster: LiveCluster, node: int, topic: str) -> bool | None:
    entries = [replica(cluster, node, topic, p) for p in range(PARTITIONS)]
    return any(entry is not None and entry["disk_error"] for entry in entries) or None


def outage_over(broker_log: Path) -> str | None:
    text = broker_log.read_text()
    return text if "the disk takes writes again: disk full" in text else None


def test_cluster_restart_on_a_full_disk_says_so_and_starts_once_space_returns(
    tmp_path: Path,
) -> None:
    node = 3
    directory = tmp_path / "cluster"
    with tmpfs(directory / f"node-{node}", f"size={TMPFS_SIZE}") as mount:
        cluster = LiveCluster(directory)
        try:
            filler = fill(mount)
            restart = ["cluster", "restart", "--data-dir", str(directory), "--node", str(node)]
            refused = tidelog(*restart)

            assert refused.returncode == 1
            assert refused.stderr.startswith(
                f"error: node {node}: the disk holding {mount} is full ("
            ), refused.stderr
            assert refused.stderr.rstrip().endswith("free space, then start it again")
            assert "Traceback" not in refused.stderr

            filler.unlink()
            started = tidelog("cluster", "up", "--data-dir", str(directory))
            assert started.returncode == 0, started.stderr
        finally:
            cluster.down()
        assert "Traceback" not in (mount / "broker.log").read_text()


def test_a_broker_with_no_room_for_its_files_exits_with_one_line(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "size=1m,nr_inodes=64") as mount:
        data_dir = mount / "node"
        data_dir.mkdir()
        for number in range(FILES_MAX):  # every inode: no file can be created
            try:
                (mount / f"f{number}").touch()
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                break
        base = free_base_port()
        peer = f"127.0.0.1:{base + 100}"
        started = subprocess.run(
            [
                *(sys.executable, "-m", "tidelog", "broker", "--node-id=1"),
                *(f"--data-dir={data_dir}", f"--listen=127.0.0.1:{base}"),
                *(f"--peer-listen={peer}", f"--peers=1@{peer}"),
            ],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )

    assert started.returncode == EXIT_DISK
    lines = started.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "CRITICAL tidelog.broker: cannot start: disk full (No space left on device: " in lines[0]
    assert lines[0].endswith("free space (or fix the disk) and start again")
