"""Produce: each partition's batch validated at the door, appended by its partition's runner,
answered as the core completes it.

Rules of this file:
- Produce is answered once the core completes it: acks=all when the HWM passes the batch,
  acks=1 when the leader's copy is durable. acks=0 gets no response at all. Each
  partition's batch is validated as Kafka validates it (tidelog.protocol.validate) before
  it reaches the core: a refused batch is answered with Kafka's error and its reason, and
  nothing of it is appended.
- From v13 topics are named by id; an id no topic has is answered UNKNOWN_TOPIC_ID. From
  v10, NOT_LEADER_OR_FOLLOWER names the current leader and its address when this node
  knows them (KIP-951), as Kafka's.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, NamedTuple

from tidelog.core.producers import last_sequence_of
from tidelog.core.replica import ACKS_ALL, Role
from tidelog.errors import InvalidBatch, NotLeader
from tidelog.protocol.kafka import (
    PRODUCE_LEADER_HINT_MIN,
    ApiKey,
    KafkaRequest,
    LeaderAndEpoch,
    ProducedPartition,
    encode_produce_response,
    iter_produce_partitions,
)
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.protocol.validate import BatchRules, refuse_request, validate_batch
from tidelog.records import read_header
from tidelog.server.acl import TOPIC, WRITE
from tidelog.server.answers import body_of
from tidelog.server.authorize import allowed
from tidelog.server.leader_hints import known_leader, name_of, node_endpoints
from tidelog.server.logs import partition_fields
from tidelog.server.metadata import INTERNAL_TOPICS
from tidelog.server.metrics import timed
from tidelog.server.view import BrokerView

log = logging.getLogger("tidelog.kafka")

PRODUCE_TIMEOUT_MS_MAX = 120_000
LOGGED_MESSAGE_MAX = 300  # characters of a refusal's message in a log line


class PartitionAnswer(NamedTuple):
    """One partition's part of a Produce response."""

    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    leader: LeaderAndEpoch | None = None  # on NOT_LEADER_OR_FOLLOWER, from v10 (KIP-951)


async def produce(broker: BrokerView, request: KafkaRequest) -> Any:
    """Validate each partition's batch (tidelog.protocol.validate), then append it; every
    partition of the request is submitted before any is awaited, in request order. From
    v13 topics are named by id: an id no topic has is answered UNKNOWN_TOPIC_ID."""
    body = body_of(request)
    timeout_s = min(max(body.timeout_ms, 0), PRODUCE_TIMEOUT_MS_MAX) / 1000
    parts = list(iter_produce_partitions(body))
    names = {part.topic: name_of(broker, part.topic) for part in parts}
    refusal = refuse_request(
        acks=body.acks,
        transactional_id=body.transactional_id,
        records=(part.records for part in parts),
    )
    if refusal is not None:
        log.info("produce refused: %s", str(refusal)[:LOGGED_MESSAGE_MAX])
        answers = [refused(refusal, -1)] * len(parts)
    else:
        appends = [
            produce_partition(
                broker,
                names[part.topic],
                part.partition,
                records=part.records,
                acks=body.acks,
                timeout_s=timeout_s,
                api_version=request.api_version,
            )
            for part in parts
        ]
        # One partition (the usual) is awaited in this task: gather would add one.
        answers = [await appends[0]] if len(appends) == 1 else await asyncio.gather(*appends)
    if request.api_version >= PRODUCE_LEADER_HINT_MIN:
        answers = [
            with_leader(broker, names[part.topic], part.partition, answer)
            for part, answer in zip(parts, answers, strict=True)
        ]
    by_topic: dict[str | uuid.UUID, list[ProducedPartition]] = {}
    for part, answer in zip(parts, answers, strict=True):
        by_topic.setdefault(part.topic, []).append(produced(part.partition, answer))
    endpoints = node_endpoints(broker, [answer.leader for answer in answers])
    return encode_produce_response(request.api_version, list(by_topic.items()), endpoints)


