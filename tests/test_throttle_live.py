"""The replication throttle on four real broker processes (Kafka's broker configs
leader.replication.throttled.rate and follower.replication.throttled.rate): a partition
with a backlog moves onto a new replica without a throttle, and another one as large with
`tidelog partitions reassign --execute --throttle`; polled through /status, the throttled
copy's log end grows at about the throttle, far slower than the other's did; kafka-python's
admin client describes the rates on every broker the move involves; `--verify` clears them
once the move is done; bad values are refused with Kafka's errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tidelog.testing.live import LiveCluster, eventually, poll, running_cluster, tidelog

RATE = 200_000  # bytes a second
VALUE_BYTES = 1000
RECORDS = 2000  # a backlog of about 2 MB
RECORD_BYTES_MAX = VALUE_BYTES + 100  # a record and its share of its batch, at the most
BATCH_BYTES = 16 * 1024  # the producer's batches: one append to a follower, at the most
WINDOW_S = 3.0  # how long the throttled copy is watched
MOVE_DEADLINE_S = 40.0
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
NO_THROTTLE = str(2**63 - 1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("throttle") / "cluster", nodes=4) as live:
        yield live


def fill(cluster: LiveCluster, topic: str) -> tuple[int, int]:
    """`topic` on nodes 1, 2 and 3 with RECORDS records of VALUE_BYTES, in sync: its
    leader, and its log end."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [1, 2, 3]})])
    finally:
        admin.close()
    eventually(lambda: len(cluster.copies(topic)) == 3, f"{topic} on three nodes")
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", batch_size=BATCH_BYTES, linger_ms=5
    )
    for _ in range(RECORDS):
        producer.send(topic, b"v" * VALUE_BYTES, partition=0)
    producer.flush(timeout=60)
    producer.close()

    def in_sync() -> tuple[int, int] | None:
        rows = cluster.copies(topic)
        leaders = [node for node, row in rows.items() if row["role"] == "leader"]
        ends = {row["log_end_offset"] for row in rows.values()}
        if len(leaders) != 1 or len(ends) != 1 or ends.pop() < RECORDS:
            return None
        return leaders[0], rows[leaders[0]]["log_end_offset"]

    return poll(in_sync, f"{topic} written and in sync")


def reassign(cluster: LiveCluster, *args: str) -> tuple[int, str, str]:
    result = tidelog("partitions", "reassign", "--data-dir", str(cluster.directory), *args)
    return result.returncode, result.stdout, result.stderr


def plan_of(tmp_path: Path, topic: str, leader: int) -> Path:
    """Node 4 replaces a replica that does not lead."""
    target = [leader, next(n for n in (1, 2, 3) if n != leader), 4]
    plan = tmp_path / f"{topic}.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}
        )
    )
    return plan


def new_copy_end(cluster: LiveCluster, topic: str) -> int:
    return int(cluster.copies(topic).get(4, {}).get("log_end_offset", 0))


def watch(cluster: LiveCluster, topic: str) -> list[tuple[float, int]]:
    """The new copy's log end, polled for WINDOW_S: (seconds from now, log end) each time."""
    started = time.monotonic()
    samples: list[tuple[float, int]] = []

    def sampled() -> list[tuple[float, int]] | None:
        samples.append((time.monotonic() - started, new_copy_end(cluster, topic)))
        return samples if samples[-1][0] >= WINDOW_S else None

    return poll(sampled, f"{topic} watched", deadline_s=WINDOW_S + 10)


def broker_rates(admin: KafkaAdminClient) -> dict[int, dict[str, tuple[str, str]]]:
    """Each broker's two rates in force, with their sources (DescribeConfigs)."""
    resources = [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in (1, 2, 3, 4)]
    found = admin.describe_configs(resources, config_filter="all")["broker"]
    return {
        int(name): {key: (entry["value"], entry["config_source"]) for key, entry in rates.items()}
        for name, rates in found.items()
    }


