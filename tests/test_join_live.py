"""Brokers join and leave a running cluster, and the metadata quorum's voters change
(KIP-853), against real processes (server/joining.py, server/members.py,
server/voters_api.py, tools/cluster_grow.py).

A 3-node cluster grows to 4 (`tidelog cluster add-node`) under a bounded idempotent
acks=all load: the new node serves Metadata and hosts a new topic's replicas, becomes a
voter of the metadata quorum (`tidelog metadata quorum add-voter`), and the cluster goes on
committing with one original voter killed by PID. Then it shrinks back to 3: `remove-node
--no-drain` is refused while the node holds replicas; `remove-node` drains them to the
other nodes, then takes it out of the voters, unregisters it and stops it. Nothing
acknowledged is lost or doubled. A joined node restarted (cleanly, and after SIGKILL)
rejoins; bad requests get Kafka's errors.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest

from tidelog.protocol.kafka import ApiKey, request_class
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.status import access_for, read_status
from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    ProducerLoad,
    ask_once,
    create_topic,
    eventually,
    tidelog,
)

LOADED = "steady"
PLACED = "placed"
RECORDS = 3000
RATE_PER_S = 150


def cluster_file(directory: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((directory / "cluster.json").read_text())
    return record


def address_of(directory: Path, node: int, name: str = "kafka") -> tuple[str, int]:
    entry = next(n for n in cluster_file(directory)["nodes"] if n["id"] == node)
    host, _, port = entry[name].rpartition(":")
    return host, int(port)


def brokers_answered_by(directory: Path, node: int) -> list[int]:
    answer = ask_once(address_of(directory, node), MetadataRequest[1](topics=[]))
    return sorted(int(broker.node_id) for broker in answer.brokers)


def quorum(bootstrap: str) -> tuple[list[int], list[int]]:
    """(voters, observers) of the metadata log, as kafka-python's admin client asks."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        partition = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    finally:
        admin.close()
    voters = sorted(v["replica_id"] for v in partition["current_voters"])
    return voters, sorted(o["replica_id"] for o in partition["observers"])