def with_leader(
    broker: BrokerView, topic: str | None, partition: int, answer: PartitionAnswer
) -> PartitionAnswer:
    """`answer` naming the partition's leader when it says NOT_LEADER_OR_FOLLOWER and the
    leader is known (Kafka's KIP-951: the producer goes straight to it)."""
    if topic is None or answer.error is not ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return answer
    return answer._replace(leader=known_leader(broker, topic, partition))


def produced(index: int, answer: PartitionAnswer) -> ProducedPartition:
    return ProducedPartition(
        partition_index=index,
        error_code=int(answer.error),
        base_offset=answer.base_offset,
        log_start_offset=answer.log_start_offset,
        record_errors=answer.record_errors,
        error_message=answer.message,
        current_leader=answer.leader,
    )


def refused(refusal: InvalidBatch, log_start_offset: int) -> PartitionAnswer:
    return PartitionAnswer(
        ErrorCode[refusal.code],
        log_start_offset=log_start_offset,
        message=str(refusal),
        record_errors=refusal.record_errors,
    )


async def produce_partition(
    broker: BrokerView,
    topic: str | None,
    partition: int,
    *,
    records: bytes | None,
    acks: int,
    timeout_s: float,
    api_version: int,
) -> PartitionAnswer:
    """One partition of a Produce (of the topic `topic`, None for an unknown topic id): its
    batch is validated, then appended, and answered as the core completes it."""
    if topic is None:
        return PartitionAnswer(ErrorCode.UNKNOWN_TOPIC_ID)
    if topic in INTERNAL_TOPICS:  # only the coordinator and the controller write these
        return PartitionAnswer(ErrorCode.INVALID_TOPIC_EXCEPTION)
    if not allowed(broker, WRITE, TOPIC, topic):
        return PartitionAnswer(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    runner = broker.runner(topic, partition)
    info = broker.image.topics.get(topic)
    if runner is None or info is None:
        known = info is not None
        return PartitionAnswer(
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    status = runner.status()
    start = int(status.log_start_offset)
    if status.role is not Role.LEADER:
        return PartitionAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, log_start_offset=start)
    rules = BatchRules(api_version, info.config.max_message_bytes, f"{topic}-{partition}")
    try:
        batch = validate_batch(records, rules)
    except InvalidBatch as refusal:
        log.info(
            "produce to %s-%d refused: %s",
            topic,
            partition,
            str(refusal)[:LOGGED_MESSAGE_MAX],
            extra=partition_fields(topic, partition, status.epoch),
        )
        return refused(refusal, start)
    took = timed()
    try:  # the runner answers REQUEST_TIMED_OUT at the deadline (no timer of our own)
        result = await runner.produce(batch, ACKS_ALL if acks == -1 else acks, timeout_s or None)
    except asyncio.CancelledError:
        return PartitionAnswer(error_code_for(NotLeader(None)), log_start_offset=start)
    if result.error is not None:
        return PartitionAnswer(error_code_for(result.error), log_start_offset=start)
    base = -1 if result.base_offset is None else int(result.base_offset)
    if result.retried:
        log_retry(topic, partition, batch, base)
    elif acks == -1:
        broker.metrics.committed(took())
    return PartitionAnswer(ErrorCode.NONE, base, start)


def log_retry(topic: str, partition: int, batch: bytes, base: int) -> None:
    """Say that a batch was answered as a retry of one the log holds (tidelog.core.producers),
    as Kafka does: with the offsets of that batch, whatever the records it carries now. A
    client that gives the sequence numbers of a send it reported failed to its next records
    gets those records acknowledged, and never written; this line is what tells it apart
    from a lost record (tests/test_compat_node.py reads it)."""
    header = read_header(batch)
    log.info(
        "produce to %s-%d: producer %d epoch %d sequences %d..%d are at offset %d already: "
        "answered as a retry, not appended",
        topic, partition, header.producer_id, header.producer_epoch, header.base_sequence,
        last_sequence_of(header), base, extra=partition_fields(topic, partition),
    )  # fmt: skip


PRODUCE_HANDLERS = {ApiKey.PRODUCE: produce}
