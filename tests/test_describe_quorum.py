"""DescribeQuorum (v0-2) and `tidelog metadata quorum describe`: the leader's report of the
metadata log's quorum (voters, observers, times on the wall clock, the door for reports from
other nodes), each version asked raw of every node of a live 3-node cluster, kafka-python's
describe_metadata_quorum(), and the command's output."""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient

from tidelog.core.membership import ReplicaKey
from tidelog.core.replica import FollowerStatus, ReplicaStatus, Role
from tidelog.protocol.kafka import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.quorum import (
    QuorumReport,
    ReplicaState,
    decode_report,
    encode_report,
    report_of,
)
from tidelog.testing.live import LiveCluster, ask_once, poll, running_cluster, tidelog
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId, Offset

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import DescribeQuorumRequest

MONOTONIC_NOW = 50_000
WALL_NOW = 1_700_000_000_000
ZERO_UUID = uuid.UUID(int=0)


def leader_status(**fields: Any) -> ReplicaStatus:
    """Node 1 leads epoch 4, HWM 90, log end 100, directory 11; voters 1/11, 2/22 and 3 (no
    directory in the set); node 4 hosts a copy that does not vote."""
    values: dict[str, Any] = {
        "node_id": NodeId(1),
        "replicas": (NodeId(1), NodeId(2), NodeId(3), NodeId(4)),
        "role": Role.LEADER,
        "epoch": Epoch(4),
        "leader_id": NodeId(1),
        "hwm": Offset(90),
        "log_start_offset": Offset(0),
        "log_end_offset": Offset(100),
        "durable_end_offset": Offset(100),
        "in_sync_replicas": (),
        "epoch_start_offset": Offset(80),
        "repair_floor": None,
        "directory_id": DirectoryId(11),
        "voters": (
            ReplicaKey(NodeId(1), DirectoryId(11)),
            ReplicaKey(NodeId(2), DirectoryId(22)),
            ReplicaKey(NodeId(3), NO_DIRECTORY),
        ),
        "followers": (),
    }
    values.update(fields)
    return ReplicaStatus(**values)


def follower(node: int, directory: int | None, **fields: Any) -> FollowerStatus:
    values: dict[str, Any] = {
        "node": NodeId(node),
        "directory": None if directory is None else DirectoryId(directory),
        "voter": True,
        "match_offset": None,
        "contact_ms": None,
    }
    values.update(fields)
    return FollowerStatus(**values)


def test_the_report_names_each_voter_and_observer_as_the_leader_sees_it() -> None:
    status = leader_status(
        followers=(
            follower(2, 22, match_offset=Offset(95), contact_ms=MONOTONIC_NOW - 30),
            follower(3, 33, match_offset=Offset(60), contact_ms=MONOTONIC_NOW - 400),
            follower(4, 44, voter=False, match_offset=Offset(100), contact_ms=MONOTONIC_NOW - 5),
        )
    )
    report = report_of(status, monotonic_now_ms=MONOTONIC_NOW, wall_now_ms=WALL_NOW)
    assert report == QuorumReport(
        leader_id=1,
        leader_epoch=4,
        high_watermark=90,
        voters=(
            # The leader: its log end, and the present for both times (Kafka's LeaderState).
            ReplicaState(1, 11, 100, WALL_NOW, WALL_NOW),
            # Caught up: its match has reached the HWM when the leader last heard it.
            ReplicaState(2, 22, 95, WALL_NOW - 30, WALL_NOW - 30),
            # Behind the HWM: never caught up that the leader knows; the set names no
            # directory, so the copy that answers names it.
            ReplicaState(3, 33, 60, WALL_NOW - 400, -1),
        ),
        observers=(ReplicaState(4, 44, 100, WALL_NOW - 5, WALL_NOW - 5),),
    )


