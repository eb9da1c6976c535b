"""The Kafka-style client commands against one real 3-node cluster.

The cluster is started once for the module (`LiveCluster`: `tidelog cluster up` on
127.0.0.1, `tidelog cluster down` at the end); each test creates topics of its own. The
commands run through click's CliRunner, and once as a real `python -m tidelog`
subprocess. Offsets are read back rather than assumed, since every new leader of a partition
writes a control batch first.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from tidelog.cli import main
from tidelog.testing.live import LiveCluster, eventually, poll
from tidelog.tools.client import (
    LINE_BYTES_MAX_DEFAULT,
    RecordFormat,
    TextLayout,
    find_local_cluster,
    parse_header,
    read_lines,
    record_json,
    record_text,
)
from tidelog.tools.client_kafka import ClientError, parse_offset_time, split_bootstrap
from tidelog.tools.client_records import NO_TIMESTAMP_TYPE, ConsumedRecord

T = TypeVar("T")
DEADLINE_S = 30.0
POLL_S = 0.1
CONSUME_TIMEOUT_MS = "20000"
PARTITION_LINE = re.compile(
    r"\tTopic: (?P<topic>\S+)\tPartition: (?P<partition>\d+)\tLeader: (?P<leader>-?\d+)\t"
    r"Replicas: (?P<replicas>[\d,]+)\tIsr: (?P<isr>[\d,]*)"
)
REPLICA_LINE = re.compile(r"\t\tReplica: (?P<node>\d+)\tRole: \w+\tEpoch: (?P<epoch>\d+)\t")


@pytest.fixture(autouse=True)
def no_local_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No local cluster unless a test asks for one: ./data must not leak in."""
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path / "no-cluster"))


@pytest.fixture
def local_cluster(cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch) -> LiveCluster:
    """The module's cluster as the local one (its cluster.json)."""
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(cluster.directory))
    return cluster


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(cluster: LiveCluster | None, *args: str, stdin: str | None = None) -> Result:
    bootstrap = [] if cluster is None else ["--bootstrap-server", cluster.bootstrap]
    return CliRunner().invoke(main, [*args, *bootstrap], input=stdin)


def ok(cluster: LiveCluster | None, *args: str, stdin: str | None = None) -> Result:
    result = run(cluster, *args, stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def failed(result: Result, message: str) -> None:
    """An expected failure: exit 1, `error: ...` on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert f"error: {message}" in result.stderr
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def consume(cluster: LiveCluster, topic: str, *args: str) -> Result:
    """`consume TOPIC ARGS`, bounded by --timeout-ms unless the test gives it: consume
    follows the log until stopped, and a test must never hang."""
    bound = [] if "--timeout-ms" in args else ["--timeout-ms", CONSUME_TIMEOUT_MS]
    return ok(cluster, "consume", topic, *args, *bound)


def describe(cluster: LiveCluster | None, topic: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(
        ok(cluster, "topics", "describe", topic, "--json").stdout
    )
    return rows


def led_rows(cluster: LiveCluster, topic: str) -> list[dict[str, Any]] | None:
    """`topics describe --json` of `topic` once the answering node knows it and a leader
    of each partition, else None."""
    result = run(cluster, "topics", "describe", topic, "--json")
    if result.exit_code == 1 and f"unknown topic '{topic}'" in result.stderr:
        return None
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows if all(row["leader"] >= 0 for row in rows) else None


def create(
    cluster: LiveCluster, topic: str, partitions: int = 1, factor: int = 3, *extra: str
) -> Result:
    """`topics create`, then wait until the topic is usable from every node.

    CreateTopics answers once the metadata leader has committed the topic; the other nodes
    apply it a moment later (as in Kafka). A node that hosts a partition has applied the
    topic and knows its leader, so a topic on all three nodes is waited for on each node's
    /status; one of fewer replicas only until some node names a leader for each partition.
    """
    args = ["--partitions", str(partitions), "--replication-factor", str(factor)]
    created = ok(cluster, "topics", "create", topic, *args, *extra)
    if factor == len(cluster.record["nodes"]):
        cluster.wait_hosted_everywhere(topic, partitions)
    else:
        poll(lambda: led_rows(cluster, topic))
    return created


def latest(cluster: LiveCluster, topic: str) -> dict[int, int]:
    """Each partition's HWM (get-offsets --json)."""
    rows = json.loads(ok(cluster, "get-offsets", topic, "--json").stdout)
    return {row["partition"]: row["offset"] for row in rows}


def listed(cluster: LiveCluster) -> list[str]:
    names = ok(cluster, "topics", "list").stdout.splitlines()
    assert names == sorted(names)
    return names


# topics


def test_topics_create_list_describe_delete(cluster: LiveCluster) -> None:
    create(cluster, "audit", partitions=1, factor=1)
    # Nodes apply the metadata log in order: once each hosts "orders", each knows "audit".
    result = create(cluster, "orders", 2, 3, "--config", "retention.ms=1000")
    assert result.stdout == "Created topic orders.\n"
    assert {"audit", "orders"} <= set(listed(cluster))
    listing = json.loads(ok(cluster, "topics", "list", "--json").stdout)
    assert listing == {"topics": listed(cluster)}
    lines = ok(cluster, "topics", "describe", "orders").stdout.splitlines()
    assert (
        lines[0]
        == "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3\tReplicationMode: quorum"
    )
    for number, line in enumerate(lines[1:]):
        match = PARTITION_LINE.fullmatch(line)
        assert match is not None, line
        assert (match["topic"], match["partition"]) == ("orders", str(number))
        assert sorted(match["replicas"].split(",")) == ["1", "2", "3"]
        assert match["leader"] in match["replicas"].split(",")
        assert set(match["isr"].split(",")) <= set(match["replicas"].split(","))
    every = ok(cluster, "topics", "describe").stdout.splitlines()
    assert {
        "Topic: audit\tPartitionCount: 1\tReplicationFactor: 1\tReplicationMode: quorum",
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3\tReplicationMode: quorum",
    } <= {line for line in every if not line.startswith("\t")}
    assert ok(cluster, "topics", "delete", "audit").stdout == "Deleted topic audit.\n"
    assert json.loads(ok(cluster, "topics", "delete", "orders", "--json").stdout) == {
        "topic": "orders",
        "deleted": True,
    }
    eventually(lambda: not {"audit", "orders"} & set(listed(cluster)))


def test_topics_create_json_and_errors(cluster: LiveCluster) -> None:
    result = ok(cluster, "topics", "create", "created", "--partitions", "3", "--json")
    assert json.loads(result.stdout) == {
        "topic": "created",
        "partitions": 3,
        "replication_factor": 1,
        "configs": {},
    }
    failed(run(cluster, "topics", "create", "created"), "Topic 'created' already exists.")
    failed(run(cluster, "topics", "create", "u", "--config", "novalue"), "bad --config")
    assert run(cluster, "topics", "create", "u", "--partitions", "0").exit_code == 2
    failed(run(cluster, "topics", "describe", "nope"), "unknown topic 'nope'")
    failed(run(cluster, "topics", "delete", "nope"), "unknown topic 'nope'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["t", "--config", "retention.ms=abc"],
            "Invalid value abc for configuration retention.ms: Not a number of type LONG",
        ),
        (
            ["t", "--config", "segment.bytes=0"],
            "Invalid value 0 for configuration segment.bytes: Value must be at least 14",
        ),
        (
            ["t", "--config", "retention.bytes=1.5"],
            "Invalid value 1.5 for configuration retention.bytes: Not a number of type LONG",
        ),
        (
            ["t", "--config", "cleanup.policy=compact"],
            "Invalid value compact for configuration cleanup.policy: log compaction is not",
        ),
        (["t", "--config", "flush.ms=1"], "Unknown topic config name: flush.ms"),
        (["é"], "Topic name 'é' is illegal, it contains a character other than ASCII"),
        (["."], 'Topic name cannot be "." or ".."'),
        (["__cluster_metadata"], "Creation of internal topic __cluster_metadata is prohibited"),
        (["__consumer_offsets"], "Creation of internal topic __consumer_offsets is prohibited"),
    ],
)
def test_topics_create_refuses_bad_configs_and_names(
    cluster: LiveCluster, args: list[str], message: str
) -> None:
    """Refused before anything is proposed, with Kafka's message; the cluster carries on."""
    failed(run(cluster, "topics", "create", *args), message)
    assert "t" not in listed(cluster)


