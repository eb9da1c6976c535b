"""Measure how fast a follower repairs a rotten log on a real 3-node cluster (a measurement,
not a test).

    .venv/bin/python bench/repair.py [--mib 256] [--record-bytes 1000]

A fresh cluster on 127.0.0.1 (free ports, a temporary directory), topic `repair` with 1
partition and replication factor 3, filled with `--mib` MiB of records (acks=all). Once
every replica is in sync, one follower is stopped (SIGTERM, a clean stop), a byte flips in
the records of its second data batch, and it is started again: its start reads the log,
finds the batch, sets it and everything after it aside, and fetches it all again from the
leader. Prints how long the node took to be ready, then to be in sync again (its HWM and
log end the leader's, no longer repairing; polled every POLL_S), and the repaired MiB/s.
Every wait is bounded; the script stops only the cluster it started.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tidelog.records import HEADER_SIZE
from tidelog.status import read_status
from tidelog.testing.live import LiveCluster, create_topic, tidelog
from tidelog.tools.cluster import wait_until

TOPIC = "repair"
POLL_S = 0.05
DEADLINE_S = 600.0
MIB = 1024 * 1024


def fill(bootstrap: str, mib: int, record_bytes: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0}
    )
    value = bytes(record_bytes)
    for _ in range(mib * MIB // record_bytes):
        while True:
            try:
                producer.produce(TOPIC, value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0


def replicas(cluster: LiveCluster) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for node in cluster.record["nodes"]:
        status = read_status(node["admin"])
        for entry in [] if status is None else status["partitions"]:
            if entry["topic"] == TOPIC:
                out[node["id"]] = entry
    return out


def in_sync(cluster: LiveCluster) -> bool:
    found = replicas(cluster)
    marks = {(e["leader"], e["hwm"], e["log_end_offset"], e["repairing"]) for e in found.values()}
    return len(found) == 3 and len(marks) == 1 and not next(iter(marks))[3]


def rot(segment: Path) -> int:
    """Flip a byte in the records of the second data batch; the bytes set aside after it."""
    dumped = tidelog("dump-log", str(segment), "--json", timeout=DEADLINE_S)
    rows = [json.loads(line) for line in dumped.stdout.splitlines()]
    batch = [row for row in rows if not row["isControl"]][1]
    position = batch["position"] + HEADER_SIZE + 1
    with segment.open("r+b") as file:
        file.seek(position)
        (value,) = file.read(1)
        file.seek(position)
        file.write(bytes([value ^ 0xFF]))
    return segment.stat().st_size - int(batch["position"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--record-bytes", type=int, default=1000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="tidelog-repair-"))
    cluster = LiveCluster(directory / "cluster")
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1)
        fill(cluster.bootstrap, args.mib, args.record_bytes)
        assert wait_until(lambda: in_sync(cluster), timeout_s=DEADLINE_S), "not in sync"
        leader = next(iter(replicas(cluster).values()))["leader"]
        follower = min(node for node in (1, 2, 3) if node != leader)
        node_dir = directory / "cluster" / f"node-{follower}"
        node = ["--data-dir", str(directory / "cluster"), "--node", str(follower)]
        # A clean restart checkpoints the HWM over the whole log; then a stop with nothing
        # new to write.
        tidelog("cluster", "restart", *node, timeout=DEADLINE_S)
        assert wait_until(lambda: in_sync(cluster), timeout_s=DEADLINE_S), "not in sync"
        tidelog("cluster", "kill", *node)
        set_aside = rot(node_dir / f"{TOPIC}-0" / "00000000000000000000.log")
        started = time.monotonic()
        up = tidelog("cluster", "up", "--data-dir", str(directory / "cluster"), timeout=DEADLINE_S)
        assert up.returncode == 0, up.stderr
        ready_s = time.monotonic() - started
        assert wait_until(lambda: in_sync(cluster), timeout_s=DEADLINE_S), "not repaired"
        repaired_s = time.monotonic() - started
        mib = set_aside / MIB
        print(
            f"{mib:.0f} MiB set aside and fetched again: node ready after {ready_s:.1f} s, "
            f"in sync after {repaired_s:.1f} s ({mib / repaired_s:.0f} MiB/s)"
        )
    finally:
        cluster.down()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