def run(directory: Path, *args: str) -> str:
    """A `tidelog` command that must succeed; its stdout."""
    result = tidelog(*args, "--data-dir", str(directory), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def read_back(directory: Path, expected: int) -> list[bytes]:
    """Every value of the loaded topic, from the start (`tidelog consume`)."""
    printed = run(
        directory, "consume", LOADED, "--from-beginning", "--max-messages", str(expected),
        "--timeout-ms", "10000",
    )  # fmt: skip
    return [line.encode() for line in printed.splitlines()]


def hosted_by(directory: Path, node: int) -> set[str]:
    """The partitions node `node` says it hosts (its GET /status)."""
    host, port = address_of(directory, node, "admin")
    status = read_status(f"{host}:{port}", access=access_for(directory))
    assert status is not None, f"node {node} does not answer"
    return {f"{p['topic']}-{p['partition']}" for p in status["partitions"]}


def test_a_cluster_grows_to_four_and_shrinks_back_to_three(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster = LiveCluster(directory)
    load: ProducerLoad | None = None
    try:
        create_topic(cluster.bootstrap, LOADED, partitions=1)
        cluster.wait_hosted_everywhere(LOADED, 1)
        load = ProducerLoad(cluster.bootstrap, LOADED, records=RECORDS, rate_per_s=RATE_PER_S)
        load.start()
        eventually(lambda: len(load.acked) >= 100, "the load is acknowledged")

        assert run(directory, "cluster", "add-node") == "4\n"
        assert len(cluster_file(directory)["nodes"]) == 4
        eventually(lambda: brokers_answered_by(directory, 4) == [1, 2, 3, 4], "node 4's view")
        assert brokers_answered_by(directory, 1) == [1, 2, 3, 4]
        assert quorum(cluster.bootstrap) == ([1, 2, 3], [4])  # an observer first
        # A topic made now places replicas on node 4 too, and node 4 hosts them.
        create_topic(f"{address_of(directory, 4)[0]}:{address_of(directory, 4)[1]}", PLACED, 4)
        eventually(lambda: len(hosted_by(directory, 4) & {f"{PLACED}-{p}" for p in range(4)}) == 3)

        assert "voters now [1, 2, 3, 4]" in run(
            directory, "metadata", "quorum", "add-voter", "--node", "4"
        )
        assert quorum(cluster.bootstrap) == ([1, 2, 3, 4], [])
        killed = cluster.leader_of(LOADED)
        run(directory, "cluster", "kill", "--node", str(killed))  # SIGKILL, by its PID
        moment = time.monotonic()
        eventually(lambda: load.acked_since(moment) >= 100, "commits go on without a voter")
        # The metadata log commits: the command's retries ride over the controller's death.
        run(directory, "topics", "create", "after-kill", "--replication-factor", "3")
        run(directory, "topics", "delete", "after-kill")
        run(directory, "cluster", "restart", "--node", str(killed))

        load.join(timeout=DEADLINE_S * 2)
        assert not load.is_alive()
        assert load.failed == []
        values = read_back(directory, len(load.acked))
        assert len(values) == len(set(values))  # nothing written twice
        assert set(load.acked) <= set(values)  # nothing acknowledged lost

        refused = tidelog(
            "cluster", "remove-node", "--data-dir", str(directory), "--node", "4", "--no-drain"
        )
        assert refused.returncode == 1
        assert refused.stderr.startswith("error: node 4 still holds 3 partition replica(s)")
        assert refused.stderr.count("\n") == 1
        # Drained: its three replicas move to nodes 1-3 (three of each, as the topic has
        # three replicas a partition), then it leaves.
        run(directory, "cluster", "remove-node", "--node", "4")
        placed = {f"{PLACED}-{p}" for p in range(4)}
        for node in (1, 2, 3):
            eventually(lambda n=node: placed <= hosted_by(directory, n), f"node {node} hosts all")
        assert [n["id"] for n in cluster_file(directory)["nodes"]] == [1, 2, 3]
        # Stopped, it falls silent, and the leader no longer counts it an observer.
        eventually(lambda: quorum(cluster.bootstrap) == ([1, 2, 3], []), "node 4 unlinked")
        eventually(lambda: brokers_answered_by(directory, 1) == [1, 2, 3], "node 4 gone")
        status = tidelog("cluster", "status", "--data-dir", str(directory))
        assert status.returncode == 0, status.stdout + status.stderr
    finally:
        if load is not None:
            load.stop()
        cluster.down()


def test_a_joined_node_restarted_rejoins(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster = LiveCluster(directory)
    try:
        run(directory, "cluster", "add-node", "--voter")
        assert quorum(cluster.bootstrap)[0] == [1, 2, 3, 4]
        run(directory, "cluster", "restart", "--node", "4")  # SIGTERM, then --join again
        run(directory, "cluster", "kill", "--node", "4")
        run(directory, "cluster", "up")  # starts what is down: node 4
        eventually(lambda: brokers_answered_by(directory, 4) == [1, 2, 3, 4])
        assert quorum(cluster.bootstrap)[0] == [1, 2, 3, 4]
        run(directory, "cluster", "roll")  # every node restarted, --peers naming node 4 now
        assert quorum(cluster.bootstrap)[0] == [1, 2, 3, 4]
        assert "joined" in (directory / "node-4" / "metadata-first-voters.json").read_text()
    finally:
        cluster.down()


def voter_change(address: tuple[str, int], key: ApiKey, node: int, **fields: Any) -> Any:
    request = request_class(key)[0](
        cluster_id=None, voter_id=node, voter_directory_id=uuid.UUID(int=0), **fields
    )
    return ask_once(address, request)


def test_bad_requests_get_kafkas_errors(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster = LiveCluster(directory)
    node_1 = address_of(directory, 1)
    add, remove = ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER
    try:
        unknown = voter_change(node_1, add, 9, timeout_ms=5000, listeners=[])
        assert (unknown.error_code, unknown.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "node 9 is not a registered broker",
        )
        duplicate = voter_change(node_1, add, 2, timeout_ms=5000, listeners=[])
        assert duplicate.error_code == ErrorCode.DUPLICATE_VOTER
        assert voter_change(node_1, remove, 9).error_code == ErrorCode.VOTER_NOT_FOUND
        foreign = request_class(remove)[0](
            cluster_id="another", voter_id=2, voter_directory_id=uuid.UUID(int=0)
        )
        assert ask_once(node_1, foreign).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
        for node in (2, 3):
            assert voter_change(node_1, remove, node).error_code == ErrorCode.NONE
        assert quorum(cluster.bootstrap) == ([1], [2, 3])
        last = voter_change(node_1, remove, 1)
        assert last.error_code == ErrorCode.INVALID_REQUEST
        assert "last voter" in last.error_message
        for node in (2, 3):
            added = voter_change(node_1, add, node, timeout_ms=30_000, listeners=[])
            assert added.error_code == ErrorCode.NONE, added
        assert quorum(cluster.bootstrap) == ([1, 2, 3], [])

        unregister = request_class(ApiKey.UNREGISTER_BROKER)[0]
        answer = ask_once(node_1, unregister(broker_id=7))
        assert answer.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
        answer = ask_once(node_1, unregister(broker_id=2))  # __consumer_offsets, a voter
        assert answer.error_code == ErrorCode.INVALID_REQUEST

        for args in (
            ("metadata", "quorum", "add-voter", "--node", "-1"),
            ("metadata", "quorum", "remove-voter", "--node", "2", "--directory", "x"),
            ("metadata", "quorum", "add-voter", "--node", "9"),
            ("cluster", "remove-node", "--node", "7"),
        ):
            result = tidelog(*args, "--data-dir", str(directory))
            assert result.returncode != 0, args
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, (
                args,
                result.stderr,
            )
        joined = tidelog(
            "broker",
            "--node-id=5",
            f"--data-dir={tmp_path / 'five'}",
            "--listen=127.0.0.1:1",
            "--peers=5@127.0.0.1:2",
            "--join",
        )
        assert joined.returncode == 2
        assert joined.stderr.startswith("error: --join: --peers names no node of the cluster")
    finally:
        cluster.down()
