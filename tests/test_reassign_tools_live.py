"""`tidelog partitions reassign` with kafka-reassign-partitions' JSON files, on four real
broker processes: `--generate` proposes, `--execute` moves an ISR-mode topic (Kafka's way:
the new replica joins the ISR, then the old one leaves) and a quorum-mode one, `--verify`
follows them, `--list` and `--status` show a move waiting on a paused node with its
progress, `--cancel` calls it off; a bad file or flag is one line and exit 1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.testing.live import LiveCluster, eventually, running_cluster, tidelog

MOVE_DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("reassign-tools") / "cluster", nodes=4) as live:
        yield live


def reassign(cluster: LiveCluster, *args: str) -> tuple[int, str, str]:
    result = tidelog("partitions", "reassign", "--data-dir", str(cluster.directory), *args)
    return result.returncode, result.stdout, result.stderr


def hosts(cluster: LiveCluster, topic: str) -> dict[int, dict[str, Any]]:
    return cluster.copies(topic)


def create(cluster: LiveCluster, topic: str, *configs: str) -> None:
    created = tidelog(
        "topics",
        "create",
        topic,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--data-dir",
        str(cluster.directory),
        *configs,
    )
    assert created.returncode == 0, created.stderr
    eventually(lambda: len(hosts(cluster, topic)) == 3, f"{topic} on three nodes")


def json_after(heading: str, text: str) -> Any:
    """The JSON document on the line after `heading` in a command's output."""
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip() == heading)
    return json.loads(next(line for line in lines[index + 1 :] if line.strip()))


def test_generate_then_execute_and_verify_an_isr_topic(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    topic = "isr-moving"
    create(cluster, topic, "--config", "replication.mode=isr")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for number in range(50):
        producer.produce(topic, f"v{number}".encode())
    assert producer.flush(30) == 0
    before = sorted(hosts(cluster, topic))
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    spare = next(n for n in (1, 2, 3, 4) if n not in before)
    keep = [n for n in before if n != before[0]]
    code, out, err = reassign(
        cluster,
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        ",".join(map(str, [*keep, spare])),
    )
    assert code == 0, err
    (current,) = json_after("Current partition replica assignment", out)["partitions"]
    assert (current["topic"], current["partition"], current["log_dirs"]) == (topic, 0, ["any"] * 3)
    assert sorted(current["replicas"]) == before
    (proposed,) = json_after("Proposed partition reassignment configuration", out)["partitions"]
    target = proposed["replicas"]
    assert sorted(target) == sorted([*keep, spare])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [proposed]}))
    code, out, err = reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
    assert code == 0, err
    assert f"Successfully started partition reassignments for {topic}-0" in out
    assert json_after("Current partition replica assignment", out)["partitions"]

    def verified() -> bool:
        code, out, _ = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
        return code == 0 and f"Reassignment of partition {topic}-0 is completed." in out

    eventually(verified, "the move completed", deadline_s=MOVE_DEADLINE_S)
    eventually(lambda: sorted(hosts(cluster, topic)) == sorted(target), "the old copy is gone")
    rows = hosts(cluster, topic)
    leader = next(row for row in rows.values() if row["role"] == "leader")
    assert leader["replication"] == "isr"
    assert sorted(leader["reported_isr"]) == sorted(target)  # type: ignore[type-var]
    code, out, _ = reassign(cluster, "--list")
    assert (code, out.strip()) == (0, "No partition reassignments found.")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: set[bytes] = set()
    try:
        eventually(lambda: values.update(read(consumer)) or len(values) == 50, "every record")
    finally:
        consumer.close()


def read(consumer: Any) -> set[bytes]:
    message = consumer.poll(0.2)
    if message is None or message.error() is not None:
        return set()
    return {message.value()}


def test_a_move_waiting_on_a_paused_node_is_listed_and_cancelled(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    topic = "waiting"
    create(cluster, topic)
    before = sorted(hosts(cluster, topic))
    target = [n for n in (1, 2, 3, 4) if n != before[0]]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}
        )
    )
    paused = next(n for n in target if n not in before)
    directory = str(cluster.directory)
    others = [node["kafka"] for node in cluster.record["nodes"] if node["id"] != paused]
    bootstrap = ("--bootstrap-server", ",".join(others))
    assert (
        tidelog("cluster", "pause", "--node", str(paused), "--data-dir", directory).returncode == 0
    )
    try:
        code, out, err = reassign(
            cluster,
            *bootstrap,
            "--execute",
            "--reassignment-json-file",
            str(plan),
            "--throttle",
            "1000",
        )
        assert code == 0, err
        assert "The inter-broker throttle limit was set to 1000 B/s" in out  # the node down too
        code, out, err = reassign(cluster, *bootstrap, "--status")
        assert code == 0, err
        assert re.search(
            rf"^{topic}-0: replicas: .*\. adding: {paused}\. removing: {before[0]}\.$", out, re.M
        )
        progress = rf"^  node {paused}: \S+ offsets and \S+ bytes behind the leader \(node \d\)$"
        assert re.search(progress, out, re.M), out
        code, out, err = reassign(
            cluster, *bootstrap, "--verify", "--reassignment-json-file", str(plan)
        )
        assert f"Reassignment of partition {topic}-0 is still in progress." in out
        code, out, err = reassign(
            cluster, *bootstrap, "--cancel", "--reassignment-json-file", str(plan)
        )
        assert code == 0, err
        assert f"Successfully cancelled partition reassignments for: {topic}-0" in out
        assert "Clearing broker-level throttles on brokers 1,2,3,4" in out
        code, out, _ = reassign(cluster, *bootstrap, "--list")
        assert out.strip() == "No partition reassignments found."
        code, out, _ = reassign(
            cluster, *bootstrap, "--verify", "--reassignment-json-file", str(plan)
        )
        assert "There is no active reassignment of partition" in out
    finally:
        assert (
            tidelog("cluster", "resume", "--node", str(paused), "--data-dir", directory).returncode
            == 0
        )
    eventually(lambda: sorted(hosts(cluster, topic)) == before, "back on its replicas")


EXECUTE = ("--execute", "--reassignment-json-file", "{f}")
GENERATE = ("--generate", "--topics-to-move-json-file", "{f}")
TWICE = '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}'
UNKNOWN = '{"partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]}'


@pytest.mark.parametrize(
    ("args", "file_text", "message"),
    [
        ((), None, "error: name exactly one action"),
        (("--list", "--verify"), None, "error: name exactly one action"),
        (("--execute",), None, "error: --reassignment-json-file FILE is needed"),
        (EXECUTE, "{", "error: the reassignment file is not JSON"),
        (EXECUTE, '{"version": 2, "partitions": []}', "version 2"),
        (EXECUTE, TWICE, "names a replica twice"),
        (EXECUTE, UNKNOWN, "error: unknown topic"),
        (GENERATE, '{"topics": []}', "names no topics"),
        ((*GENERATE, "--broker-list", "1,9"), '{"topics": [{"topic": "x"}]}', "brokerIDs: [9]"),
        (("--list", "--replica-alter-log-dirs-throttle", "100"), None, "is not supported"),
    ],
)
def test_a_bad_file_or_flag_is_one_line(
    cluster: LiveCluster, tmp_path: Path, args: tuple[str, ...], file_text: str | None, message: str
) -> None:
    path = tmp_path / "file.json"
    if file_text is not None:
        path.write_text(file_text)
    code, _, err = reassign(cluster, *(arg.replace("{f}", str(path)) for arg in args))
    assert code == 1
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
