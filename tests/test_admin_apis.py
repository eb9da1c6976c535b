"""The admin APIs beside topics and ACLs, with kafka-python, confluent-kafka's AdminClient
and the `tidelog` commands: CreatePartitions (`topics add-partitions`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from tidelog.testing.live import LiveCluster, create_topic, eventually, tidelog

TOPIC = "growing"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    live = LiveCluster(tmp_path_factory.mktemp("admin") / "cluster")
    try:
        yield live
    finally:
        live.down()


def partitions_of(cluster: LiveCluster, topic: str) -> list[dict[str, object]]:
    described = tidelog(
        "topics", "describe", topic, "--json", "--bootstrap-server", cluster.bootstrap
    )
    assert described.returncode == 0, described.stderr
    rows: list[dict[str, object]] = json.loads(described.stdout)
    return rows


def test_partitions_are_added_by_every_client(cluster: LiveCluster) -> None:
    create_topic(cluster.bootstrap, TOPIC, partitions=2)
    via = ("--bootstrap-server", cluster.bootstrap)
    grown = tidelog("topics", "add-partitions", TOPIC, "--partitions", "4", *via)
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout == f"Topic {TOPIC} now has 4 partitions.\n"
    rows = partitions_of(cluster, TOPIC)
    assert [row["partition"] for row in rows] == [0, 1, 2, 3]
    assert all(int(row["leader"]) >= 0 and len(row["replicas"]) == 3 for row in rows)  # type: ignore[call-overload, arg-type]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    assert producer.send(TOPIC, b"x", partition=3).get(timeout=30).partition == 3
    producer.close()

    shrink = tidelog("topics", "add-partitions", TOPIC, "--partitions", "3", *via)
    assert shrink.returncode == 1
    assert (
        "Topic currently has 4 partitions, which is higher than or equal to the requested 3"
        in shrink.stderr
    )
    unknown = tidelog("topics", "add-partitions", "nope", "--partitions", "3", *via)
    assert unknown.returncode == 1 and "no topic 'nope'" in unknown.stderr, unknown.stderr
    internal = tidelog("topics", "add-partitions", "__consumer_offsets", "--partitions", "9", *via)
    assert internal.returncode == 1 and "internal topic" in internal.stderr

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_partitions([NewPartitions(TOPIC, 6)]).values():
        assert future.result(timeout=30) is None

    def six() -> bool:
        rows = partitions_of(cluster, TOPIC)
        return len(rows) == 6 and all(int(row["leader"]) >= 0 for row in rows)  # type: ignore[call-overload]

    eventually(six, "six partitions, each with a leader")


def test_the_cluster_and_its_log_dirs_are_described(cluster: LiveCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = admin.describe_cluster()
        assert sorted(b["broker_id"] for b in described["brokers"]) == [1, 2, 3]
        assert described["controller_id"] in (1, 2, 3)
        create_topic(cluster.bootstrap, "sized", partitions=1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        producer.send("sized", b"y" * 1000, partition=0).get(timeout=30)
        producer.close()
        dirs = admin.describe_log_dirs({"sized": [0]})
    finally:
        admin.close()
    sizes = {
        answer["broker"]: partition["partition_size"]
        for answer in dirs
        for log_dir in answer["log_dirs"]
        for topic in log_dir["topics"]
        for partition in topic["partitions"]
    }
    assert sorted(sizes) == [1, 2, 3] and all(size > 1000 for size in sizes.values()), dirs
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    nodes = confluent.describe_cluster().result(timeout=30).nodes
    assert sorted(node.id for node in nodes) == [1, 2, 3]


def test_offsets_right_after_another_client_created_the_topic(cluster: LiveCluster) -> None:
    """A topic another client just created may have no leader yet (-1): `get-offsets` asks
    again until it has one, rather than failing with UnknownBrokerIdError."""
    for n in range(3):
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic(f"fresh-{n}", 3, 3)])
        admin.close()
        offsets = tidelog("get-offsets", f"fresh-{n}", "--bootstrap-server", cluster.bootstrap)
        assert offsets.returncode == 0, offsets.stderr
        assert len(offsets.stdout.splitlines()) == 3