def test_a_throttled_move_copies_at_about_the_rate_and_verify_lifts_it(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    leader, end = fill(cluster, "unthrottled")
    code, _, err = reassign(
        cluster,
        "--execute",
        "--reassignment-json-file",
        str(plan_of(tmp_path, "unthrottled", leader)),
    )
    assert code == 0, err
    started = time.monotonic()
    eventually(lambda: new_copy_end(cluster, "unthrottled") >= end, "the unthrottled copy")
    fast_bytes_per_s = end * VALUE_BYTES / (time.monotonic() - started)

    leader, end = fill(cluster, "throttled")
    plan = plan_of(tmp_path, "throttled", leader)
    code, out, err = reassign(
        cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", str(RATE)
    )
    assert code == 0, err
    assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
    assert "You must run --verify periodically" in out
    elapsed, copied = watch(cluster, "throttled")[-1]
    slow_bytes_per_s = copied * RECORD_BYTES_MAX / elapsed
    # At most twice the rate (a second's worth may be saved up before the move), plus one
    # append; far below what the same move took without the throttle; yet moving.
    assert copied * RECORD_BYTES_MAX <= 2 * RATE * elapsed + BATCH_BYTES, copied
    assert 0 < copied < end
    assert fast_bytes_per_s >= 4 * slow_bytes_per_s, (fast_bytes_per_s, slow_bytes_per_s)

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        throttled = (str(RATE), "DYNAMIC_BROKER_CONFIG")
        expected = {LEADER_RATE: throttled, FOLLOWER_RATE: throttled}
        assert broker_rates(admin) == dict.fromkeys((1, 2, 3, 4), expected)
        code, out, _ = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
        assert "Reassignment of partition throttled-0 is still in progress." in out
        assert "Clearing" not in out  # a move is left: the throttle stays

        def verified() -> str | None:
            _, out, _ = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
            return out if "Reassignment of partition throttled-0 is completed." in out else None

        out = poll(verified, "the throttled move completed", deadline_s=MOVE_DEADLINE_S)
        assert "Clearing broker-level throttles on brokers 1,2,3,4" in out
        unthrottled = (NO_THROTTLE, "DEFAULT_CONFIG")
        expected = {LEADER_RATE: unthrottled, FOLLOWER_RATE: unthrottled}
        assert broker_rates(admin) == dict.fromkeys((1, 2, 3, 4), expected)
    finally:
        admin.close()
    eventually(lambda: new_copy_end(cluster, "throttled") >= end, "the new copy holds it all")


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        (LEADER_RATE, "-1", "InvalidRequestError: Invalid value -1 for configuration"),
        (FOLLOWER_RATE, "fast", "Not a number of type LONG"),
        ("num.io.threads", "8", "Cannot update these configs dynamically"),
    ],
)
def test_bad_broker_configs_are_refused_with_kafkas_errors(
    cluster: LiveCluster, name: str, value: str, error: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.BROKER, "2", {name: value})
        answer = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
        assert error in answer["broker"]["2"]
        assert broker_rates(admin)[2][LEADER_RATE] == (NO_THROTTLE, "DEFAULT_CONFIG")
    finally:
        admin.close()
    via = ("--data-dir", str(cluster.directory))
    refused = tidelog("brokers", "alter-config", "--node", "2", "--set", f"{name}={value}", *via)
    assert refused.returncode == 1
    assert error.split(": ", 1)[-1] in refused.stderr


def test_tidelog_brokers_sets_shows_and_deletes_the_cluster_default(cluster: LiveCluster) -> None:
    via = ("--data-dir", str(cluster.directory))
    rate = f"{LEADER_RATE}=50000000"
    assert tidelog("brokers", "alter-config", "--default", "--set", rate, *via).returncode == 0
    shown = tidelog("brokers", "describe-configs", "--default", "--json", *via)
    assert json.loads(shown.stdout) == {
        LEADER_RATE: {"value": "50000000", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"}
    }
    one = tidelog("brokers", "describe-configs", "--node", "3", *via)
    assert f"  {LEADER_RATE}=50000000 (DYNAMIC_DEFAULT_BROKER_CONFIG)" in one.stdout
    assert f"  {FOLLOWER_RATE}={NO_THROTTLE} (DEFAULT_CONFIG)" in one.stdout
    both = tidelog("brokers", "alter-config", "--default", "--set", rate, "--delete", LEADER_RATE)
    assert (both.returncode, both.stderr.strip()) == (
        1,
        f"error: --set and --delete both name {LEADER_RATE}",
    )
    neither = tidelog("brokers", "describe-configs", *via)
    assert "error: name one broker with --node N" in neither.stderr
    deleted = tidelog("brokers", "alter-config", "--default", "--delete", LEADER_RATE, *via)
    assert deleted.stdout.strip() == "Completed updating default config for brokers in the cluster."
    shown = tidelog("brokers", "describe-configs", "--default", "--json", *via)
    assert json.loads(shown.stdout) == {}
