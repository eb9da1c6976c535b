"""The client commands ride over a paused broker, as Kafka's clients do.

A paused broker (SIGSTOP) accepts connections and answers nothing; it stays in Metadata's
broker list until the controller fences it. With the controller paused, every command must
still work through the live brokers (issue 40); with the partition's leader paused, a
produce must retry until the new leader takes it. Each test resumes what it paused, in a
finally, and waits for the cluster to be healthy again before the next.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from tidelog.cli import main
from tidelog.client_config import ClientConfigError
from tidelog.testing.live import LiveCluster, eventually, tidelog
from tidelog.tools.client_kafka import ClientError, ClientSettings, is_retriable
from tidelog.tools.client_properties import (
    ClientTiming,
    consumer_client_properties,
    producer_client_properties,
)
from tidelog.tools.client_records import ProduceOptions, producer_settings
from tidelog.tools.groups_cmd import error_of_text

LINES: tuple[str, ...] = tuple(str(n) for n in range(1, 9))
COMMAND_TIMEOUT_S = 60.0
HEALTHY_DEADLINE_S = 30.0


def client(cluster: LiveCluster, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """`tidelog ARGS --bootstrap-server ...` through click's CliRunner: (exit code, stdout,
    stderr)."""
    result = CliRunner().invoke(main, [*args, "--bootstrap-server", cluster.bootstrap], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def cluster_command(cluster: LiveCluster, *args: str) -> None:
    result = tidelog("cluster", *args, "--data-dir", str(cluster.directory))
    assert result.returncode == 0, result.stdout + result.stderr


def healthy(cluster: LiveCluster) -> bool:
    """`cluster status` exits 0: every node up, every partition led and in sync."""
    result = tidelog("cluster", "status", "--data-dir", str(cluster.directory))
    return result.returncode == 0


def controller_of(cluster: LiveCluster) -> int:
    """The metadata leader, as a node's /status says."""
    for node in cluster.nodes:
        status = cluster.node_status(node).get("status")
        if isinstance(status, dict) and status.get("metadata_leader") is not None:
            return int(status["metadata_leader"])
    raise AssertionError("no node knows the controller")


@contextmanager
def pausing(cluster: LiveCluster) -> Iterator[Callable[[int], None]]:
    """A `pause(node)` for the block; every node it paused is resumed on the way out, and
    the cluster is healthy again before the next test."""
    done: list[int] = []

    def pause(node: int) -> None:
        cluster_command(cluster, "pause", "--node", str(node))
        done.append(node)

    try:
        yield pause
    finally:
        for node in done:
            cluster_command(cluster, "resume", "--node", str(node))
        eventually(lambda: healthy(cluster), "the cluster healthy", deadline_s=HEALTHY_DEADLINE_S)


def new_topic(cluster: LiveCluster, name: str) -> None:
    code, _, stderr = client(cluster, "topics", "create", name, "--replication-factor", "3")
    assert code == 0, stderr
    cluster.wait_hosted_everywhere(name, 1)


def produced_once(cluster: LiveCluster, topic: str) -> None:
    """Every line of LINES in `topic`, once each, in order."""
    code, stdout, stderr = client(
        cluster, "consume", topic, "--from-beginning", "--timeout-ms", "3000"
    )
    assert code == 0, stderr
    assert stdout.splitlines() == list(LINES)


def test_produce_consume_and_admin_with_the_controller_paused(cluster: LiveCluster) -> None:
    new_topic(cluster, "orders")
    with pausing(cluster) as pause:
        pause(controller_of(cluster))
        code, _, stderr = client(
            cluster, "produce", "orders", "--acks", "all", stdin="\n".join(LINES) + "\n"
        )
        assert code == 0, stderr
        assert "8 records produced" in stderr
        produced_once(cluster, "orders")
        code, stdout, stderr = client(cluster, "topics", "describe", "orders")
        assert code == 0, stderr
        assert "Topic: orders\tPartitionCount: 1" in stdout
        code, _, stderr = client(cluster, "groups", "list")
        assert code == 0, stderr
        code, stdout, stderr = client(cluster, "get-offsets", "orders")
        assert code == 0, stderr
        assert stdout.startswith("orders:0:")


