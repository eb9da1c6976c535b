"""Leadership moves without a failover (server/leadership.py, the core's rule 10).

A new topic's partitions are each led by their preferred replica from their first election.
Under an idempotent acks=all load on three partitions: a node restarted with SIGTERM
(`tidelog cluster restart`) first hands every leadership it holds over (controlled
shutdown); afterwards it leads nothing, and a preferred-leader election (ElectLeaders, as
kafka-python's admin client sends it) gives every partition back to its first replica; a
second one is not needed (`tidelog leaders elect` says so); the leaders count those
handovers (`tidelog_leadership_transfers_total`). Then `tidelog cluster roll`
restarts all three nodes in turn. No record is lost or written twice, and no error reaches
the application. The longest stall of acknowledgements is printed (a figure, not a limit).
"""

from __future__ import annotations

import time
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.live import (
    DEADLINE_S,
    LiveCluster,
    ProducerLoad,
    create_topic,
    eventually,
    sample,
    scrape,
    tidelog,
)

TOPIC = "handover"
PARTITIONS = 3
RATE_PER_S = 300
RECORDS_MAX = 60_000
PREFERRED = 0  # ElectLeaders' election type
FIRST_TOPIC, FIRST_PARTITIONS = "first-leaders", 24


def leaders_and_preferred(
    bootstrap: str, topic: str = TOPIC
) -> tuple[dict[int, int], dict[int, int]]:
    """{partition: leader} and {partition: its first replica}, from fresh metadata."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        partitions = admin.describe_topics([topic])[0]["partitions"]
    finally:
        admin.close()
    leaders = {p["partition_index"]: p["leader_id"] for p in partitions}
    preferred = {p["partition_index"]: p["replica_nodes"][0] for p in partitions}
    return leaders, preferred


def read_back(bootstrap: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(values) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(record.value for record in records)
    consumer.close()
    return values


def election_codes(bootstrap: str) -> list[int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=40_000)
    try:
        answer = admin.elect_leaders(
            PREFERRED, {TOPIC: list(range(PARTITIONS))}, timeout_ms=30_000, raise_errors=False
        )
    finally:
        admin.close()
    return [
        partition.error_code
        for result in answer.replica_election_results
        for partition in result.partition_result
    ]


def test_restarts_hand_leadership_over_and_elections_give_it_back(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    load: ProducerLoad | None = None
    try:
        # A new partition is led by its preferred replica from the first: no other replica
        # wins its first election for the rebalance to undo minutes later.
        create_topic(cluster.bootstrap, FIRST_TOPIC, partitions=FIRST_PARTITIONS)
        cluster.wait_hosted_everywhere(FIRST_TOPIC, FIRST_PARTITIONS)
        leaders, preferred = leaders_and_preferred(cluster.bootstrap, FIRST_TOPIC)
        assert leaders == preferred
        create_topic(cluster.bootstrap, TOPIC, partitions=PARTITIONS)
        cluster.wait_hosted_everywhere(TOPIC, PARTITIONS)
        load = ProducerLoad(
            cluster.bootstrap,
            TOPIC,
            records=RECORDS_MAX,
            rate_per_s=RATE_PER_S,
            deadline_s=DEADLINE_S * 10,
            partition=None,
            **{"retry.backoff.ms": 20},
        )
        load.start()
        eventually(lambda: len(load.acked) >= 300, "the load is acknowledged")
        leaders, preferred = leaders_and_preferred(cluster.bootstrap)
        node = leaders[0]

        restarted = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path / "cluster"), "--node", str(node)
        )
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        log = cluster.log_of(node)
        assert "controlled shutdown: handing over" in log
        assert "controlled shutdown: still leading" not in log
        leaders, _ = leaders_and_preferred(cluster.bootstrap)
        assert node not in leaders.values(), leaders  # nothing came back by itself (yet)
        acked_before = len(load.acked)
        eventually(lambda: len(load.acked) > acked_before + 300, "the load goes on")
        cluster.wait_hosted_everywhere(TOPIC, PARTITIONS)  # the node is in sync again

        codes = election_codes(cluster.bootstrap)
        assert set(codes) <= {ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED}, codes
        assert ErrorCode.NONE in codes, codes  # partition 0 went back to its first replica
        # (The broker that answered knows at once; another may learn it a moment later.)
        eventually(lambda: leaders_and_preferred(cluster.bootstrap)[0] == preferred)
        # The election was carried out by handovers, which the leaders count.
        handovers = sum(
            sample(scrape(node["admin"]), "tidelog_leadership_transfers_total") or 0
            for node in cluster.record["nodes"]
        )
        assert handovers >= 1
        again = election_codes(cluster.bootstrap)
        assert set(again) == {ErrorCode.ELECTION_NOT_NEEDED}, again
        listed = tidelog("leaders", "elect", "--all", "--bootstrap-server", cluster.bootstrap)
        assert listed.returncode == 0, listed.stderr
        assert f"{TOPIC}-0, {TOPIC}-1, {TOPIC}-2\n" in listed.stdout  # already elected
        refused = tidelog("leaders", "elect", "--bootstrap-server", cluster.bootstrap)
        assert refused.returncode == 1 and "--topic" in refused.stderr

        stall_before_roll = load.longest_stall_s()
        rolled = tidelog("cluster", "roll", "--data-dir", str(tmp_path / "cluster"), timeout=300)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert rolled.stdout.count("restarted and in sync") == 3, rolled.stdout
        eventually(lambda: leaders_and_preferred(cluster.bootstrap)[0] == preferred)

        acked_before = len(load.acked)
        eventually(lambda: len(load.acked) > acked_before + 300, "the load goes on")
        load.stop()
        load.join(timeout=DEADLINE_S)
        assert not load.is_alive()
        assert load.failed == [], load.failed[:5]
        values = read_back(cluster.bootstrap, len(load.acked))
        assert len(values) == len(set(values)), "a record was written twice"
        assert set(values) >= set(load.acked), "an acknowledged record is missing"
        print(
            f"\n{len(load.acked)} records acknowledged, 0 errors; longest stall of "
            f"acknowledgements {stall_before_roll * 1000:.0f} ms through a restart and an "
            f"election, {load.longest_stall_s() * 1000:.0f} ms through everything "
            f"(a roll of 3 nodes: {rolled.stdout.strip().splitlines()})"
        )
    finally:
        if load is not None:
            load.stop()
        cluster.down()
