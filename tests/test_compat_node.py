"""The compatibility matrix, beside kafka-python, confluent-kafka and kcat: Kafka clients
from npm written independently of those and of each other, each with its own protocol code
in JavaScript (CLIENTS; compat/node, pinned by its package-lock.json, installed by `make
node-clients`). Small Node scripts (compat/node/*.mjs) drive each against one live 3-node
cluster: produce (acks=all, keys, headers, two partitions), consume it back exactly, a
consumer group that ends at lag 0, admin (create, list, describe, add partitions, delete),
offsets by time, and a leader killed with SIGKILL (`tidelog cluster kill`) while the client
produces. What a client itself gets wrong is in the README's compatibility matrix, and
asserted here as that client's own behaviour, not worked around.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tidelog.testing.live import LiveCluster, create_topic, eventually, poll, tidelog

NODE_DIR = Path(__file__).resolve().parent.parent / "compat" / "node"
RUN_S = 60.0  # one script's run; each script also stops itself at its --timeout-ms
RECORDS = 200
TIMESTAMP_BASE = 1_700_000_000_000


@dataclass(frozen=True)
class Client:
    name: str
    script: str
    # What a lookup by a timestamp past the last record answers: Kafka's ListOffsets says
    # -1; kafkajs's fetchTopicOffsetsByTimestamp puts the partition's end offset instead.
    past_the_end_is_end_offset: bool


CLIENTS = [
    Client("kafkajs", "kafkajs.mjs", past_the_end_is_end_offset=True),
    Client("platformatic", "platformatic.mjs", past_the_end_is_end_offset=False),
]


@pytest.fixture(params=CLIENTS, ids=[client.name for client in CLIENTS])
def client(request: pytest.FixtureRequest) -> Client:
    return request.param  # type: ignore[no-any-return]


def node_command(client: Client, command: str, cluster: LiveCluster, *args: str) -> list[str]:
    node = shutil.which("node")
    assert node is not None and (NODE_DIR / "node_modules").is_dir(), "run `make node-clients`"
    return [
        node, str(NODE_DIR / client.script), command, "--bootstrap", cluster.bootstrap,
        "--timeout-ms", str(int(RUN_S * 1000)), *args,
    ]  # fmt: skip


def run(client: Client, command: str, cluster: LiveCluster, *args: str, stdin: Any = None) -> Any:
    """What the client's script printed for `command` (JSON); it must exit 0."""
    result = subprocess.run(
        node_command(client, command, cluster, *args),
        input="" if stdin is None else json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=RUN_S + 15,
        check=False,
    )
    assert result.returncode == 0, f"{client.name} {command}: {result.stderr[-4000:]}"
    return json.loads(result.stdout)


def new_topic(cluster: LiveCluster, client: Client, what: str, partitions: int) -> str:
    """A topic of replication factor 3, created with kafka-python, on every node."""
    topic = f"{client.name}-{what}"
    create_topic(cluster.bootstrap, topic, partitions)
    cluster.wait_hosted_everywhere(topic, partitions)
    return topic


