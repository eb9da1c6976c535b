"""Measure an elastic cluster's moves on real brokers (a measurement, not a test).

    .venv/bin/python bench/reassign.py [--partitions 1000] [--rate 3000] [--window 20]

A fresh 3-node cluster on 127.0.0.1 (free ports, a temporary directory), topic `elastic`
with `--partitions` partitions and replication factor 3. An idempotent acks=all
confluent-kafka producer writes to every partition (`ProducerLoad`, at most `--rate`
records a second, so the figure is the cluster's when it cannot keep up). Then:

1. `before`: the acknowledged rate over `--window` seconds.
2. `tidelog cluster add-node --voter` starts node 4 (a metadata voter too, so the quorum
   keeps three voters when node 1 leaves), and a quarter of the partitions (every fourth)
   move one replica onto it (AlterPartitionReassignments, in batches of 100): the time
   until ListPartitionReassignments is empty, and the acknowledged rate meanwhile
   (`during`, and its ratio to `before`).
3. `tidelog cluster remove-node` drains node 1 (every replica it holds moves to the
   others) and removes it: how many replicas it held, the time, replicas a second.
4. Node 2 dies (SIGKILL) and comes back on an empty data directory (a disk replaced):
   the time until every partition it holds names its new copy in its leader's voter set
   again (full replication: KIP-853/858's new copy, replaced by the leaders).
5. The load stops; every acknowledged record is read back (`lost` counts those that are
   not), and `errors` lists what the producer was told after its retries.

Prints one line per phase and a JSON summary. Every wait is bounded; the script stops
only the cluster it started (`tidelog cluster down`, by the PIDs in its cluster.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPartition

from tidelog.status import access_for, read_status
from tidelog.testing.live import LiveCluster, ProducerLoad
from tidelog.testing.live import tidelog as run_tidelog

TOPIC = "elastic"
BATCH = 100  # partitions per AlterPartitionReassignments
POLL_S = 0.5


def tidelog(*args: str, timeout: float = 900) -> str:
    done = run_tidelog(*args, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"tidelog {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def acked_between(load: ProducerLoad, start: float, end: float) -> int:
    return sum(1 for moment in list(load.acked_at) if start <= moment < end)


def wait_moves_done(admin: KafkaAdminClient, deadline_s: float) -> float:
    started = time.monotonic()
    while admin.list_partition_reassignments():
        if time.monotonic() - started > deadline_s:
            raise SystemExit(f"moves still in progress after {deadline_s:g} s")
        time.sleep(POLL_S)
    return time.monotonic() - started


def read_back(bootstrap: str, partitions: int) -> set[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    found: set[bytes] = set()
    idle = 0
    try:
        while idle < 20:
            messages = consumer.consume(10_000, 0.5)
            if not messages:
                idle += 1
                continue
            idle = 0
            found.update(m.value() for m in messages if m.error() is None)
    finally:
        consumer.close()
    return found


def held_by(admin: KafkaAdminClient, node: int) -> int:
    (described,) = admin.describe_topics([TOPIC])
    return sum(1 for p in described["partitions"] if node in p["replica_nodes"])


def statuses(directory: Path) -> dict[int, dict[str, Any]]:
    record = json.loads((directory / "cluster.json").read_text())
    found = {}
    for node in record["nodes"]:
        status = read_status(node["admin"], access=access_for(directory))
        if status is not None:
            found[int(node["id"])] = status
    return found


def fully_replicated(directory: Path, node: int) -> bool:
    """Every partition of TOPIC that `node` hosts names its copy (its directory) among
    the voters of its leader."""
    found = statuses(directory)
    mine = found.get(node)
    if mine is None or not mine["ready"]:
        return False
    copies = {(p["partition"]): p["directory"] for p in mine["partitions"] if p["topic"] == TOPIC}
    leaders = {
        p["partition"]: p
        for status in found.values()
        for p in status["partitions"]
        if p["topic"] == TOPIC and p["role"] == "leader"
    }
    return bool(copies) and all(
        partition in leaders and [node, directory] in leaders[partition]["voters"]
        for partition, directory in copies.items()
    )


def replace_disk(directory: Path, node: int, deadline_s: float) -> float:
    record = json.loads((directory / "cluster.json").read_text())
    (entry,) = [n for n in record["nodes"] if n["id"] == node]
    tidelog("cluster", "kill", "--data-dir", str(directory), "--node", str(node))
    data_dir = Path(entry["data_dir"])
    for child in data_dir.iterdir():
        if child.name != "broker.log":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    started = time.monotonic()
    tidelog("cluster", "restart", "--data-dir", str(directory), "--node", str(node))
    while not fully_replicated(directory, node):
        if time.monotonic() - started > deadline_s:
            raise SystemExit(f"node {node} not fully replicated after {deadline_s:g} s")
        time.sleep(POLL_S)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=3000.0, help="records a second, at most")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of `before`")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds per phase")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-reassign-"))
    directory = root / "cluster"
    cluster = LiveCluster(directory, nodes=3, metrics=False)
    result: dict[str, Any] = {"partitions": args.partitions}
    try:
        tidelog(
            "topics", "create", TOPIC, "--partitions", str(args.partitions),
            "--replication-factor", "3", "--bootstrap-server", cluster.bootstrap,
        )  # fmt: skip
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60_000)
        load = ProducerLoad(
            cluster.bootstrap,
            TOPIC,
            records=10**9,
            rate_per_s=args.rate,
            deadline_s=args.deadline * 4,
            partition=None,
            **{"queue.buffering.max.messages": 200_000},
        )
        load.start()
        warm = time.monotonic()
        while len(load.acked) < 1000 and time.monotonic() - warm < args.deadline:
            time.sleep(POLL_S)
        start = time.monotonic()
        time.sleep(args.window)
        before = acked_between(load, start, time.monotonic()) / args.window
        result["before_per_s"] = round(before, 1)
        print(f"before: {before:.0f} records/s acknowledged", flush=True)

        tidelog("cluster", "add-node", "--data-dir", str(directory), "--voter")
        moving = range(0, args.partitions, 4)
        (described,) = admin.describe_topics([TOPIC])
        placement = {p["partition_index"]: p["replica_nodes"] for p in described["partitions"]}
        moves = {}
        for partition in moving:
            replicas = list(placement[partition])
            replicas[partition % 3] = 4
            moves[KafkaPartition(TOPIC, partition)] = replicas
        started = time.monotonic()
        items = list(moves.items())
        for first in range(0, len(items), BATCH):
            answer = admin.alter_partition_reassignments(dict(items[first : first + BATCH]))
            refused = {tp: error for tp, error in answer.items() if error is not None}
            if refused:
                raise SystemExit(f"moves refused: {refused}")
        wait_moves_done(admin, args.deadline)
        ended = time.monotonic()
        during = acked_between(load, started, ended) / max(ended - started, 1e-9)
        result.update(
            moved=len(moves),
            move_s=round(ended - started, 1),
            during_per_s=round(during, 1),
            ratio=round(during / before, 2) if before else None,
        )
        print(
            f"move: {len(moves)} partitions onto node 4 in {ended - started:.1f} s, "
            f"{during:.0f} records/s acknowledged meanwhile ({during / before:.2f}x)",
            flush=True,
        )

        held = held_by(admin, 1)
        started = time.monotonic()
        tidelog("cluster", "remove-node", "--data-dir", str(directory), "--node", "1")
        drained_s = time.monotonic() - started
        result.update(drained_replicas=held, drain_s=round(drained_s, 1))
        print(
            f"drain: node 1's {held} replicas moved off and the node removed in "
            f"{drained_s:.1f} s ({held / drained_s:.1f} replicas/s)",
            flush=True,
        )

        replaced_s = replace_disk(directory, 2, args.deadline)
        result.update(replaced_s=round(replaced_s, 1))
        print(f"replace: node 2 back on an empty disk, every partition's voters name its "
              f"new copy after {replaced_s:.1f} s", flush=True)  # fmt: skip

        load.stop()
        load.join(timeout=120)
        admin.close()
        record = json.loads((directory / "cluster.json").read_text())
        found = read_back(record["bootstrap"], args.partitions)
        lost = sum(1 for value in load.acked if value not in found)
        result.update(acked=len(load.acked), lost=lost, errors=sorted(set(load.failed))[:5])
        print(f"check: {len(load.acked)} acknowledged, {lost} lost, errors {result['errors']}")
        print(json.dumps(result))
    finally:
        run_tidelog("cluster", "down", "--data-dir", str(directory), timeout=300)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
