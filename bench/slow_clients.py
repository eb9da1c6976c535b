"""Broker memory with clients that never read (a measurement, not a test).

    .venv/bin/python bench/slow_clients.py [--mib 200] [--clients 6] [--hold-s 20] [--json]

A fresh 3-node cluster (`tidelog cluster up` in a temporary directory) and a topic of one
partition holding `--mib` MiB of 1000-byte records. Then `--clients` connections each
pipeline 64 Fetches of up to 50 MiB from its leader and never read an answer, and as many
more each announce a 90 MiB request and send 1 MiB of it. Prints the leader's resident set
before, the highest seen while they hold on (`--hold-s`), and 30 s after they leave
(targets: under 512 MiB while they hold on; back within 64 MiB of before afterwards).
The script stops only the cluster it started.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from tidelog.address import parse_address
from tidelog.status import read_status
from tidelog.testing.fuzz import fetch_request
from tidelog.testing.live import LiveCluster, create_topic

RECORD = b"r" * 1000
PIPELINED = 64
PARTIAL_BYTES = 90 << 20
SENT_OF_PARTIAL = 1 << 20
AFTER_S = 30
MIB = 1 << 20


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def leader_of(cluster: LiveCluster, topic: str) -> dict[str, str]:
    for node in cluster.record["nodes"]:
        state = read_status(node["admin"], timeout_s=5) or {"partitions": []}
        if any(p["topic"] == topic and p["role"] == "leader" for p in state["partitions"]):
            return dict(node)
    raise SystemExit(f"no leader of {topic}")


def fill(bootstrap: str, topic: str, mib: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for _ in range(mib * MIB // len(RECORD)):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--hold-s", type=float, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cluster = LiveCluster(Path(tempfile.mkdtemp(prefix="tidelog-slow-")))
    try:
        create_topic(cluster.bootstrap, "slow", partitions=1)
        fill(cluster.bootstrap, "slow", args.mib)
        leader = leader_of(cluster, "slow")
        pid = int(leader["pid"])
        host, port = parse_address(leader["kafka"])
        before = rss_mib(pid)
        socks = []
        for client in range(args.clients):
            sock = socket.create_connection((host, int(port)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            requests = (
                fetch_request("slow", max_bytes=50 * MIB, correlation_id=client * 100 + n)
                for n in range(PIPELINED)
            )
            sock.sendall(b"".join(requests))
            socks.append(sock)
            partial = socket.create_connection((host, int(port)))
            partial.sendall(struct.pack(">i", PARTIAL_BYTES) + b"\x00" * SENT_OF_PARTIAL)
            socks.append(partial)
        peak = before
        hold_until = time.monotonic() + args.hold_s
        while time.monotonic() < hold_until:
            peak = max(peak, rss_mib(pid))
            time.sleep(0.2)
        for sock in socks:
            sock.close()
        left = time.monotonic()
        timeline = []
        while time.monotonic() - left < AFTER_S:
            timeline.append(round(rss_mib(pid)))
            time.sleep(1)
        after = rss_mib(pid)
        result = {
            "log_mib": args.mib,
            "clients": args.clients,
            "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(peak, 1),
            "rss_30s_after_mib": round(after, 1),
            "rss_each_second_after_mib": timeline[:5],
        }
    finally:
        cluster.down()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if peak < 512 and after - before < 64 else 1


if __name__ == "__main__":
    sys.exit(main())