def test_copies_the_leader_has_not_heard_are_unknown() -> None:
    """A voter whose copy answered from another directory (a replaced disk) is unknown, and
    that copy is an observer; a voter that has not answered, and a replica that is no voter
    and has not answered, are unknown too."""
    status = leader_status(
        followers=(
            follower(2, 99, voter=False, match_offset=Offset(10), contact_ms=MONOTONIC_NOW),
            follower(3, None),
            follower(4, None, voter=False),
        )
    )
    report = report_of(status, monotonic_now_ms=MONOTONIC_NOW, wall_now_ms=WALL_NOW)
    assert report.voters[1:] == (ReplicaState(2, 22, -1, -1, -1), ReplicaState(3, 0, -1, -1, -1))
    assert report.observers == (
        ReplicaState(2, 99, 10, WALL_NOW, -1),
        ReplicaState(4, 0, -1, -1, -1),
    )


def test_a_report_survives_the_peer_link_and_a_malformed_one_is_refused() -> None:
    report = report_of(
        leader_status(followers=(follower(2, 22, match_offset=Offset(90), contact_ms=1),)),
        monotonic_now_ms=MONOTONIC_NOW,
        wall_now_ms=WALL_NOW,
    )
    assert decode_report(encode_report(report)) == report
    good = json.loads(encode_report(report))
    malformed = [
        b"not json",
        b"[]",
        json.dumps({**good, "leader_id": "1"}).encode(),
        json.dumps({**good, "high_watermark": 2**63}).encode(),
        json.dumps({**good, "voters": [{**good["voters"][0], "directory_id": -1}]}).encode(),
        json.dumps({**good, "observers": None}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "leader_epoch"}).encode(),
        b" " * (1024 * 1024 + 1),
    ]
    assert [decode_report(data) for data in malformed] == [None] * len(malformed)


def test_describe_quorum_is_advertised_at_versions_0_to_2() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.DESCRIBE_QUORUM] == (0, 2)


# ---------------------------------------------------------------------- live ------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("quorum") / "cluster", metrics=False) as live:
        yield live


def addresses(cluster: LiveCluster) -> list[tuple[str, int]]:
    hosts = (node["kafka"].rsplit(":", 1) for node in cluster.record["nodes"])
    return [(host, int(port)) for host, port in hosts]


def quorum_request(version: int, topic: str = METADATA_TOPIC, partition: int = 0) -> Any:
    topic_cls = DescribeQuorumRequest.TopicData
    return DescribeQuorumRequest[version](
        topics=[
            topic_cls(
                topic_name=topic,
                partitions=[topic_cls.PartitionData(partition_index=partition)],
            )
        ]
    )


def led_answer(address: tuple[str, int], version: int) -> Any | None:
    """The node's answer once it names a leader (None while it answers an error)."""
    answer = ask_once(address, quorum_request(version))
    assert answer.error_code == 0
    partition = answer.topics[0].partitions[0]
    return answer if partition.error_code == 0 else None


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_node_answers_each_version_for_the_leader(cluster: LiveCluster, version: int) -> None:
    answers = [
        poll(lambda a=address: led_answer(a, version), f"node {address} names the leader")
        for address in addresses(cluster)
    ]
    leaders = {
        (a.topics[0].partitions[0].leader_id, a.topics[0].partitions[0].leader_epoch)
        for a in answers
    }
    assert len(leaders) == 1, leaders  # every node tells the leader's own report
    for answer in answers:
        assert answer.version == version
        [topic] = answer.topics
        assert topic.topic_name == METADATA_TOPIC
        [partition] = topic.partitions
        assert partition.partition_index == 0
        assert partition.leader_id in cluster.nodes and partition.leader_epoch >= 1
        assert partition.high_watermark > 0
        assert [v.replica_id for v in partition.current_voters] == [1, 2, 3]
        assert partition.observers == []
        leader = next(v for v in partition.current_voters if v.replica_id == partition.leader_id)
        assert leader.log_end_offset >= partition.high_watermark
        if version >= 1:
            assert leader.last_fetch_timestamp > 0 and leader.last_caught_up_timestamp > 0
        if version >= 2:
            assert partition.error_message is None
            assert leader.replica_directory_id not in (None, ZERO_UUID)
            assert sorted(node.node_id for node in answer.nodes) == [1, 2, 3]
            ports = {node.node_id: node.listeners[0].port for node in answer.nodes}
            assert sorted(ports.items()) == [
                (i + 1, port) for i, (_, port) in enumerate(addresses(cluster))
            ]


