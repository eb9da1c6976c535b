"""OffsetForLeaderEpoch (v2-4): where an epoch ends in a partition's log, as its leader
holds it (KIP-320). A consumer asks after a leader change, or when it seeks to a position
with the epoch it was read in, to learn whether what it read was truncated since; if the
epoch ends before its position, it moves back to that end.

Rules of this file:
- Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere). The current leader epoch the
  client names is checked as a fetch checks it: older is FENCED_LEADER_EPOCH, newer
  UNKNOWN_LEADER_EPOCH.
- The end offset is never past what clients may read (the HWM); an epoch older than the
  log's first answers -1, -1 (Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET).
- DESCRIBE on the topic when the authorizer is on.
"""

from __future__ import annotations

from typing import Any

from tidelog.clock import monotonic_ms
from tidelog.core.replica import Role
from tidelog.errors import TidelogError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.server.acl import DESCRIBE, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed
from tidelog.server.view import BrokerView
from tidelog.types import Epoch


async def offset_for_leader_epoch(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.OffsetForLeaderTopicResult
    topics = [
        cls(
            topic=topic.topic,
            partitions=[end_of(broker, cls, str(topic.topic), asked) for asked in topic.partitions],
        )
        for topic in body_of(request).topics
    ]
    return response(request, throttle_time_ms=0, topics=topics)


def end_of(broker: BrokerView, cls: Any, topic: str, asked: Any) -> Any:
    def answer(code: ErrorCode, epoch: int = -1, end: int = -1) -> Any:
        return cls.EpochEndOffset(
            error_code=int(code), partition=asked.partition, leader_epoch=epoch, end_offset=end
        )

    if not allowed(broker, DESCRIBE, TOPIC, topic):
        return answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    runner = broker.runner(topic, asked.partition)
    status = None if runner is None else runner.status()
    if runner is None or status is None or status.role is not Role.LEADER:
        known = topic in broker.image.topics
        return answer(
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    current = getattr(asked, "current_leader_epoch", -1)
    if current > status.epoch:
        return answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
    try:
        epoch, end = runner.end_offset_for_epoch(
            Epoch(asked.leader_epoch),
            current_leader_epoch=None if current < 0 else Epoch(current),
            now_ms=monotonic_ms(),
        )
    except TidelogError as error:
        return answer(error_code_for(error))
    return answer(ErrorCode.NONE, int(epoch), int(end))


EPOCHS_HANDLERS = {ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch}
