"""Measure a consumer group's commits and its coordinator's failover (a measurement, not a test).

    .venv/bin/python bench/group_failover.py [--rounds 5] [--commits 200]

A fresh 3-node cluster on 127.0.0.1 (`fresh_cluster` of bench/failover.py), topic `orders`
(3 partitions, replication factor 3) filled with records. One confluent-kafka consumer
joins group `bench` (subscribe) and commits synchronously, one commit in flight:

- `commit`: the latency of --commits synchronous commits (OffsetCommit is answered only once
  the commit is below the HWM of its `__consumer_offsets` partition, acks=all);
- each round then kills the group's coordinator with SIGKILL and measures `commit after
  kill`: from the kill until the first commit that succeeds (a new coordinator has taken
  the partition, rebuilt the group from the committed log and answers); the offsets it
  then returns for the group must be the ones committed before the kill, or later. The
  killed node is restarted and waited for before the next round.

Prints each round, then the median, min and max. Every wait is bounded; the script stops only
the cluster it started.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from failover import fresh_cluster, ports_held, summary

from tidelog.testing.live import LiveCluster, tidelog
from tidelog.tools.client_kafka import ClientSettings, create_topic
from tidelog.tools.cluster import (
    read_cluster,
    signal_node,
    start_node,
    wait_ready,
    wait_until,
    write_cluster,
)

TOPIC = "orders"
GROUP = "bench"
PARTITIONS = 3
RECORDS = 3_000
ROUNDS_DEFAULT = 5
COMMITS_DEFAULT = 200
FAILOVER_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 60.0
RETRY_S = 0.02
POLL_S = 1.0


def fill(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for number in range(RECORDS):
        producer.produce(TOPIC, f"order {number}".encode(), f"k{number}".encode())
        producer.poll(0)
    assert producer.flush(FAILOVER_TIMEOUT_S) == 0


def member(bootstrap: str) -> Any:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the member was never assigned partitions"
        consumer.poll(POLL_S)
    return consumer


def positions(consumer: Any, step: int) -> list[Any]:
    """Offsets to commit: where the member is, moved on by `step` (fresh values each time)."""
    return [KafkaPartition(TOPIC, p, 1 + step) for p in range(PARTITIONS)]


def commit_latencies(consumer: Any, count: int) -> list[float]:
    latencies = []
    for step in range(count):
        started = time.perf_counter()
        consumer.commit(offsets=positions(consumer, step), asynchronous=False)
        latencies.append(time.perf_counter() - started)
    return latencies


def coordinator(cluster: LiveCluster) -> int:
    described = tidelog(
        "groups", "describe", GROUP, "--state", "--json", "--bootstrap-server", cluster.bootstrap
    )
    assert described.returncode == 0, described.stderr
    return int(json.loads(described.stdout)["coordinator"])


def commit_after_kill(cluster: LiveCluster, consumer: Any, step: int) -> tuple[int, float]:
    """Kill the coordinator; (its id, seconds until a commit succeeds again)."""
    record = read_cluster(cluster.directory)
    victim = coordinator(cluster)
    assert signal_node(record.node(victim), signal.SIGKILL)
    killed_at = time.monotonic()
    while True:
        try:
            consumer.commit(offsets=positions(consumer, step), asynchronous=False)
            return victim, time.monotonic() - killed_at
        except KafkaException:
            assert time.monotonic() - killed_at < FAILOVER_TIMEOUT_S, "no commit after the kill"
            consumer.poll(RETRY_S)  # serves the member's heartbeats and rejoins


def committed(consumer: Any) -> list[int]:
    found = consumer.committed(
        [KafkaPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=FAILOVER_TIMEOUT_S
    )
    return [tp.offset for tp in found]


def restart(cluster: LiveCluster, node_id: int) -> None:
    record = read_cluster(cluster.directory)
    assert wait_until(lambda: not ports_held(record, node_id), timeout_s=READY_TIMEOUT_S)
    record = record.with_pid(node_id, start_node(record, record.node(node_id)))
    write_cluster(cluster.directory, record)
    wait_ready([record.node(node_id)], timeout_s=READY_TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS_DEFAULT)
    parser.add_argument("--commits", type=int, default=COMMITS_DEFAULT)
    arguments = parser.parse_args()
    with fresh_cluster() as cluster:
        create_topic(
            ClientSettings(cluster.bootstrap),
            TOPIC,
            partitions=PARTITIONS,
            replication_factor=3,
            configs={},
        )
        fill(cluster.bootstrap)
        consumer = member(cluster.bootstrap)
        try:
            latencies = commit_latencies(consumer, arguments.commits)
            print(summary("synchronous commit", latencies))
            failovers = []
            for number in range(1, arguments.rounds + 1):
                step = arguments.commits + number
                before = committed(consumer)
                victim, seconds = commit_after_kill(cluster, consumer, step)
                after = committed(consumer)
                assert all(a >= b for a, b in zip(after, before, strict=True)), (before, after)
                failovers.append(seconds)
                print(
                    f"round {number}: killed coordinator {victim}; committed again after "
                    f"{seconds * 1000:.0f} ms; offsets {before} -> {after}",
                    flush=True,
                )
                restart(cluster, victim)
        finally:
            consumer.close()
    print(summary("commit after kill", failovers))


if __name__ == "__main__":
    main()