def test_dotted_and_underscored_names_collide(cluster: LiveCluster) -> None:
    create(cluster, "my.topic", partitions=1, factor=1)
    failed(
        run(cluster, "topics", "create", "my_topic"),
        "Topic 'my_topic' collides with existing topic: my.topic",
    )


def test_internal_topics_are_protected(cluster: LiveCluster) -> None:
    poll(lambda: led_rows(cluster, "__consumer_offsets"))
    failed(
        run(cluster, "delete-records", "__consumer_offsets", "--partition", "0", "--offset", "-1"),
        "InvalidTopicError",
    )
    failed(  # Metadata answers it as no topic at all
        run(cluster, "delete-records", "__cluster_metadata", "--partition", "0", "--offset", "-1"),
        "unknown topic '__cluster_metadata'",
    )
    failed(run(cluster, "topics", "delete", "__consumer_offsets"), "InvalidTopicError")


def test_describe_json_without_a_local_cluster(cluster: LiveCluster) -> None:
    create(cluster, "pair", partitions=1, factor=2)
    # A node that hosts no replica of "pair" learns its leader from the leader's notices.
    [row] = poll(lambda: led_rows(cluster, "pair"))
    assert sorted(row) == ["isr", "leader", "partition", "replicas", "replication_mode", "topic"]
    assert (row["topic"], row["partition"]) == ("pair", 0)
    assert len(row["replicas"]) == 2
    assert row["leader"] in row["isr"]
    assert set(row["isr"]) <= set(row["replicas"])


def replica_lines(leader: int, replicas: list[int], epoch: int, hwm: int) -> list[str]:
    """The per-replica lines of a partition whose replicas all hold `hwm` records."""
    return [
        f"\t\tReplica: {node}\tRole: {'leader' if node == leader else 'follower'}\t"
        f"Epoch: {epoch}\tLogStartOffset: 0\tHighWatermark: {hwm}\tLogEndOffset: {hwm}"
        for node in replicas
    ]


def fully_replicated(lines: list[str], hwm: int) -> bool:
    rows = lines[2:]
    return len(rows) == 3 and all(
        row.endswith(f"\tHighWatermark: {hwm}\tLogEndOffset: {hwm}") for row in rows
    )


