"""The protocol fuzzer against a live 3-node cluster (a measurement, not a test).

    .venv/bin/python bench/fuzz.py [--inputs 1000000] [--first-seed 0] [--jobs 4] [--json]

A fresh cluster (`tidelog cluster up` in a temporary directory) with a topic `fuzz`, the
fuzzer's target (it produces, fetches, trims and may delete it), and a topic `checked` of 3
partitions, out of its reach, that a real producer keeps writing to with acks=all while
`--jobs` processes send fuzzed requests (tidelog.testing.fuzz: every API and version served,
mutated fields, damaged framing) round-robin to the three brokers. Afterwards: every broker
must still be running and serving, have logged no traceback and no failed handler, and hold
no request bytes; every acknowledged record of the producer must be readable; and every
replica of every partition must hold the same committed log (each node's log of `checked`
compared batch by batch with `tidelog dump-log`, below the lowest HWM). Prints the inputs,
answers, error answers, closed connections, crashes (must be 0) and each broker's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.address import parse_address
from tidelog.status import read_status
from tidelog.testing.fuzz import FuzzReport, fuzz_broker
from tidelog.testing.live import LiveCluster, create_topic

PARTITIONS = 3
CHECKED = "checked"  # not a name the fuzzer draws
CHUNK = 10_000


def status(node: dict[str, str]) -> dict[str, object]:
    answer = read_status(node["admin"], timeout_s=10)
    if answer is None:
        raise SystemExit(f"no /status from {node['admin']}")
    return answer


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fuzz_chunk(address: tuple[str, int], first: int) -> dict[str, object]:
    report = fuzz_broker(address, seeds=range(first, first + CHUNK))
    return report.as_dict()


def produce_forever(bootstrap: str, stop: threading.Event, acked: list[bytes]) -> None:
    """A real producer, acks=all and idempotent, writing while the fuzzing goes on."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked.append(message.value())  # type: ignore[attr-defined]

    number = 0
    while not stop.is_set():
        producer.produce(CHECKED, f"record-{number}".encode(), on_delivery=delivered)
        number += 1
        producer.poll(0.01)
    producer.flush(60)


def read_all(bootstrap: str) -> set[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fuzz-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(CHECKED, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    idle_until = time.monotonic() + 10
    while time.monotonic() < idle_until:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
            idle_until = time.monotonic() + 5
    consumer.close()
    return seen


def committed_batches(node: dict[str, str], partition: int, end: int) -> list[object]:
    """(offset, epoch, CRC, verdict) of a node's batches of `checked` below `end`."""
    directory = Path(node["data_dir"]) / f"{CHECKED}-{partition}"
    done = subprocess.run(
        [sys.executable, "-m", "tidelog", "dump-log", str(directory), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [
        (row["baseOffset"], row["partitionLeaderEpoch"], row["crc"], row["isValid"])
        for row in rows
        if row["lastOffset"] < end
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="inputs are seeds first..first+inputs-1"
    )
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="tidelog-fuzz-"))
    cluster = LiveCluster(directory)
    nodes = cluster.record["nodes"]
    started = time.monotonic()
    try:
        create_topic(cluster.bootstrap, "fuzz", partitions=PARTITIONS)
        create_topic(cluster.bootstrap, CHECKED, partitions=PARTITIONS)
        stop, acked = threading.Event(), []
        writer = threading.Thread(target=produce_forever, args=(cluster.bootstrap, stop, acked))
        writer.start()
        total = FuzzReport()
        addresses = [parse_address(n["kafka"]) for n in nodes]
        with ProcessPoolExecutor(args.jobs) as pool:
            chunks = range(args.first_seed, args.first_seed + args.inputs, CHUNK)
            results = pool.map(
                fuzz_chunk, [addresses[i % len(addresses)] for i, _ in enumerate(chunks)], chunks
            )
            for done in results:
                total.inputs += int(done["inputs"])  # type: ignore[call-overload]
                total.responses += int(done["responses"])  # type: ignore[call-overload]
                total.error_responses += int(done["error_responses"])  # type: ignore[call-overload]
                total.closed += int(done["closed_connections"])  # type: ignore[call-overload]
                total.unanswered += int(done["unanswered"])  # type: ignore[call-overload]
        stop.set()
        writer.join()
        fuzz_s = time.monotonic() - started
        crashes = 0
        for node in nodes:
            alive = Path(f"/proc/{node['pid']}").exists()
            log = (Path(node["data_dir"]) / "broker.log").read_text()
            crashes += (not alive) + log.count("Traceback") + log.count(" failed: ")
        held = [status(node)["request_bytes_held"] for node in nodes]
        rss = [round(peak_rss_mib(int(node["pid"])), 1) for node in nodes]
        seen = read_all(cluster.bootstrap)
        lost = [value for value in acked if value not in seen]
        states = [status(node) for node in nodes]
        mismatches = 0
        for partition in range(PARTITIONS):
            hwms = [
                p["hwm"]
                for s in states
                for p in s["partitions"]  # type: ignore[attr-defined]
                if p["topic"] == CHECKED and p["partition"] == partition
            ]
            end = min(hwms) if hwms else 0
            copies = [committed_batches(node, partition, end) for node in nodes]
            mismatches += sum(copy != copies[0] for copy in copies[1:])
            mismatches += sum(not valid for copy in copies for *_, valid in copy)
        result = {
            **total.as_dict(),
            "inputs_per_s": round(total.inputs / fuzz_s),
            "crashes": crashes,
            "request_bytes_held_after": held,
            "peak_rss_mib": rss,
            "acked_records": len(acked),
            "acked_records_lost": len(lost),
            "replica_mismatches": mismatches,
        }
    finally:
        cluster.down()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    ok = not crashes and not lost and not mismatches and not any(held)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
