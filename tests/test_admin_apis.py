"""The admin APIs beside topics and ACLs, with kafka-python, confluent-kafka's AdminClient
and the `tidelog` commands: CreatePartitions (`topics add-partitions`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from tidelog.testing.live import (
    LiveCluster,
    create_topic,
    eventually,
    knows_before_joining,
    running_cluster,
    tidelog,
)

TOPIC = "growing"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("admin") / "cluster") as live:
        yield live


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
    assert all(len(row["replicas"]) == 3 for row in rows)  # type: ignore[arg-type]

    def all_led() -> bool:
        """Every broker asked names a leader of each partition (one that has just opened
        its replica of a new partition may not know it for a moment)."""
        return all(int(row["leader"]) >= 0 for row in partitions_of(cluster, TOPIC))  # type: ignore[call-overload]

    eventually(all_led, "a leader of every partition, as any broker tells it")
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


def test_configs_are_read_and_changed_and_the_replicas_follow(cluster: LiveCluster) -> None:
    via = ("--bootstrap-server", cluster.bootstrap)
    create_topic(cluster.bootstrap, "tuned", partitions=1)
    changed = tidelog(
        "topics", "alter-config", "tuned", "--set", "min.insync.replicas=3",
        "--set", "max.message.bytes=2000", *via,
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    described = json.loads(tidelog("topics", "describe-configs", "tuned", "--json", *via).stdout)
    assert described["min.insync.replicas"]["value"] == "3"
    assert described["max.message.bytes"]["value"] == "2000"
    assert described["retention.ms"]["value"] == "604800000"  # the default, in force
    # The replicas follow: a 3000-byte record is too large now.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0)
    with pytest.raises(Exception, match=r"MessageSizeTooLarge|too large"):
        producer.send("tuned", b"z" * 3000, partition=0).get(timeout=30)
    producer.close()
    bad = tidelog("topics", "alter-config", "tuned", "--set", "retention.ms=abc", *via)
    assert bad.returncode == 1
    assert "Invalid value abc for configuration retention.ms" in bad.stderr
    reset = tidelog("topics", "alter-config", "tuned", "--delete", "max.message.bytes", *via)
    assert reset.returncode == 0, reset.stderr
    after = json.loads(tidelog("topics", "describe-configs", "tuned", "--json", *via).stdout)
    assert after["max.message.bytes"]["value"] == "1048588"
    # confluent-kafka's AdminClient, incrementally.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        assert future.result(timeout=30) is None
    eventually(
        lambda: (
            json.loads(tidelog("topics", "describe-configs", "tuned", "--json", *via).stdout)[
                "retention.ms"
            ]["value"]
            == "60000"
        ),
        "retention.ms set through confluent-kafka",
    )


def test_groups_and_their_offsets_are_deleted(cluster: LiveCluster) -> None:
    via = ("--bootstrap-server", cluster.bootstrap)
    create_topic(cluster.bootstrap, "grouped", partitions=2)
    cluster.wait_hosted_everywhere("grouped", 2)  # every node's Metadata answer lists it
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for partition in (0, 1):
        producer.send("grouped", b"g", partition=partition).get(timeout=30)
    producer.close()
    for group in ("gone", "also-gone"):
        read = tidelog(
            "consume", "grouped", "--group", group, "--from-beginning", "--timeout-ms", "3000",
            "--max-messages", "2", *via,
        )  # fmt: skip
        assert read.returncode == 0, read.stderr
    # A group with a live member keeps everything.
    member = KafkaConsumer(
        "grouped", bootstrap_servers=cluster.bootstrap, group_id="busy", enable_auto_commit=False
    )
    try:
        knows_before_joining(member, "grouped")
        eventually(lambda: member.poll(timeout_ms=200) is not None and member.assignment())
        busy = tidelog("groups", "delete", "busy", *via)
        assert busy.returncode == 1 and "NonEmptyGroupError" in busy.stderr, busy.stderr
    finally:
        member.close()
    dropped = tidelog("groups", "delete-offsets", "gone", "--topic", "grouped:0", *via)
    assert dropped.returncode == 0 and "Successful" in dropped.stdout, dropped.stderr
    left = json.loads(tidelog("groups", "describe", "gone", "--json", *via).stdout)["offsets"]
    assert [(row["partition"], row["current_offset"]) for row in left] == [(1, 2)]
    deleted = tidelog("groups", "delete", "gone", *via)
    assert deleted.stdout == "Deletion of group 'gone' was successful.\n", deleted.stderr
    assert "gone" not in tidelog("groups", "list", *via).stdout.split()
    again = tidelog("groups", "delete", "gone", *via)
    assert again.returncode == 1 and "GroupIdNotFoundError" in again.stderr
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.delete_consumer_groups(["also-gone"], request_timeout=30).values():
        assert future.result(timeout=30) is None
