"""Partition reassignment (KIP-455) in quorum mode, on four real broker processes, through
kafka-python's admin client (AlterPartitionReassignments, ListPartitionReassignments):
partitions move under an idempotent acks=all load and lose no acknowledged record, every
copy ending with the target as its voter set (`/status`'s `voters`); the replication
factor grows and shrinks; a move waiting on a node that is down is cancelled, and the
cancel terminates at once, the voter it had added taken out again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KafkaPartition
from kafka.admin import NewTopic
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    NotControllerError,
    RequestTimedOutError,
)

from tidelog.status import read_status
from tidelog.testing.live import (
    LiveCluster,
    ProducerLoad,
    eventually,
    poll,
    running_cluster,
    tidelog,
)

MOVE_DEADLINE_S = 30.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("reassign") / "cluster", nodes=4, metrics=False
    ) as live:
        yield live


@pytest.fixture(scope="module")
def admin(cluster: LiveCluster) -> Iterator[Any]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        yield client
    finally:
        client.close()


def asked(cluster: LiveCluster, ask: Callable[[Any], T]) -> T:
    """`ask(admin)` on a fresh admin client, again while it cannot reach the controller
    (one just killed, its successor being elected)."""

    # Nodes 1-3 only: node 4 is the one the tests pause, and a paused node takes a
    # connection but never answers.
    bootstrap = ",".join(node["kafka"] for node in cluster.record["nodes"][:3])

    def attempt() -> tuple[T] | None:
        try:
            client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        except KafkaError:
            return None
        try:
            return (ask(client),)
        except (KafkaConnectionError, KafkaTimeoutError, NotControllerError, NodeNotReadyError):
            return None
        except RequestTimedOutError:
            return None
        finally:
            client.close()

    return poll(attempt, "an answer from the controller")[0]


def copies(cluster: LiveCluster, topic: str, partition: int = 0) -> dict[int, dict[str, Any]]:
    """Each live node's /status row of the partition, by node."""
    found = {}
    for node in cluster.record["nodes"]:
        status = read_status(node["admin"])
        for row in (status or {}).get("partitions", []):
            if (row["topic"], row["partition"]) == (topic, partition):
                found[int(node["id"])] = row
    return found


def settled_on(cluster: LiveCluster, topic: str, nodes: set[int], partition: int = 0) -> bool:
    """The partition's copies are exactly on `nodes`, one leads, and every copy's voter
    set is `nodes`."""
    rows = copies(cluster, topic, partition)
    return (
        set(rows) == nodes
        and any(row["role"] == "leader" for row in rows.values())
        and all({voter[0] for voter in row["voters"]} == nodes for row in rows.values())
    )


def replicas_of(admin: Any, topic: str) -> list[list[int]]:
    (described,) = admin.describe_topics([topic])
    return [
        p["replica_nodes"]
        for p in sorted(described["partitions"], key=lambda p: p["partition_index"])
    ]


def create(admin: Any, topic: str, placement: dict[int, list[int]]) -> None:
    admin.create_topics([NewTopic(topic, replica_assignments=placement)])


def read_all(cluster: LiveCluster, topic: str, partitions: int) -> dict[bytes, tuple[int, int]]:
    """value -> (partition, offset) of every committed record of `topic`."""
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[bytes, tuple[int, int]] = {}
    try:
        idle = 0
        while idle < 20:
            message = consumer.poll(0.25)
            if message is None:
                idle += 1
                continue
            idle = 0
            if message.error() is None:
                found[message.value()] = (message.partition(), message.offset())
    finally:
        consumer.close()
    return found


