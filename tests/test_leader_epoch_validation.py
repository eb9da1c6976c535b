"""OffsetForLeaderEpoch lets a client validate its position (KIP-320), as librdkafka does.

Epoch 1 of the partition ends at offset 11 (its control batch at 0, ten records), then a
restart makes a new leader whose epoch 2 holds ten more records. A consumer that seeks to
offset 5 read in epoch 1 is fine and reads on; one that seeks to offset 15 claiming it was
read in epoch 1 sits on a suffix that epoch 1 never had (a truncated one, as far as the
client can tell): librdkafka asks the leader where epoch 1 ends, learns 11 and reports the
truncation (with auto.offset.reset=error). The answer of the API itself is checked too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka import KafkaProducer

from tidelog.address import parse_address
from tidelog.protocol.kafka import _APIS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.live import DEADLINE_S, LiveCluster, ask_once, create_topic, tidelog

TOPIC = "epochs"


def first_message(consumer: Consumer) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            return message
    raise AssertionError("no message")


def epoch_end(address: str, leader_epoch: int, current: int) -> tuple[int, int, int]:
    """(error code, epoch, end offset) of OffsetForLeaderEpoch for partition 0."""
    cls = _APIS[ApiKey.OFFSET_FOR_LEADER_EPOCH].request_class
    topic = cls.OffsetForLeaderTopic
    request = cls(
        version=3,
        replica_id=-1,
        topics=[
            topic(
                topic=TOPIC,
                partitions=[
                    topic.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current, leader_epoch=leader_epoch
                    )
                ],
            )
        ],
    )
    answer = ask_once(parse_address(address), request).topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def test_a_position_on_a_suffix_its_epoch_never_had_is_detected(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        for i in range(10):
            producer.send(TOPIC, b"a%d" % i, partition=0).get(timeout=30)
        node = cluster.leader_of(TOPIC)
        restarted = tidelog(
            "cluster", "restart", "--data-dir", str(tmp_path / "cluster"), "--node", str(node)
        )
        assert restarted.returncode == 0, restarted.stderr
        cluster.wait_hosted_everywhere(TOPIC, 1)
        for i in range(10):
            producer.send(TOPIC, b"b%d" % i, partition=0).get(timeout=30)
        producer.close()

        leader = cluster.record["nodes"][cluster.leader_of(TOPIC) - 1]["kafka"]
        follower = cluster.record["nodes"][cluster.leader_of(TOPIC) % 3]["kafka"]
        assert epoch_end(leader, 1, -1) == (ErrorCode.NONE, 1, 11)
        assert epoch_end(leader, 2, 2) == (ErrorCode.NONE, 2, 22)  # the HWM
        assert epoch_end(leader, 7, -1) == (ErrorCode.NONE, 2, 22)
        assert epoch_end(leader, 0, -1) == (ErrorCode.NONE, -1, -1)  # older than the log
        assert epoch_end(leader, 1, 1)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert epoch_end(leader, 1, 3)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert epoch_end(follower, 1, -1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "validating",
                "auto.offset.reset": "error",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            assert first_message(consumer).offset() == 1
            consumer.seek(TopicPartition(TOPIC, 0, 5, leader_epoch=1))
            message = first_message(consumer)
            assert message.error() is None and message.offset() == 5  # epoch 1 had it
            consumer.seek(TopicPartition(TOPIC, 0, 15, leader_epoch=1))
            error = first_message(consumer).error()
            assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
            assert "truncation detected at offset 15" in error.str(), error.str()
            assert "broker end offset is 11" in error.str(), error.str()
        finally:
            consumer.close()
    finally:
        cluster.down()