def test_a_partition_without_a_quorum_is_unknown(cluster: LiveCluster) -> None:
    address = addresses(cluster)[0]
    for topic, partition in (("orders", 0), (METADATA_TOPIC, 1)):
        answer = ask_once(address, quorum_request(2, topic, partition))
        assert answer.error_code == 0
        [asked] = answer.topics
        assert (asked.topic_name, asked.partitions[0].partition_index) == (topic, partition)
        assert asked.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def described(bootstrap: str) -> dict[str, Any] | None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer: dict[str, Any] = admin.describe_metadata_quorum()
    finally:
        admin.close()
    return answer if answer["topics"][0]["partitions"][0]["error"] is None else None


def test_kafka_python_describes_the_metadata_quorum_from_any_node(cluster: LiveCluster) -> None:
    for node in cluster.record["nodes"]:
        bootstrap = str(node["kafka"])
        answer = poll(lambda b=bootstrap: described(b), "kafka-python's describe_metadata_quorum")
        [partition] = answer["topics"][0]["partitions"]
        assert partition["leader_id"] in cluster.nodes
        assert partition["leader_epoch"] >= 1
        assert partition["high_watermark"] > 0
        assert [v["replica_id"] for v in partition["current_voters"]] == [1, 2, 3]
        assert [n["node_id"] for n in answer["nodes"]] == [1, 2, 3]


def test_the_command_describes_the_quorum(cluster: LiveCluster) -> None:
    via = ("--bootstrap-server", cluster.bootstrap)
    as_json = tidelog("metadata", "quorum", "describe", "--json", *via)
    assert as_json.returncode == 0, as_json.stderr
    facts = json.loads(as_json.stdout)
    assert facts["leader_id"] in cluster.nodes and facts["high_watermark"] > 0
    assert facts["current_voters"] == [1, 2, 3] and facts["current_observers"] == []
    statuses = sorted(r["status"] for r in facts["replicas"])
    assert statuses == ["Follower", "Follower", "Leader"]

    shown = tidelog("metadata", "quorum", "describe", *via)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["LeaderId:", str(facts["leader_id"])]
    assert "CurrentVoters:          [1,2,3]" in lines
    assert "CurrentObservers:       []" in lines
    header = next(line for line in lines if "LogEndOffset" in line).split()
    assert header == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    rows = [
        line.split() for line in lines[lines.index(next(x for x in lines if "Status" in x)) + 1 :]
    ]
    assert [row[-1] for row in rows] == ["Leader", "Follower", "Follower"]
    assert rows[0][0] == str(facts["leader_id"])

    status_only = tidelog("metadata", "quorum", "describe", "--status", *via)
    assert status_only.returncode == 0 and "LogEndOffset" not in status_only.stdout


def test_the_command_says_what_is_wrong() -> None:
    unreachable = tidelog("metadata", "quorum", "describe", "--bootstrap-server", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert "no broker at 127.0.0.1:1" in unreachable.stderr
    bad = tidelog("metadata", "quorum", "describe", "--leader")
    assert bad.returncode == 2 and "No such option '--leader'" in bad.stderr
    both = tidelog(
        "metadata",
        "quorum",
        "describe",
        "--status",
        "--replication",
        "--bootstrap-server",
        "127.0.0.1:1",
    )
    assert both.returncode == 1 and "--status or --replication" in both.stderr