def test_produce_rides_over_a_paused_leader(cluster: LiveCluster) -> None:
    new_topic(cluster, "moving")
    with pausing(cluster) as pause:
        pause(cluster.leader_of("moving"))
        started = time.monotonic()
        code, _, stderr = client(
            cluster, "produce", "moving", "--acks", "all", stdin="\n".join(LINES) + "\n"
        )
        assert code == 0, stderr
        assert time.monotonic() - started < COMMAND_TIMEOUT_S
        produced_once(cluster, "moving")


def test_a_short_delivery_timeout_fails_clearly(cluster: LiveCluster) -> None:
    """Without a quorum nothing is acknowledged: the records expire at delivery.timeout.ms,
    named; with every node paused, no broker answers, named at once."""
    new_topic(cluster, "stuck")
    short = ["--producer-property", "delivery.timeout.ms=3000"]
    stdin = "\n".join(LINES) + "\n"
    first, second, third = cluster.nodes
    with pausing(cluster) as pause:
        pause(first)
        pause(second)
        started = time.monotonic()
        code, _, stderr = client(cluster, "produce", "stuck", *short, stdin=stdin)
        assert code == 1
        assert time.monotonic() - started < 20
        assert "delivery.timeout.ms=3000" in stderr, stderr
        assert "8 records failed" in stderr
        pause(third)
        started = time.monotonic()
        code, _, stderr = client(cluster, "produce", "stuck", *short, stdin=stdin)
        assert code == 1
        assert time.monotonic() - started < 10
        assert stderr.startswith("error: no broker at "), stderr
        assert len(stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["produce", "t", "--producer-property", "nosuch=1"], "nosuch: unknown property"),
        (["produce", "t", "--producer-property", "linger.ms=soon"], "linger.ms=soon"),
        (["produce", "t", "--producer-property", "acks"], "'acks' (want name=value)"),
        (["consume", "t", "--consumer-property", "linger.ms=1"], "linger.ms: unknown property"),
        (["consume", "t", "--consumer-property", "isolation.level=x"], "read_committed"),
    ],
)
def test_bad_properties_are_refused_by_name(args: list[str], named: str) -> None:
    result = CliRunner().invoke(main, [*args, "--bootstrap-server", "127.0.0.1:1"], input="x\n")
    assert result.exit_code == 2
    assert named in result.output


def test_properties_map_onto_kafka_python() -> None:
    given = producer_client_properties(
        ["acks=1", "linger.ms=5", "compression.type=none", "client.id=me", "batch.size=10"]
    )
    assert given.kafka_python == {
        "acks": 1,
        "linger_ms": 5,
        "compression_type": None,
        "client_id": "me",
        "batch_size": 10,
    }
    read = consumer_client_properties(
        ["isolation.level=read_committed", "default.api.timeout.ms=5000", "group.id=g"]
    )
    assert read.kafka_python == {"isolation_level": "read_committed", "group_id": "g"}
    timing = read.timing(ClientTiming(), "--consumer-property")
    assert (timing.default_api_timeout_ms, timing.request_timeout_ms) == (5000, 30_000)


def test_producer_settings_follow_kafka() -> None:
    settings = ClientSettings("h:9")
    plain = producer_settings(settings, ProduceOptions("t"))
    assert (plain["delivery_timeout_ms"], plain["request_timeout_ms"]) == (120_000, 30_000)
    assert (plain["max_block_ms"], plain["retry_backoff_ms"]) == (60_000, 100)
    assert plain["enable_idempotence"] is True
    short = producer_client_properties(["delivery.timeout.ms=3000", "linger.ms=100"])
    fitted = producer_settings(settings, ProduceOptions("t", properties=short))
    assert (fitted["delivery_timeout_ms"], fitted["request_timeout_ms"]) == (3000, 2900)
    one = producer_settings(
        settings, ProduceOptions("t", properties=producer_client_properties(["acks=1"]))
    )
    assert (one["acks"], one["enable_idempotence"]) == (1, False)


