"""Cluster truth (server/truth.py): every broker answers Metadata the same.

The in-sync replicas come from the metadata log, reported by each partition's leader (as
Kafka's AlterPartition), so the three brokers name the same ones; a paused broker is
fenced by the controller after broker_session_timeout_ms, leaves every broker list and,
after replica_lag_time_max_ms, every ISR, and comes back when it is resumed. The metadata
image takes these commands as it takes any: validated when applied, a bad one changes
nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tidelog.address import parse_address
from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.server.metadata import MetadataImage, PartitionState
from tidelog.testing.live import LiveCluster, ask_once, create_topic, eventually, tidelog

TOPIC = "truth"
PARTITIONS = 3
FENCE_WAIT_S = 40.0  # session (9 s) + ISR lag (10 s) + commits, on a loaded machine


def command(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def image_with_topic() -> MetadataImage:
    image = MetadataImage()
    image.apply(0, command(type="create_topic", name="t", replicas=[[1, 2, 3], [2, 3, 1]]))
    return image


def state(**changes: Any) -> bytes:
    fields = {"type": "partition_state", "topic": "t", "partition": 0, "leader": 1}
    fields |= {"epoch": 4, "isr": [1, 2]} | changes
    return command(**fields)


def test_the_image_keeps_the_latest_reported_state() -> None:
    image = image_with_topic()
    image.apply(1, state())
    assert image.partitions[("t", 0)] == PartitionState(1, 4, (1, 2))
    image.apply(2, state(leader=2, epoch=5, isr=[3, 2, 2]))
    assert image.partitions[("t", 0)] == PartitionState(2, 5, (2, 3))
    image.apply(3, state(epoch=4, isr=[1]))  # a deposed leader's report, committed late
    assert image.partitions[("t", 0)] == PartitionState(2, 5, (2, 3))
    image.apply(4, command(type="fence_broker", node=3))
    assert image.fenced == {3}
    image.apply(5, command(type="unfence_broker", node=3))
    assert image.fenced == set()
    image.apply(6, command(type="delete_topic", name="t"))
    assert image.partitions == {}


@pytest.mark.parametrize(
    "bad",
    [
        state(topic="nope"),
        state(partition=2),
        state(partition=True),
        state(leader=4),
        state(leader=3, isr=[1, 2]),
        state(isr=[1, 9]),
        state(isr="1,2"),
        state(epoch=-1),
        state(epoch=True),
        command(type="fence_broker", node=-3),
        command(type="fence_broker", node="3"),
    ],
)
def test_a_bad_report_changes_nothing(bad: bytes) -> None:
    image = image_with_topic()
    image.apply(1, state())
    image.apply(2, bad)
    assert image.partitions == {("t", 0): PartitionState(1, 4, (1, 2))}
    assert image.fenced == set()
    assert image.applied_offset == 3


def metadata_of(address: str) -> tuple[set[int], dict[int, tuple[int, tuple[int, ...]]]]:
    """(broker ids, {partition: (leader, isr)}) as one broker answers Metadata."""
    request = _APIS[ApiKey.METADATA].request_class(
        version=1,
        topics=[_APIS[ApiKey.METADATA].request_class.MetadataRequestTopic(name=TOPIC)],
    )
    answer = ask_once(parse_address(address), request)
    brokers = {broker.node_id for broker in answer.brokers}
    partitions = {
        p.partition_index: (p.leader_id, tuple(sorted(p.isr_nodes)))
        for topic in answer.topics
        for p in topic.partitions
    }
    return brokers, partitions


def all_answer(addresses: list[str], brokers: set[int], isr: tuple[int, ...]) -> bool:
    """Every one of `addresses` lists exactly `brokers`, and the same leader and ISR
    `isr` for every partition."""
    answers = [metadata_of(address) for address in addresses]
    if any(listed != brokers for listed, _ in answers):
        return False
    if any(len(parts) != PARTITIONS for _, parts in answers):
        return False
    if any(parts != answers[0][1] for _, parts in answers):
        return False
    return all(part[1] == isr and part[0] in isr for part in answers[0][1].values())


def test_brokers_agree_and_a_paused_broker_is_fenced_then_back(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    directory = str(tmp_path / "cluster")
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=PARTITIONS)
        cluster.wait_hosted_everywhere(TOPIC, PARTITIONS)
        addresses = [node["kafka"] for node in cluster.record["nodes"]]
        eventually(
            lambda: all_answer(addresses, {1, 2, 3}, (1, 2, 3)),
            "every broker names the same three in-sync replicas",
        )
        paused = tidelog("cluster", "pause", "--data-dir", directory, "--node", "3")
        assert paused.returncode == 0, paused.stderr
        started = time.monotonic()
        try:
            eventually(
                lambda: all_answer(addresses[:2], {1, 2}, (1, 2)),
                "node 3 fenced: out of both brokers' lists and every ISR",
                deadline_s=FENCE_WAIT_S,
            )
            print(
                f"\nnode 3 out of Metadata and every ISR {time.monotonic() - started:.1f} s after"
            )
            assert "fencing node 3" in cluster.log_of(1) + cluster.log_of(2)
            # kafka-topics' filters see it; `cluster status` says it, and exits 1.
            via = ("--bootstrap-server", addresses[0])
            under = tidelog("topics", "describe", TOPIC, "--under-replicated-partitions", *via)
            assert under.returncode == 0 and under.stdout.count("Isr: 1,2") == PARTITIONS
            below = tidelog("topics", "describe", TOPIC, "--under-min-isr-partitions", *via)
            assert below.returncode == 0 and below.stdout == ""  # 2 in sync, 2 required
            # A new topic's replicas go to the brokers available: three are too many now.
            refused = tidelog(
                "topics", "create", "wide", "--replication-factor", "3", *via
            )  # fmt: skip
            assert refused.returncode == 1
            assert "Replication factor: 3 larger than available brokers: 2." in refused.stderr
            health = tidelog("cluster", "status", "--data-dir", directory)
            assert health.returncode == 1, health.stdout
            assert "node(s) not up: 3" in health.stdout and "fenced: 3" in health.stdout
        finally:
            resumed = tidelog("cluster", "resume", "--data-dir", directory, "--node", "3")
            assert resumed.returncode == 0, resumed.stderr
        eventually(
            lambda: all_answer(addresses, {1, 2, 3}, (1, 2, 3)),
            "node 3 back in every list and ISR",
            deadline_s=FENCE_WAIT_S,
        )
    finally:
        cluster.down()