def test_describe_adds_each_replicas_state_from_admin_status(local_cluster: LiveCluster) -> None:
    create(local_cluster, "replicated")
    ok(local_cluster, "produce", "replicated", stdin="a\nb\n")
    hwm = latest(local_cluster, "replicated")[0]

    def replicated_lines() -> list[str] | None:
        lines = ok(None, "topics", "describe", "replicated").stdout.splitlines()
        return lines if fully_replicated(lines, hwm) else None

    header, partition, *replica_rows = poll(replicated_lines)
    assert (
        header
        == "Topic: replicated\tPartitionCount: 1\tReplicationFactor: 3\tReplicationMode: quorum"
    )
    match = PARTITION_LINE.fullmatch(partition)
    assert match is not None, partition
    leader, replicas = int(match["leader"]), [int(n) for n in match["replicas"].split(",")]
    first = REPLICA_LINE.match(replica_rows[0])
    assert first is not None, replica_rows[0]
    epoch = int(first["epoch"])
    assert replica_rows == replica_lines(leader, replicas, epoch, hwm)
    [row] = describe(None, "replicated")
    assert row["replica_status"] == [
        {
            "node_id": node,
            "role": "leader" if node == leader else "follower",
            "epoch": epoch,
            "log_start_offset": 0,
            "hwm": hwm,
            "log_end_offset": hwm,
        }
        for node in replicas
    ]
    table = ok(None, "topics", "describe", "replicated", "--table").stdout
    assert "HIGH-WATERMARK" in table
    assert "leader" in table
    assert "follower" in table


