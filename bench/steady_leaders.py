"""Count leader elections under steady load on a loaded machine (a measurement, not a test).

    .venv/bin/python bench/steady_leaders.py [--seconds 600] [--burners 6] [--rate 2000]

A fresh 3-node cluster on 127.0.0.1 (free ports, a temporary directory), topic `steady`
with 6 partitions and replication factor 3. An idempotent acks=all confluent-kafka producer
writes at `--rate` records per second for `--seconds`, while `--burners` processes spin on
the CPU to keep the machine loaded (or run the test suite beside it and pass 0). With no
fault, no leader should change: the figure is the number of elections (epochs begun, from
each partition's leader epoch in /status, the metadata log's included) over the run, with
the load average sampled every 10 s. Every wait is bounded; the script stops only the
cluster and the processes it started.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tidelog.status import read_status
from tidelog.testing.live import LiveCluster
from tidelog.tools.client_kafka import ClientSettings, create_topic

TOPIC = "steady"
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 4  # the brokers' offsets_topic_partitions
PARTITIONS = 6
SECONDS_MAX = 3600
SAMPLE_S = 10.0
STATUS_TIMEOUT_S = 2.0
LOG_LINES_SHOWN = 20


def burn(until: float) -> None:
    """Spin on the CPU until the monotonic clock passes `until`."""
    while time.monotonic() < until:
        sum(range(10_000))


def epochs(record: dict[str, Any]) -> dict[str, int]:
    """The newest epoch any node reports for each partition (the metadata log too)."""
    found: dict[str, int] = {}
    for node in record["nodes"]:
        status = read_status(node["admin"], timeout_s=STATUS_TIMEOUT_S) or {}
        for p in status.get("partitions", []):
            key = f"{p['topic']}-{p['partition']}"
            found[key] = max(found.get(key, 0), int(p["epoch"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--burners", type=int, default=6)
    parser.add_argument("--rate", type=int, default=2000, help="records per second")
    args = parser.parse_args()
    seconds = min(max(args.seconds, 10.0), SECONDS_MAX)
    with tempfile.TemporaryDirectory(prefix="tidelog-steady-") as tmp:
        cluster = LiveCluster(Path(tmp) / "cluster")
        burners: list[multiprocessing.Process] = []
        try:
            create_topic(
                ClientSettings.of(cluster.bootstrap, {}),
                TOPIC,
                partitions=PARTITIONS,
                replication_factor=3,
                configs={},
            )
            cluster.wait_hosted_everywhere(TOPIC, PARTITIONS)
            # The controller creates __consumer_offsets once every broker is known: its
            # first elections are no leader change.
            cluster.wait_hosted_everywhere(OFFSETS_TOPIC, OFFSETS_PARTITIONS)
            producer = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "log_level": 0,
                }
            )
            before = epochs(cluster.record)
            end = time.monotonic() + seconds
            for _ in range(args.burners):
                burner = multiprocessing.Process(target=burn, args=(end,), daemon=True)
                burner.start()
                burners.append(burner)
            loads: list[float] = []
            errors: list[str] = []
            sent = 0
            started = time.monotonic()
            next_sample = started
            while time.monotonic() < end:
                now = time.monotonic()
                while sent < (now - started) * args.rate:
                    producer.produce(
                        TOPIC,
                        value=b"s%09d" % sent,
                        on_delivery=lambda error, _m: errors.append(str(error)) if error else None,
                    )
                    sent += 1
                producer.poll(0.01)
                if now >= next_sample:
                    loads.append(os.getloadavg()[0])
                    next_sample += SAMPLE_S
            producer.flush(60)
            after = epochs(cluster.record)
            elections = {key: after[key] - before.get(key, 0) for key in after}
            changed = {key: count for key, count in elections.items() if count}
            print(f"{seconds:.0f} s of load at {args.rate} records/s, {args.burners} burners")
            print(
                f"load average (1 min): median {statistics.median(loads):.1f}, "
                f"min {min(loads):.1f}, max {max(loads):.1f} ({len(loads)} samples)"
            )
            print(f"records sent {sent}, delivery errors {len(errors)}")
            print(f"elections: {sum(elections.values())} in {len(elections)} partitions {changed}")
            for node in (1, 2, 3):  # what each node logged of those partitions' roles
                lines = [
                    line
                    for line in cluster.log_of(node).splitlines()
                    if any(f"{key}: " in line for key in changed)
                ]
                for line in lines[-LOG_LINES_SHOWN:]:
                    print(f"  {line}")
        finally:
            for burner in burners:
                burner.terminate()
                burner.join(timeout=10)
            cluster.down()


if __name__ == "__main__":
    main()