def read_partitions(cluster: LiveCluster, topic: str, partitions: int) -> list[Any]:
    """Every record of the topic, read with kafka-python up to the end offsets."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, request_timeout_ms=20_000
    )
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        ends = consumer.end_offsets(assigned)
        read: list[Any] = []

        def done() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                read.extend(records)
            return all(consumer.position(tp) >= ends[tp] for tp in assigned)

        eventually(done, f"{topic} read to its end offsets {ends}")
        return read
    finally:
        consumer.close()


def records_for(client: Client) -> list[dict[str, Any]]:
    return [
        {
            "partition": i % 2,
            "key": f"k{i}",
            "value": f"{client.name}-{i}",
            "headers": {"client": client.name, "n": str(i)},
        }
        for i in range(RECORDS)
    ]


def test_produce_then_consume_exactly(cluster: LiveCluster, client: Client) -> None:
    topic = new_topic(cluster, client, "records", partitions=2)
    sent = records_for(client)
    offsets = run(client, "produce", cluster, "--topic", topic, stdin=sent)["offsets"]
    expected = {
        (r["partition"], offset): (r["key"], r["value"], r["headers"])
        for r, offset in zip(sent, offsets, strict=True)
    }
    assert len(expected) == RECORDS, "two records acknowledged at one offset"

    got = run(
        client, "consume", cluster, "--topic", topic, "--group", f"reader-{uuid.uuid4().hex}",
        "--count", str(RECORDS),
    )["records"]  # fmt: skip
    assert len(got) == RECORDS
    assert {
        (r["partition"], r["offset"]): (r["key"], r["value"], r["headers"]) for r in got
    } == expected

    # What another implementation reads back is what this client says it wrote.
    independent = {
        (r.partition, r.offset): (
            r.key.decode(),
            r.value.decode(),
            {key: value.decode() for key, value in r.headers},
        )
        for r in read_partitions(cluster, topic, 2)
    }
    assert independent == expected


def lag_of(cluster: LiveCluster, group: str) -> dict[int, Any]:
    result = tidelog("groups", "describe", group, "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row["lag"] for row in json.loads(result.stdout)["offsets"]}


def test_a_group_consumes_everything_commits_and_shows_lag_0(
    cluster: LiveCluster, client: Client
) -> None:
    topic = new_topic(cluster, client, "group", partitions=2)
    run(client, "produce", cluster, "--topic", topic, stdin=records_for(client))
    group = f"{client.name}-group"
    got = run(
        client, "group-consume", cluster, "--topic", topic, "--group", group,
        "--count", str(RECORDS),
    )["records"]  # fmt: skip
    assert sorted(r["value"] for r in got) == sorted(r["value"] for r in records_for(client))
    assert lag_of(cluster, group) == {0: 0, 1: 0}


def test_admin_create_list_describe_add_partitions_delete(
    cluster: LiveCluster, client: Client
) -> None:
    topic = f"{client.name}-admin"
    create = ("--topic", topic, "--partitions", "2", "--replication-factor", "3")
    assert run(client, "create-topic", cluster, *create)["created"] is True
    assert topic in run(client, "list-topics", cluster)["topics"]

    described = run(client, "describe-topic", cluster, "--topic", topic)["partitions"]
    assert [p["partition"] for p in described] == [0, 1]
    for partition in described:
        assert sorted(partition["replicas"]) == [1, 2, 3]
        assert partition["leader"] in partition["replicas"]

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    try:
        [seen] = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in seen["partitions"]) == [0, 1]
        assert all(len(p["replica_nodes"]) == 3 for p in seen["partitions"])

        run(client, "add-partitions", cluster, "--topic", topic, "--partitions", "4")

        def four_partitions() -> Any:
            now = run(client, "describe-topic", cluster, "--topic", topic)["partitions"]
            led = len(now) == 4 and all(p["leader"] >= 0 for p in now)
            return now if led else None

        grown = poll(four_partitions, f"{client.name} sees 4 partitions of {topic}")
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in grown)

        run(client, "delete-topic", cluster, "--topic", topic)
        eventually(
            lambda: topic not in run(client, "list-topics", cluster)["topics"],
            f"{topic} gone from {client.name}'s list",
        )
        assert topic not in admin.list_topics()
    finally:
        admin.close()


def test_offsets_by_time(cluster: LiveCluster, client: Client) -> None:
    """Record i of partition p has the timestamp BASE + 1000 i + 500 p: a lookup answers
    the first record at or after the time, and past the last one -1 (Kafka) or, where the
    client says so, the end offset."""
    topic = new_topic(cluster, client, "times", partitions=2)
    sent = [
        {
            "partition": p,
            "key": f"k{i}",
            "value": f"t{p}-{i}",
            "headers": {},
            "timestamp": TIMESTAMP_BASE + 1000 * i + 500 * p,
        }
        for p in (0, 1)
        for i in range(10)
    ]
    offsets = run(client, "produce", cluster, "--topic", topic, stdin=sent)["offsets"]
    stamped = [(r["partition"], r["timestamp"], o) for r, o in zip(sent, offsets, strict=True)]
    ends = {p: max(o for q, _, o in stamped if q == p) + 1 for p in (0, 1)}

    def expected(partition: int, timestamp: int) -> int:
        at_or_after = [o for p, t, o in stamped if p == partition and t >= timestamp]
        if at_or_after:
            return min(at_or_after)
        return ends[partition] if client.past_the_end_is_end_offset else -1

    lookups = [
        TIMESTAMP_BASE - 1,  # before everything: the first record
        TIMESTAMP_BASE + 3000,  # exactly record 3 of partition 0
        TIMESTAMP_BASE + 3001,  # between records
        TIMESTAMP_BASE + 9500,  # the last record of partition 1, past partition 0's
        TIMESTAMP_BASE + 10**6,  # past every record
    ]
    answers = run(client, "offsets-by-time", cluster, "--topic", topic, stdin=lookups)["answers"]
    assert [a["timestamp"] for a in answers] == lookups
    for answer in answers:
        found = {int(p): offset for p, offset in answer["offsets"].items()}
        assert found == {p: expected(p, answer["timestamp"]) for p in (0, 1)}, answer


class Stream(threading.Thread):
    """The client's produce-stream, its JSON lines collected as they come."""

    def __init__(self, command: list[str], log: Path) -> None:
        super().__init__(daemon=True)
        self.log = log
        with log.open("w") as stderr:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        self.lines: list[dict[str, Any]] = []

    def run(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout as lines:
            for line in lines:
                self.lines.append(json.loads(line))

    def acked(self) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if "offset" in line]