def test_command_config_sets_the_timing() -> None:
    settings = ClientSettings.of("h:9", {"request.timeout.ms": "5000", "retry.backoff.ms": "7"})
    assert (settings.timing.request_timeout_ms, settings.timing.retry_backoff_ms) == (5000, 7)
    assert settings.kafka_python["request_timeout_ms"] == 5000
    with pytest.raises(ClientConfigError, match=re.escape("default.api.timeout.ms=soon")):
        ClientSettings.of("h:9", {"default.api.timeout.ms": "soon"})


def test_status_json_names_a_controller(cluster: LiveCluster) -> None:
    """The helper above reads the controller from /status (guards the tests' premise)."""
    result = tidelog("cluster", "status", "--data-dir", str(cluster.directory), "--json")
    leaders = {
        node["status"]["metadata_leader"]
        for node in json.loads(result.stdout)["nodes"]
        if node.get("status")
    }
    assert leaders == {controller_of(cluster)}


def test_group_commands_ride_over_a_killed_coordinator(cluster: LiveCluster) -> None:
    """`groups describe` and `groups reset-offsets` right after the group's coordinator was
    killed: connection refused, then NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS until
    another node leads its `__consumer_offsets` partition; each is retried, as Kafka's
    AdminClient retries them, and the command answers."""
    new_topic(cluster, "billed")
    code, _, stderr = client(
        cluster, "produce", "billed", "--acks", "all", stdin="\n".join(LINES) + "\n"
    )
    assert code == 0, stderr
    code, _, stderr = client(
        cluster, "consume", "billed", "--group", "billing", "--from-beginning",
        "--timeout-ms", "3000",
    )  # fmt: skip
    assert code == 0, stderr
    code, stdout, stderr = client(cluster, "groups", "describe", "billing", "--state", "--json")
    assert code == 0, stderr
    coordinator = int(json.loads(stdout)["coordinator"])
    cluster_command(cluster, "kill", "--node", str(coordinator))
    try:
        code, stdout, stderr = client(cluster, "groups", "describe", "billing", "--json")
        assert code == 0, stderr
        offsets = json.loads(stdout)["offsets"]
        # Its lag may read 1 (the new leader's control batch) while the partition's own
        # leader moves too: a partition groups describe cannot read counts to its HWM.
        assert [(row["partition"], row["current_offset"]) for row in offsets] == [(0, 9)]
        code, stdout, stderr = client(
            cluster, "groups", "reset-offsets", "billing", "--topic", "billed",
            "--to-earliest", "--execute", "--json",
        )  # fmt: skip
        assert code == 0, stderr
        assert json.loads(stdout)["executed"] is True
    finally:
        cluster_command(cluster, "restart", "--node", str(coordinator))
        eventually(lambda: healthy(cluster), "the cluster healthy", deadline_s=HEALTHY_DEADLINE_S)


@pytest.mark.parametrize(
    ("text", "retriable"),
    [
        ("[Error 16] NotCoordinatorError: the coordinator moved", True),
        ("[Error 14] CoordinatorLoadInProgressError", True),
        ("[Error 30] GroupAuthorizationFailedError", False),
        ("something else", False),
    ],
)
def test_a_group_error_given_as_text_is_retried_as_kafka_would(text: str, retriable: bool) -> None:
    """kafka-python 3 hands a group's error to describe_groups' caller as its text; the
    error it names decides whether ask_admin asks again."""
    try:
        raise ClientError(f"group 'g': {text}") from error_of_text(text)
    except ClientError as error:
        assert is_retriable(error) is retriable
