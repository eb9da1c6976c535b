"""Broker memory with a large log and a slow consumer (a measurement, not a test).

    .venv/bin/python bench/memory.py [--gib 2] [--record-size 1000] [--base-port 23000]

A fresh 3-node cluster (`tidelog cluster up` in a temporary directory). `tidelog perf
produce` writes `--gib` GiB of records (acks=all, as fast as it goes) into a topic of 3
partitions while a slow consumer reads it from the start with big fetches, pausing
SLOW_PAUSE_S after each batch of records it takes, so the brokers serve reads far behind
the log end throughout. Prints the brokers' peak resident set (VmHWM), the size of the log
on disk, and how far the slow consumer got. The script stops only the cluster it started.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as ConfluentPartition

PARTITIONS = 3
SLOW_BATCH = 1000
SLOW_PAUSE_S = 0.05
GIB = 1 << 30


def tidelog(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tidelog", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"tidelog {' '.join(args[:2])}: {done.stderr.strip()}")
    return done.stdout


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def slow_consumer(bootstrap: str, stop: threading.Event, read: list[int]) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "memory-slow",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    consumer.assign([ConfluentPartition("memory", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            read[0] += len(consumer.consume(SLOW_BATCH, 0.5))
            time.sleep(SLOW_PAUSE_S)
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--base-port", type=int, default=23000)
    args = parser.parse_args()
    records = int(args.gib * GIB / args.record_size)
    with tempfile.TemporaryDirectory(prefix="tidelog-memory-") as temp:
        data = Path(temp) / "cluster"
        tidelog("cluster", "up", "--nodes", "3", "--data-dir", str(data),
                "--base-port", str(args.base_port))  # fmt: skip
        try:
            record = json.loads((data / "cluster.json").read_text())
            bootstrap, pids = record["bootstrap"], [node["pid"] for node in record["nodes"]]
            tidelog("topics", "create", "memory", "--partitions", str(PARTITIONS),
                    "--replication-factor", "3", "--bootstrap-server", bootstrap)  # fmt: skip
            stop, read = threading.Event(), [0]
            reader = threading.Thread(target=slow_consumer, args=(bootstrap, stop, read))
            reader.start()
            try:
                print(tidelog("perf", "produce", "--topic", "memory", "--num-records",
                              str(records), "--record-size", str(args.record_size),
                              "--throughput", "-1", "--timeout", "900000",
                              "--bootstrap-server", bootstrap).strip())  # fmt: skip
            finally:
                stop.set()
                reader.join()
            log_bytes = sum(f.stat().st_size for f in data.rglob("memory-*/*.log"))
            peaks = [peak_rss_mib(pid) for pid in pids]
        finally:
            tidelog("cluster", "down", "--data-dir", str(data))
    print(f"log on disk: {log_bytes / 3 / GIB:.2f} GiB per node; slow consumer read {read[0]} "
          f"of {records} records while it was written")  # fmt: skip
    print("peak RSS per broker (VmHWM): " + ", ".join(f"{peak:.0f} MiB" for peak in peaks))


if __name__ == "__main__":
    main()