def test_a_killed_leader_loses_no_acknowledged_record(
    cluster: LiveCluster, client: Client, tmp_path: Path
) -> None:
    topic = new_topic(cluster, client, "failover", partitions=1)
    stream = Stream(
        node_command(
            client, "produce-stream", cluster, "--topic", topic, "--partitions", "0",
            "--count", "600", "--rate", "40",
        ),
        tmp_path / "stream.log",
    )  # fmt: skip
    stream.start()
    directory = str(cluster.directory)
    leader = None
    try:
        eventually(
            lambda: len(stream.acked()) >= 80 or stream.process.poll() is not None,
            f"{client.name} producing",
        )
        assert stream.process.poll() is None, stream.log.read_text()[-4000:]
        leader = cluster.leader_of(topic)
        killed = tidelog("cluster", "kill", "--data-dir", directory, "--node", str(leader))
        assert killed.returncode == 0, killed.stderr
        acked_before_kill = len(stream.acked())
        stream.process.wait(timeout=RUN_S + 15)
        stream.join(timeout=10)
        assert stream.process.returncode == 0, stream.log.read_text()[-4000:]
    finally:
        if stream.process.poll() is None:
            stream.process.kill()
            stream.process.wait()
        if leader is not None:
            restarted = tidelog(
                "cluster", "restart", "--data-dir", directory, "--node", str(leader)
            )
            assert restarted.returncode == 0, restarted.stderr
            cluster.wait_hosted_everywhere(topic, 1)

    summary = stream.lines[-1]
    acked = stream.acked()
    assert summary["done"] is True and summary["acked"] == len(acked)
    assert len(acked) > acked_before_kill + 100, "the client went on producing after the kill"
    log = [(r.offset, r.value.decode()) for r in read_partitions(cluster, topic, 1)]
    values = [value for _, value in log]
    assert len(values) == len(set(values)), "a record is in the log twice"
    where = {value: offset for offset, value in log}
    for line in acked:
        assert where.get(line["acked"]) == line["offset"], line
    errors = sorted(
        {line["error"][:160] for line in stream.lines if "failed" in line and "error" in line}
    )
    print(
        f"{client.name}: {len(acked)} acknowledged, {summary['failed']} failed (of 600), "
        f"{len(log)} in the log; leader {leader} killed after {acked_before_kill}; {errors}"
    )