def test_partitions_move_under_load_and_lose_nothing(cluster: LiveCluster, admin: Any) -> None:
    topic = "moving"
    create(admin, topic, {0: [1, 2, 3], 1: [1, 2, 3]})
    for partition in (0, 1):
        eventually(
            lambda p=partition: settled_on(cluster, topic, {1, 2, 3}, p), f"{topic}-{partition} up"
        )
    load = ProducerLoad(cluster.bootstrap, topic, records=3000, rate_per_s=300, partition=None)
    load.start()
    eventually(lambda: len(load.acked) > 300, "the load runs")
    target = {KafkaPartition(topic, 0): [2, 3, 4], KafkaPartition(topic, 1): [4, 3, 2]}
    assert admin.alter_partition_reassignments(target) == dict.fromkeys(target)
    for partition in (0, 1):
        eventually(
            lambda p=partition: settled_on(cluster, topic, {2, 3, 4}, p),
            lambda p=partition: f"{topic}-{p} on 2, 3, 4: {copies(cluster, topic, p)}",
            deadline_s=MOVE_DEADLINE_S,
        )
    assert admin.list_partition_reassignments() == {}
    assert replicas_of(admin, topic) == [[2, 3, 4], [4, 3, 2]]
    moved_at = len(load.acked)
    eventually(lambda: len(load.acked) > moved_at + 300, "writes go on after the move")
    load.stop()
    load.join(60)
    assert load.failed == []
    found = read_all(cluster, topic, 2)
    lost = [value for value in load.acked if value not in found]
    assert lost == []
    # Each acknowledged record sits where it was acknowledged.
    assert all(found[value][1] == offset for value, offset in load.acked.items())
    # A node that starts again builds its copies as the metadata log says now: node 4
    # holds its copies with the target as voters, node 1 (moved off) opens none.
    for node in ("4", "1"):
        restarted = tidelog(
            "cluster", "restart", "--node", node, "--data-dir", str(cluster.directory)
        )
        assert restarted.returncode == 0, restarted.stderr
    for partition in (0, 1):
        eventually(lambda p=partition: settled_on(cluster, topic, {2, 3, 4}, p), "after restarts")
    assert read_all(cluster, topic, 2) == found


def test_replication_factor_grows_and_shrinks(cluster: LiveCluster, admin: Any) -> None:
    topic = "factor"
    create(admin, topic, {0: [1]})
    eventually(lambda: settled_on(cluster, topic, {1}), f"{topic} up")
    tidelog("produce", topic, "--bootstrap-server", cluster.bootstrap, "--acks", "all")
    assert admin.alter_partition_reassignments({KafkaPartition(topic, 0): [1, 2, 3]}) == {
        KafkaPartition(topic, 0): None
    }
    eventually(lambda: settled_on(cluster, topic, {1, 2, 3}), deadline_s=MOVE_DEADLINE_S)
    assert replicas_of(admin, topic) == [[1, 2, 3]]
    admin.alter_partition_reassignments({KafkaPartition(topic, 0): [3]})
    eventually(
        lambda: settled_on(cluster, topic, {3}),
        lambda: f"{topic} on 3 alone: {copies(cluster, topic)}",
        deadline_s=MOVE_DEADLINE_S,
    )
    assert replicas_of(admin, topic) == [[3]]
    assert admin.list_partition_reassignments() == {}
    # Node 1 held the partition's first copy (named by its first voter set, on node 1's
    # data directory id); added back, its copy is a new one, under an id of its own.
    admin.alter_partition_reassignments({KafkaPartition(topic, 0): [3, 1]})
    eventually(lambda: settled_on(cluster, topic, {1, 3}), deadline_s=MOVE_DEADLINE_S)
    node_1 = read_status(cluster.record["nodes"][0]["admin"])
    assert node_1 is not None
    (copy,) = [p for p in node_1["partitions"] if p["topic"] == topic]
    assert copy["directory"] not in (node_1["directory_id"], 0)
    assert [1, copy["directory"]] in copy["voters"]