def test_describe_marks_a_broker_that_does_not_answer(
    cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cluster's own cluster.json, but node 3's admin address is one where nothing
    listens (as when node 3 is down): its replicas show as unknown."""
    create(cluster, "partly")
    record = json.loads((cluster.directory / "cluster.json").read_text())
    record["nodes"][2]["admin"] = f"127.0.0.1:{free_port()}"
    (tmp_path / "cluster.json").write_text(json.dumps(record))
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path))
    _, partition, *rows = ok(None, "topics", "describe", "partly").stdout.splitlines()
    match = PARTITION_LINE.fullmatch(partition)
    assert match is not None, partition
    replicas = [int(n) for n in match["replicas"].split(",")]
    assert [row.split("\t")[2] for row in rows] == [f"Replica: {n}" for n in replicas]
    assert [row.endswith("\tStatus: unknown") for row in rows] == [n == 3 for n in replicas]
    [row] = describe(None, "partly")
    assert [status is None for status in row["replica_status"]] == [n == 3 for n in replicas]


# produce and consume


def test_produce_then_consume_from_the_beginning(cluster: LiveCluster) -> None:
    create(cluster, "lines", partitions=2)
    result = ok(cluster, "produce", "lines", "--partition", "1", stdin="one\ntwo\n\nthree\n")
    assert result.stderr == "4 records produced\n"
    result = consume(cluster, "lines", "--from-beginning", "--max-messages", "4")
    assert result.stdout == "one\ntwo\n\nthree\n"
    assert result.stderr == "Processed a total of 4 messages\n"
    hwm = latest(cluster, "lines")[1]
    result = consume(
        cluster, "lines", "--partition", "1", "--offset", str(hwm - 2), "--print-offset",
        "--timeout-ms", "300",
    )  # fmt: skip
    assert result.stdout == f"Offset:{hwm - 2}\t\nOffset:{hwm - 1}\tthree\n"


def test_produce_keys_and_acks(cluster: LiveCluster) -> None:
    create(cluster, "keyed")
    for acks in ("all", "1", "0"):
        ok(cluster, "produce", "keyed", "--acks", acks, "--key-separator", "=", stdin=f"k={acks}\n")
    result = consume(cluster, "keyed", "--from-beginning", "--print-key", "--max-messages", "3")
    assert result.stdout == "k\tall\nk\t1\nk\t0\n"
    printed = consume(cluster, "keyed", "--from-beginning", "--max-messages", "1", "--json")
    record = json.loads(printed.stdout)
    assert sorted(record) == [
        "headers", "key", "offset", "partition", "timestamp", "timestamp_type", "topic", "value",
    ]  # fmt: skip
    assert {k: record[k] for k in ("topic", "partition", "key", "value")} == {
        "topic": "keyed",
        "partition": 0,
        "key": "k",
        "value": "all",
    }
    assert record["offset"] == latest(cluster, "keyed")[0] - 3


def test_produce_json_summary(cluster: LiveCluster) -> None:
    create(cluster, "summary")
    result = ok(cluster, "produce", "summary", "--json", stdin="a\nb\nc\n")
    assert json.loads(result.stdout) == {
        "topic": "summary",
        "produced": 3,
        "failed": 0,
        "errors": [],
        "last_offsets": {"0": latest(cluster, "summary")[0] - 1},
    }


def test_produce_reports_failed_lines_and_sends(cluster: LiveCluster) -> None:
    create(cluster, "failing")
    result = run(cluster, "produce", "failing", "--key-separator", ":", stdin="k:v\nnokey\n")
    failed(result, "line 2: no key separator ':'")
    assert "1 records produced\n1 records failed\n" in result.stderr
    before = latest(cluster, "failing")
    # A line the CLI accepts, but larger than a producer request may be.
    huge = "x" * (LINE_BYTES_MAX_DEFAULT - 8) + "\n"
    failed(run(cluster, "produce", "failing", stdin=huge), "MessageSizeTooLargeError")
    assert latest(cluster, "failing") == before


def test_consume_stops_after_the_idle_timeout(cluster: LiveCluster) -> None:
    create(cluster, "idle")
    ok(cluster, "produce", "idle", stdin="old\n")
    started = time.monotonic()
    result = consume(cluster, "idle", "--timeout-ms", "300")
    assert result.stdout == ""
    assert result.stderr == "Processed a total of 0 messages\n"
    assert time.monotonic() - started < DEADLINE_S


def test_headers_and_timestamps_round_trip(cluster: LiveCluster) -> None:
    """--header and --timestamp on every record; read back as kafka-console-consumer prints
    them (--print-timestamp, --print-headers) and in --json. Without --timestamp a record
    carries the producer's clock."""
    create(cluster, "stamped")
    stamp = "--timestamp", "1700000000000"
    headers = "--header", "trace=abc", "--header", "app=a=b", "--header", "empty="
    ok(cluster, "produce", "stamped", "--key-separator", "=", *stamp, *headers, stdin="k=v\n")
    before = int(time.time() * 1000)
    ok(cluster, "produce", "stamped", stdin="plain\n")
    after = int(time.time() * 1000)
    flags = ("--print-timestamp", "--print-headers", "--print-key")
    text = consume(cluster, "stamped", "--from-beginning", "--max-messages", "2", *flags)
    first, second = text.stdout.splitlines()
    assert first == "CreateTime:1700000000000\ttrace:abc,app:a=b,empty:\tk\tv"
    created, no_headers, key, value = second.split("\t")
    assert (no_headers, key, value) == ("NO_HEADERS", "null", "plain")
    assert created.startswith("CreateTime:")
    assert before <= int(created.removeprefix("CreateTime:")) <= after
    rows = consume(cluster, "stamped", "--from-beginning", "--max-messages", "2", "--json")
    one, two = (json.loads(line) for line in rows.stdout.splitlines())
    assert {k: one[k] for k in ("timestamp", "timestamp_type", "headers", "key", "value")} == {
        "timestamp": 1700000000000,
        "timestamp_type": "CreateTime",
        "headers": [["trace", "abc"], ["app", "a=b"], ["empty", ""]],
        "key": "k",
        "value": "v",
    }
    assert (two["headers"], two["timestamp"]) == ([], int(created.removeprefix("CreateTime:")))


def test_consume_format_string_like_kcat(cluster: LiveCluster) -> None:
    create(cluster, "formatted", partitions=2)
    args = ("--partition", "1", "--key-separator", ":", "--header", "h=1", "--timestamp", "5")
    ok(cluster, "produce", "formatted", *args, stdin="key:value\n")
    ok(cluster, "produce", "formatted", "--partition", "1", "--timestamp", "6", stdin="bare\n")
    hwm = latest(cluster, "formatted")[1]
    fmt = r"%t [%p] @%o: %k=%s (%K/%S) %T {%h} 100%%\n"
    result = consume(
        cluster, "formatted", "--from-beginning", "--max-messages", "2", "--format", fmt
    )
    assert result.stdout == (
        f"formatted [1] @{hwm - 2}: key=value (3/5) 5 {{h=1}} 100%\n"
        f"formatted [1] @{hwm - 1}: =bare (-1/4) 6 {{}} 100%\n"
    )
    tabbed = consume(
        cluster, "formatted", "--from-beginning", "--max-messages", "1", "--format", r"%s\t|"
    )
    assert tabbed.stdout == "value\t|"  # nothing added at the end, as kcat


def test_consume_stops_at_max_messages_or_after_the_idle_timeout(cluster: LiveCluster) -> None:
    """consume follows the log: --max-messages stops it as soon as that many were printed
    (long before the generous --timeout-ms), --timeout-ms once nothing more came."""
    create(cluster, "stopping")
    ok(cluster, "produce", "stopping", stdin="a\nb\nc\n")
    started = time.monotonic()
    counted = consume(cluster, "stopping", "--from-beginning", "--max-messages", "2",
                      "--timeout-ms", "120000")  # fmt: skip
    assert time.monotonic() - started < 60
    assert (counted.stdout, counted.stderr) == ("a\nb\n", "Processed a total of 2 messages\n")
    idle = consume(cluster, "stopping", "--from-beginning", "--timeout-ms", "1000")
    assert (idle.stdout, idle.stderr) == ("a\nb\nc\n", "Processed a total of 3 messages\n")


def test_an_offset_out_of_range_is_warned_about(cluster: LiveCluster) -> None:
    """Past the HWM or below the log start offset: a warning naming the partition's range,
    then the latest offset (kafka-console-consumer's auto.offset.reset=latest): nothing of
    what is between the log start and the HWM is printed."""
    create(cluster, "ranged")
    ok(cluster, "produce", "ranged", stdin="a\nb\nc\n")
    hwm = latest(cluster, "ranged")[0]
    past = consume(cluster, "ranged", "--partition", "0", "--offset", str(hwm + 10),
                   "--timeout-ms", "500")  # fmt: skip
    assert past.stdout == ""
    assert past.stderr == (
        f"warning: --offset {hwm + 10} is out of range for partition ranged-0: its offsets "
        f"run from 0 (earliest) to {hwm} (latest); starting at the latest, {hwm} "
        "(auto.offset.reset=latest, as kafka-console-consumer does)\n"
        "Processed a total of 0 messages\n"
    )
    ok(cluster, "delete-records", "ranged", "--partition", "0", "--offset", str(hwm - 1))
    below = consume(cluster, "ranged", "--partition", "0", "--offset", "0", "--timeout-ms", "500")
    assert below.stdout == ""
    assert f"from {hwm - 1} (earliest) to {hwm} (latest)" in below.stderr
    at_end = consume(cluster, "ranged", "--partition", "0", "--offset", str(hwm),
                     "--timeout-ms", "500")  # fmt: skip
    assert "warning" not in at_end.stderr  # the HWM is where the next record goes
    earliest = consume(cluster, "ranged", "--partition", "0", "--offset", "earliest",
                       "--max-messages", "1")  # fmt: skip
    assert earliest.stdout == "c\n"


def test_max_line_bytes(cluster: LiveCluster) -> None:
    """A line longer than --max-line-bytes fails and names the flag, the others are sent;
    raised past 1 MiB, a line as large as the topic's max.message.bytes allows goes through."""
    create(cluster, "long", 1, 3, "--config", "max.message.bytes=2000000")
    result = run(cluster, "produce", "long", "--max-line-bytes", "4", stdin="abcd\nabcde\r\nxy\n")
    failed(result, "line 2: longer than --max-line-bytes (4 bytes); raise --max-line-bytes")
    assert "2 records produced\n1 records failed\n" in result.stderr
    assert (
        consume(cluster, "long", "--from-beginning", "--max-messages", "2").stdout == "abcd\nxy\n"
    )
    large = "x" * 1_500_000 + "\n"
    failed(
        run(cluster, "produce", "long", stdin=large),
        "line 1: longer than --max-line-bytes (1048576",
    )
    ok(cluster, "produce", "long", "--max-line-bytes", "1600000", stdin=large)
    sized = consume(cluster, "long", "--from-beginning", "--max-messages", "3", "--format", r"%S\n")
    assert sized.stdout.split() == ["4", "2", "1500000"]


# offsets


def test_get_offsets_latest_earliest_and_by_time(cluster: LiveCluster) -> None:
    create(cluster, "offsets", partitions=2)
    ends = latest(cluster, "offsets")
    before = int(time.time() * 1000) - 1
    ok(cluster, "produce", "offsets", "--partition", "0", stdin="a\nb\nc\n")
    assert ok(cluster, "get-offsets", "offsets").stdout == (
        f"offsets:0:{ends[0] + 3}\noffsets:1:{ends[1]}\n"
    )
    earliest = ok(cluster, "get-offsets", "offsets", "--time", "earliest").stdout
    assert earliest == "offsets:0:0\noffsets:1:0\n"
    by_time = ok(cluster, "get-offsets", "offsets", "--time", str(before), "--partition", "0")
    assert by_time.stdout == f"offsets:0:{ends[0]}\n"
    future = ok(cluster, "get-offsets", "offsets", "--time", str(before + 10**9)).stdout
    assert future == "offsets:0:-1\noffsets:1:-1\n"
    assert json.loads(ok(cluster, "get-offsets", "offsets", "--json").stdout) == [
        {"topic": "offsets", "partition": 0, "offset": ends[0] + 3},
        {"topic": "offsets", "partition": 1, "offset": ends[1]},
    ]
    failed(run(cluster, "get-offsets", "offsets", "--time", "yesterday"), "bad --time")
    failed(
        run(cluster, "get-offsets", "offsets", "--partition", "5"),
        "unknown partition 5 of 'offsets'",
    )


def test_delete_records_moves_the_log_start_offset(cluster: LiveCluster) -> None:
    create(cluster, "trimmed")
    ok(cluster, "produce", "trimmed", stdin="a\nb\nc\nd\n")
    hwm = latest(cluster, "trimmed")[0]
    result = ok(cluster, "delete-records", "trimmed", "--partition", "0", "--offset", str(hwm - 2))
    assert result.stdout == f"partition: trimmed-0\tlow_watermark: {hwm - 2}\n"
    earliest = ok(cluster, "get-offsets", "trimmed", "--time", "earliest").stdout
    assert earliest == f"trimmed:0:{hwm - 2}\n"
    consumed = consume(cluster, "trimmed", "--from-beginning", "--max-messages", "2")
    assert consumed.stdout == "c\nd\n"
    result = ok(
        cluster, "delete-records", "trimmed", "--partition", "0", "--offset", "-1", "--json"
    )
    assert json.loads(result.stdout) == {"topic": "trimmed", "partition": 0, "low_watermark": hwm}
    failed(
        run(cluster, "delete-records", "trimmed", "--partition", "0", "--offset", str(hwm + 1)),
        "OffsetOutOfRangeError",
    )


# expected failures


def test_consume_with_a_group_commits_and_the_next_run_resumes(cluster: LiveCluster) -> None:
    """`consume --group` joins the group and commits what it printed; the next consumer of
    the group starts there, and `groups describe` shows no lag."""
    create(cluster, "grouped")
    ok(cluster, "produce", "grouped", stdin="a\nb\nc\nd\ne\n")

    def consume_in_group(count: int) -> list[str]:
        args = ["--group", "g", "--from-beginning", "--max-messages", str(count)]
        return consume(cluster, "grouped", *args).stdout.split()

    assert consume_in_group(3) == ["a", "b", "c"]
    assert consume_in_group(2) == ["d", "e"]
    described = json.loads(ok(cluster, "groups", "describe", "g", "--json").stdout)
    assert described["state"] == "Empty" and described["members"] == []
    [row] = described["offsets"]
    assert row["current_offset"] == row["log_end_offset"] and row["lag"] == 0
    assert ok(cluster, "groups", "list").stdout.split() == ["g"]


@pytest.mark.parametrize(
    "args",
    [
        ["produce", "nope"],
        ["consume", "nope"],
        ["get-offsets", "nope"],
        ["delete-records", "nope", "--partition", "0", "--offset", "0"],
    ],
)
def test_unknown_topic(cluster: LiveCluster, args: list[str]) -> None:
    failed(run(cluster, *args, stdin="x\n"), "unknown topic 'nope'")


def test_bad_flag_combinations(cluster: LiveCluster) -> None:
    failed(run(cluster, "consume", "t", "--offset", "1"), "--offset needs --partition")
    failed(run(cluster, "consume", "t", "--group", "g", "--partition", "0"), "--group cannot")
    failed(run(cluster, "produce", "t", "--key-separator", ""), "--key-separator must not")
    failed(run(cluster, "consume", "t", "--format", "%s", "--json"), "--format and --json exclude")
    failed(
        run(cluster, "consume", "t", "--format", "%s", "--print-key"), "--format and --print-key"
    )
    failed(run(cluster, "consume", "t", "--format", "%y"), "bad --format '%y': unknown %y")
    failed(run(cluster, "consume", "t", "--partition", "0", "--offset", "0", "--from-beginning"),
           "--offset and --from-beginning exclude each other")  # fmt: skip
    assert run(cluster, "consume", "t", "--partition", "0", "--offset", "soon").exit_code == 2
    failed(run(cluster, "produce", "t", "--header", "novalue"), "bad --header 'novalue'")
    assert run(cluster, "produce", "t", "--max-line-bytes", "0").exit_code == 2
    assert run(cluster, "produce", "t", "--acks", "2").exit_code == 2
    assert run(cluster, "delete-records", "t", "--offset", "1").exit_code == 2


@pytest.mark.parametrize(
    "args", [["topics", "list"], ["get-offsets", "t"], ["produce", "t"], ["consume", "t"]]
)
def test_no_broker(args: list[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, [*args, "--bootstrap-server", address], input="x\n")
    failed(result, f"no broker at {address} (connection refused) (is the cluster up?")


def test_a_silent_broker_is_passed_over_and_named(cluster: LiveCluster) -> None:
    """A bootstrap address that accepts connections but never answers (a paused broker)
    costs the probe's two seconds, not a client's whole timeout; alone, it is named."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        listed = CliRunner().invoke(
            main, ["topics", "list", "--bootstrap-server", f"{address},{cluster.bootstrap}"]
        )
        assert listed.exit_code == 0, listed.output
        alone = CliRunner().invoke(main, ["topics", "list", "--bootstrap-server", address])
        failed(alone, f"no broker at {address} (no answer in 2 s)")


# the local cluster file


def test_find_local_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(tmp_path))
    assert find_local_cluster() is None
    (tmp_path / "cluster.json").write_text("{not json")
    assert find_local_cluster() is None
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    cluster = {"bootstrap": "127.0.0.1:1", "nodes": [{"id": 1, "pid": int(dead.stdout)}]}
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() is None
    cluster["nodes"] = [{"id": 1, "pid": os.getpid()}]
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() == cluster
    monkeypatch.delenv("TIDELOG_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cluster.json").write_text(json.dumps(cluster))
    assert find_local_cluster() == cluster


def test_commands_default_to_the_local_cluster(local_cluster: LiveCluster) -> None:
    create(local_cluster, "defaulted")
    assert "defaulted" in ok(None, "topics", "list").stdout.splitlines()


# small pieces


def test_split_bootstrap_and_parse_time() -> None:
    assert split_bootstrap("a:1, b:2,c") == [("a", 1), ("b", 2), ("c", 9092)]
    with pytest.raises(ClientError):
        split_bootstrap("a:x")
    assert [parse_offset_time(t) for t in ("earliest", "LATEST", "12")] == [-2, -1, 12]


def test_record_text_like_the_console_consumer() -> None:
    record = ConsumedRecord("t", 2, 7, 0, None, None)
    assert record_text(record, TextLayout()) == b"null"
    offset_and_key = TextLayout(print_offset=True, print_key=True)
    assert record_text(record, offset_and_key) == b"Offset:7\tnull\tnull"
    both = TextLayout(print_partition=True, print_offset=True)
    assert record_text(record, both) == b"Partition:2\tOffset:7\tnull"


def test_record_text_with_timestamps_and_headers() -> None:
    headers = (("a", b"1"), ("n", None))
    record = ConsumedRecord("t", 2, 7, 5, b"k", b"v", headers, "LogAppendTime")
    every = TextLayout(print_offset=True, print_key=True, print_timestamp=True, print_headers=True)
    assert record_text(record, every) == b"LogAppendTime:5\tOffset:7\ta:1,n:null\tk\tv"
    bare = ConsumedRecord("t", 2, 7, -1, None, b"v", (), NO_TIMESTAMP_TYPE)
    assert record_text(bare, every) == b"NO_TIMESTAMP\tOffset:7\tNO_HEADERS\tnull\tv"
    assert record_text(bare, TextLayout(print_timestamp=True)) == b"NO_TIMESTAMP\tv"
    assert every.flags() == [
        "--print-offset",
        "--print-key",
        "--print-timestamp",
        "--print-headers",
    ]


def test_record_json_decodes_header_values_as_utf8_with_replacement() -> None:
    record = ConsumedRecord("t", 0, 1, 9, None, b"\xff", (("bin", b"a\xffb"), ("n", None)))
    assert json.loads(record_json(record)) == {
        "topic": "t",
        "partition": 0,
        "offset": 1,
        "timestamp": 9,
        "timestamp_type": "CreateTime",
        "headers": [["bin", "a\ufffdb"], ["n", None]],
        "key": None,
        "value": "\ufffd",
    }


def test_record_format_like_kcat() -> None:
    record = ConsumedRecord("t", 1, 2, 3, None, b"v", (("h", b"x"), ("n", None)))
    render = RecordFormat.parse(r"%t|%p|%o|%k|%s|%K|%S|%T|%h|%%|\n\t\r\\\q\%")
    assert render.render(record) == b"t|1|2||v|-1|1|3|h=x,n=|%|\n\t\r\\q%"
    assert RecordFormat.parse("plain").render(record) == b"plain"
    assert RecordFormat.parse("").render(record) == b""
    assert RecordFormat.parse("trailing\\").render(record) == b"trailing\\"
    with pytest.raises(ClientError, match=r"bad --format '%x': unknown %x \(known: %t %p"):
        RecordFormat.parse("%x")
    with pytest.raises(ClientError, match="a lone % at its end"):
        RecordFormat.parse("value %")


def test_read_lines_refuses_and_skips_long_lines() -> None:
    stream = io.BytesIO(b"abcd\r\nabcde\nabcd\rx\n" + b"y" * 200_000 + b"\nz")
    lines = list(read_lines(stream, line_bytes_max=4))
    assert [line for line in lines if isinstance(line, bytes)] == [b"abcd", b"z"]
    refused = [line for line in lines if isinstance(line, ClientError)]
    assert len(refused) == 3
    assert str(refused[0]) == (
        "longer than --max-line-bytes (4 bytes); raise --max-line-bytes to send it"
    )
    assert lines[-1] == b"z"


def test_parse_header() -> None:
    assert parse_header("k=v=w") == ("k", b"v=w")
    assert parse_header("k=") == ("k", b"")
    for bad in ("novalue", "=v"):
        with pytest.raises(ClientError, match="want KEY=VALUE"):
            parse_header(bad)


# a real process


def test_python_dash_m_tidelog_round_trip(cluster: LiveCluster, tmp_path: Path) -> None:
    create(cluster, "process")
    ends = latest(cluster, "process")
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "none")}
    command = [sys.executable, "-m", "tidelog"]
    produced = subprocess.run(
        [*command, "produce", "process", "--bootstrap-server", cluster.bootstrap],
        input=b"hello\nworld\n",
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.decode().endswith("2 records produced\n")
    offsets = subprocess.run(
        [*command, "get-offsets", "process", "--bootstrap-server", cluster.bootstrap],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert offsets.stdout == f"process:0:{ends[0] + 2}\n".encode()
    missing = subprocess.run(
        [*command, "topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith(b"error: no broker at 127.0.0.1:")
    assert b"Traceback" not in missing.stderr


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_consume_cleanly(
    cluster: LiveCluster, tmp_path: Path, signal_number: signal.Signals
) -> None:
    """A real `python -m tidelog consume --group` follows the log until Ctrl-C (SIGINT) or
    SIGTERM, then commits what it printed, prints Kafka's count and exits 0."""
    topic = group = f"signalled-{signal_number.name.lower()}"
    create(cluster, topic)
    ok(cluster, "produce", topic, stdin="a\nb\nc\n")
    out, err = tmp_path / "out", tmp_path / "err"
    command = [sys.executable, "-m", "tidelog", "consume", topic, "--from-beginning"]
    env = {**os.environ, "TIDELOG_DATA_DIR": str(tmp_path / "none")}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--group", group, "--bootstrap-server", cluster.bootstrap],
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    try:
        eventually(
            lambda: out.read_bytes() == b"a\nb\nc\n",
            lambda: f"consume printed {out.read_bytes()!r}, {err.read_bytes()!r}",
        )
        process.send_signal(signal_number)
        assert process.wait(timeout=DEADLINE_S) == 0, err.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE_S)
    assert err.read_text() == "Processed a total of 3 messages\n"
    [row] = json.loads(ok(cluster, "groups", "describe", group, "--json").stdout)["offsets"]
    assert row["current_offset"] == row["log_end_offset"] and row["lag"] == 0


def test_describe_filters_configs_and_data_dir(cluster: LiveCluster) -> None:
    """kafka-topics' filters keep nothing on a healthy cluster; DescribeConfigs reads a
    topic's configs back (given, and in force); --data-dir adds the replicas' states."""
    ok(cluster, "topics", "create", "filtered", "--partitions", "2", "--replication-factor",
       "3", "--config", "retention.ms=60000")  # fmt: skip
    for flag in (
        "--under-replicated-partitions",
        "--unavailable-partitions",
        "--under-min-isr-partitions",
    ):
        eventually(lambda f=flag: ok(cluster, "topics", "describe", "filtered", f).stdout == "")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        found = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "filtered")], config_filter="all"
        )["topic"]["filtered"]
    finally:
        admin.close()
    assert found["retention.ms"]["value"] == "60000"
    assert found["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert found["min.insync.replicas"]["value"] == "2"  # a majority of 3, in force
    assert found["min.insync.replicas"]["config_source"] == "DEFAULT_CONFIG"
    plain = ok(cluster, "topics", "describe", "filtered").stdout
    assert "Role:" not in plain  # no local cluster known: no replica lines
    local = ok(cluster, "topics", "describe", "filtered", "--data-dir", str(cluster.directory))
    assert local.stdout.count("Role:") == 6, local.stdout  # 2 partitions x 3 replicas


# Kafka's spellings: --topic, --property, kafka-topics' verbs


def test_kafka_spellings_of_topics_produce_and_consume(cluster: LiveCluster) -> None:
    verbs = ["--partitions", "2", "--replication-factor", "3"]
    created = ok(cluster, "topics", "--create", "--topic", "spelled", *verbs)
    assert created.stdout == "Created topic spelled.\n"
    poll(lambda: led_rows(cluster, "spelled"), "a leader for each partition of spelled")
    described = ok(cluster, "topics", "--describe", "--topic", "spelled").stdout
    assert described.startswith("Topic: spelled\tPartitionCount: 2\tReplicationFactor: 3")
    assert "spelled" in ok(cluster, "topics", "--list").stdout.splitlines()
    both = run(cluster, "topics", "describe", "spelled", "--topic", "spelled")
    assert both.exit_code == 2 and "give the topic once" in both.output
    neither = run(cluster, "topics", "create")
    assert neither.exit_code == 2 and "name the topic: TOPIC or --topic TOPIC" in neither.output
    two_verbs = run(cluster, "topics", "--create", "--list")
    assert two_verbs.exit_code == 2 and "not --create and --list" in two_verbs.output
    keyed = ["--property", "parse.key=true", "--property", "key.separator=:"]
    ok(cluster, "produce", "--topic", "spelled", "--partition", "0", *keyed, stdin="k1:v1\n")
    headed = ["--property", "parse.headers=true", "--property", "ignore.error=true"]
    ok(cluster, "produce", "--topic", "spelled", "--partition", "0", *headed, stdin="h:1\tv2\nv3\n")
    strict = run(cluster, "produce", "spelled", "--property", "parse.headers=true", stdin="v\n")
    assert strict.exit_code == 1 and "line 1: no headers delimiter" in strict.stderr
    failed(
        run(cluster, "produce", "spelled", "--property", "parse.kez=true"),
        "unknown --property parse.kez",
    )
    shown = [
        "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "key.separator=|", "--property", "null.literal=NIL",
    ]  # fmt: skip
    result = ok(
        cluster, "consume", "--topic", "spelled", "--partition", "0", "--offset", "earliest",
        "--print-partition", "--print-offset", *shown, "--max-messages", "3",
        "--timeout-ms", CONSUME_TIMEOUT_MS,
    )  # fmt: skip
    assert re.fullmatch(
        r"Partition:0\|Offset:(\d+)\|NO_HEADERS\|k1\|v1\n"
        r"Partition:0\|Offset:\d+\|h:1\|NIL\|v2\n"
        r"Partition:0\|Offset:\d+\|NO_HEADERS\|NIL\|v3\n",
        result.stdout,
    ), result.stdout
    failed(
        run(cluster, "consume", "spelled", "--property", "print.colour=true"),
        "unknown --property print.colour",
    )
    disagree = run(cluster, "consume", "spelled", "--print-key", "--property", "print.key=false")
    failed(disagree, "--print-key and --property print.key=false disagree")
    end = ok(cluster, "get-offsets", "--topic", "spelled", "--partition", "0").stdout
    assert re.fullmatch(r"spelled:0:\d+\n", end)
    deleted = ok(
        cluster, "delete-records", "--topic", "spelled", "--partition", "0", "--offset", "-1"
    )
    assert deleted.stdout.startswith("partition: spelled-0\tlow_watermark: ")
    grown = ok(cluster, "topics", "--alter", "--topic", "spelled", "--partitions", "3")
    assert grown.stdout == "Topic spelled now has 3 partitions.\n"
    altered = ok(
        cluster, "topics", "alter-config", "--topic", "spelled", "--set", "retention.ms=9000"
    )
    assert altered.stdout == "Completed updating config for topic spelled.\n"

    def set_for_the_topic() -> bool:  # the answering node may apply the change a moment later
        configs = ok(cluster, "topics", "describe-configs", "--topic", "spelled").stdout
        return "  retention.ms=9000 (TOPIC)" in configs.splitlines()

    eventually(set_for_the_topic, "describe-configs --topic shows retention.ms=9000")
    # A command named first keeps its own options, --delete among them.
    ok(cluster, "topics", "alter-config", "spelled", "--delete", "retention.ms")
    assert (
        ok(cluster, "topics", "--delete", "--topic", "spelled").stdout == "Deleted topic spelled.\n"
    )


def test_kafka_consumer_groups_spellings(cluster: LiveCluster) -> None:
    create(cluster, "cg-spelled")
    ok(cluster, "produce", "cg-spelled", stdin="a\nb\n")
    ok(
        cluster, "consume", "cg-spelled", "--group", "spelled-group", "--from-beginning",
        "--timeout-ms", CONSUME_TIMEOUT_MS,
    )  # fmt: skip
    assert "spelled-group" in ok(cluster, "groups", "--list").stdout.splitlines()
    described = json.loads(
        ok(cluster, "groups", "--describe", "--group", "spelled-group", "--json").stdout
    )
    assert [row["lag"] for row in described["offsets"]] == [0]
    both = run(cluster, "groups", "describe", "spelled-group", "--group", "spelled-group")
    assert both.exit_code == 2 and "give the group once" in both.output
    neither = run(cluster, "groups", "describe")
    assert neither.exit_code == 2 and "name the group: GROUP or --group GROUP" in neither.output
    reset = ok(
        cluster, "groups", "--reset-offsets", "--group", "spelled-group", "--topic", "cg-spelled",
        "--to-earliest", "--execute", "--json",
    )  # fmt: skip
    assert json.loads(reset.stdout)["executed"] is True
    ok(cluster, "groups", "--delete-offsets", "--group", "spelled-group", "--topic", "cg-spelled")
    deleted = ok(cluster, "groups", "--delete", "--group", "spelled-group")
    assert deleted.stdout == "Deletion of group 'spelled-group' was successful.\n"
    unnamed = run(cluster, "groups", "--delete")
    assert unnamed.exit_code == 2 and "name the groups" in unnamed.output


def test_a_bad_config_reads_the_same_from_create_and_alter_config(cluster: LiveCluster) -> None:
    create(cluster, "reconfigured")
    message = "Invalid value abc for configuration retention.ms: Not a number of type LONG"
    at_create = run(cluster, "topics", "create", "other", "--config", "retention.ms=abc")
    at_alter = run(cluster, "topics", "alter-config", "reconfigured", "--set", "retention.ms=abc")
    failed(at_create, message)
    failed(at_alter, message)
    assert at_create.stderr == at_alter.stderr == f"error: {message}\n"


def test_an_explicit_data_dir_without_a_cluster_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["topics", "list", "--data-dir", str(empty)])
    failed(
        result,
        f"{empty} has no cluster.json (no local cluster there; start one with tidelog cluster "
        f"up --data-dir {empty}, or give --bootstrap-server)",
    )
    monkeypatch.setenv("TIDELOG_DATA_DIR", str(empty))
    failed(CliRunner().invoke(main, ["consume", "t"]), f"{empty} has no cluster.json")