def test_a_cancel_with_a_replica_down_terminates(cluster: LiveCluster, admin: Any) -> None:
    """1, 2 -> 3, 4 with node 4 paused: node 3 becomes a voter, node 4 cannot; the move
    waits. The cancel is over at once, and the leader takes node 3 out of the voter set
    again with node 4 still down (a majority of 1, 2, 3 is alive)."""
    topic = "cancelled"
    create(admin, topic, {0: [1, 2]})
    eventually(lambda: settled_on(cluster, topic, {1, 2}), f"{topic} up")
    directory = str(cluster.directory)
    assert tidelog("cluster", "pause", "--node", "4", "--data-dir", directory).returncode == 0
    partition = KafkaPartition(topic, 0)
    try:
        moved = asked(cluster, lambda a: a.alter_partition_reassignments({partition: [3, 4]}))
        assert moved == {partition: None}
        eventually(lambda: settled_on(cluster, topic, {1, 2, 3}), "node 3 votes, node 4 cannot")
        assert asked(cluster, lambda a: a.list_partition_reassignments()) == {
            partition: {
                "replicas": [3, 4, 1, 2],
                "adding_replicas": [3, 4],
                "removing_replicas": [1, 2],
            }
        }
        cancelled = asked(cluster, lambda a: a.alter_partition_reassignments({partition: None}))
        assert cancelled == {partition: None}
        assert asked(cluster, lambda a: a.list_partition_reassignments()) == {}  # over at once
        eventually(  # every broker's Metadata, once it applied the cancel too
            lambda: asked(cluster, lambda a: replicas_of(a, topic)) == [[1, 2]], "replicas 1, 2"
        )
        eventually(
            lambda: settled_on(cluster, topic, {1, 2}),
            lambda: f"back on 1, 2 with node 4 down: {copies(cluster, topic)}",
        )
        again = asked(cluster, lambda a: a.alter_partition_reassignments({partition: None}))
        assert again[partition].__name__ == "NoReassignmentInProgressError"
    finally:
        assert tidelog("cluster", "resume", "--node", "4", "--data-dir", directory).returncode == 0
    eventually(lambda: read_status(cluster.record["nodes"][3]["admin"]) is not None, "node 4 back")
    assert settled_on(cluster, topic, {1, 2})  # node 4 opened no copy of it


def test_rebalance_spreads_replicas_and_leaders_then_drains_a_node(
    cluster: LiveCluster, admin: Any
) -> None:
    """`tidelog cluster rebalance`: a topic placed on nodes 1 and 2 alone is spread over
    all four nodes (with every other topic), leaders too; `--exclude 4` then moves
    everything off node 4. Each step's records survive and every copy settles on its
    target's voters."""
    topic = "lopsided"
    create(admin, topic, {p: [1, 2] for p in range(6)})
    for partition in range(6):
        eventually(lambda p=partition: settled_on(cluster, topic, {1, 2}, p), f"{topic} up")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for partition in range(6):
            producer.send(topic, f"record-{partition}".encode(), partition=partition).get(30)
    finally:
        producer.close()
    before = read_all(cluster, topic, 6)
    assert len(before) == 6

    def rebalance(*flags: str) -> dict[str, Any]:
        done = tidelog(
            "cluster", "rebalance", "--execute", "--wait", "--json",
            "--bootstrap-server", cluster.bootstrap, *flags, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return dict(json.loads(done.stdout))

    spread = rebalance()
    after = spread["replicas"]["after"]
    assert max(after.values()) - min(after.values()) <= 1 and after["4"] > 0
    leaders = spread["leaders"]["after"]
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert admin.list_partition_reassignments() == {}
    placement = replicas_of(admin, topic)
    for partition, nodes in enumerate(placement):
        eventually(
            lambda p=partition, n=nodes: settled_on(cluster, topic, set(n), p),
            deadline_s=MOVE_DEADLINE_S,
        )
    assert read_all(cluster, topic, 6) == before

    def leaders_spread() -> bool:
        led = dict.fromkeys(range(1, 5), 0)
        for described in admin.describe_topics():
            for p in described["partitions"]:
                if p["leader_id"] in led:
                    led[p["leader_id"]] += 1
        return max(led.values()) - min(led.values()) <= 1

    eventually(leaders_spread, "leaders spread over the four nodes")

    drained = rebalance("--exclude", "4")
    assert "4" not in drained["replicas"]["after"]
    for replicas in admin.describe_topics():
        for p in replicas["partitions"]:
            assert 4 not in p["replica_nodes"], (replicas["topic"], p)
    assert read_all(cluster, topic, 6) == before
