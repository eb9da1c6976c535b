"""Fetch: committed batches for consumers, read through each partition's runner, with a
long poll on the HWM.

Rules of this file:
- Reads go only to a leader (or, for Fetch v11+ with a rack id, to a follower) and return
  only committed batches, below what the replica may serve (`PartitionRunner.read`). A
  Fetch that names a replica (ReplicaId, or from v15 ReplicaState, >= 0) is refused:
  tidelog's followers replicate over the peer protocol, and no Fetch reads as a follower
  would, past the HWM.
- From v13 topics are named by id; an id no topic has is answered UNKNOWN_TOPIC_ID. From
  v16, NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH name the current leader and its
  address when this node knows them (KIP-951), as Kafka's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, NamedTuple

from tidelog.clock import monotonic_ms
from tidelog.core.replica import Role
from tidelog.errors import StorageError
from tidelog.protocol.kafka import (
    FETCH_NODE_ENDPOINTS_MIN,
    FETCH_TOPIC_ID_MIN,
    TOPIC_ID_ZERO,
    ApiKey,
    FetchedPartition,
    FetchedTopic,
    KafkaRequest,
    RawResponse,
    encode_fetch_response,
)
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.server.acl import CLUSTER_ACTION, READ, TOPIC
from tidelog.server.answers import body_of
from tidelog.server.authorize import allowed, cluster_allowed
from tidelog.server.disk_health import is_disk_error
from tidelog.server.leader_hints import known_leader, name_of, node_endpoints
from tidelog.server.logs import partition_fields
from tidelog.server.partition import PartitionRunner
from tidelog.server.view import BrokerView
from tidelog.types import Epoch, Offset

log = logging.getLogger("tidelog.kafka")

FETCH_WAIT_MS_MAX = 30_000
FETCH_MAX_BYTES = 55 * 1024 * 1024  # Kafka's broker fetch.max.bytes: one response at most
# The answer to a Fetch from a replica: tidelog counts none as a Kafka follower, and Kafka
# answers a replica that is not a follower of the partition NOT_LEADER_OR_FOLLOWER (a
# principal without CLUSTER_ACTION, TOPIC_AUTHORIZATION_FAILED).
NOT_A_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
LEADER_HINT_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


class FetchAsk(NamedTuple):
    """A topic of a Fetch request: its key in the response (its name, or from v13 its id),
    its name (None: no topic has that id), and the partitions asked."""

    key: str | uuid.UUID
    name: str | None
    partitions: list[Any]


class FetchPlan(NamedTuple):
    """What a Fetch asks, as read once before any wait."""

    asks: list[FetchAsk]
    budget_bytes: int  # the request's max_bytes, within FETCH_MAX_BYTES
    follower_reads: bool  # v11+ with a rack id: an in-sync follower may answer too
    refusal: ErrorCode | None  # every partition's answer to a Fetch from a replica
    leader_hints: bool  # v16+: NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH answers
    # name the current leader (KIP-951), as Kafka's do


async def fetch(broker: BrokerView, request: KafkaRequest) -> RawResponse:
    body = body_of(request)
    plan = FetchPlan(
        asks=fetch_asks(broker, request),
        budget_bytes=min(body.max_bytes, FETCH_MAX_BYTES),
        follower_reads=request.api_version >= 11 and bool(getattr(body, "rack_id", "")),
        refusal=replica_refusal(broker, body),
        leader_hints=request.response_version >= FETCH_NODE_ENDPOINTS_MIN,
    )
    deadline = time.monotonic() + min(max(body.max_wait_ms, 0), FETCH_WAIT_MS_MAX) / 1000
    while True:
        topics, size, waits = read_all(broker, plan)
        remaining = deadline - time.monotonic()
        if size >= max(body.min_bytes, 1) or remaining <= 0 or not waits:
            break
        await wait_any(waits, remaining)
    leaders = [part.current_leader for _, parts in topics for part in parts]
    # Encoded here, records as read from the segment files: never copied into the frame.
    return encode_fetch_response(request.response_version, topics, node_endpoints(broker, leaders))


def fetch_asks(broker: BrokerView, request: KafkaRequest) -> list[FetchAsk]:
    """The topics a Fetch asks for, each resolved once: from v13 they are named by id."""
    topics = body_of(request).topics
    if request.api_version < FETCH_TOPIC_ID_MIN:
        return [FetchAsk(topic.topic, topic.topic, topic.partitions) for topic in topics]
    asks = []
    for topic in topics:
        topic_id = topic.topic_id or TOPIC_ID_ZERO
        asks.append(FetchAsk(topic_id, name_of(broker, topic_id), topic.partitions))
    return asks


def replica_refusal(broker: BrokerView, body: Any) -> ErrorCode | None:
    """The error every partition of a Fetch gets when it names a replica (ReplicaId up to
    v14, ReplicaState from v15) rather than -1, a consumer; None for a consumer's."""
    state = getattr(body, "replica_state", None)
    replica = state.replica_id if state is not None else getattr(body, "replica_id", -1)
    if replica < 0:
        return None
    if not cluster_allowed(broker, CLUSTER_ACTION):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return NOT_A_FOLLOWER


HwmWait = tuple[PartitionRunner, Offset]
"""A partition a long-polling fetch waits on, and the HWM it saw there."""


def read_all(broker: BrokerView, plan: FetchPlan) -> tuple[list[FetchedTopic], int, list[HwmWait]]:
    """Each partition asked, read (or refused) in request order within the byte budget:
    the topics, the bytes of records read, and the partitions to wait on."""
    topics: list[FetchedTopic] = []
    size, waits = 0, []
    for ask in plan.asks:
        partitions = []
        for part in ask.partitions:
            hwm_wait = None
            if ask.name is None:
                data = refused_partition(part, ErrorCode.UNKNOWN_TOPIC_ID)
            elif plan.refusal is not None:
                data = refused_partition(part, plan.refusal)
            else:
                data, hwm_wait = read_partition(
                    broker,
                    ask.name,
                    part,
                    follower_reads=plan.follower_reads,
                    budget=plan.budget_bytes - size,
                )
            size += len(data.records)
            if hwm_wait is not None:
                waits.append(hwm_wait)
            if plan.leader_hints and ask.name and data.error_code in LEADER_HINT_ERRORS:
                data = data._replace(current_leader=known_leader(broker, ask.name, part.partition))
            partitions.append(data)
        topics.append((ask.key, partitions))
    return topics, size, waits


def refused_partition(part: Any, error: ErrorCode) -> FetchedPartition:
    """A partition answered with `error` alone, as Kafka's partitionResponse: no HWM, no
    log start, no records."""
    return FetchedPartition(part.partition, int(error), -1, -1, b"")


def read_partition(
    broker: BrokerView, topic: str, part: Any, *, follower_reads: bool, budget: int
) -> tuple[FetchedPartition, HwmWait | None]:
    def answer(
        error: ErrorCode, hwm: int = -1, start: int = -1, records: bytes | memoryview = b""
    ) -> FetchedPartition:
        return FetchedPartition(part.partition, int(error), hwm, start, records)

    if not allowed(broker, READ, TOPIC, topic):
        return answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED), None
    runner = broker.runner(topic, part.partition)
    if runner is None:
        known = topic in broker.image.topics
        return answer(
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ), None
    if runner.repairing:  # its log is being repaired
        return answer(ErrorCode.KAFKA_STORAGE_ERROR), None
    if runner.status().role is not Role.LEADER and not follower_reads:
        return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER), None
    leader_epoch = getattr(part, "current_leader_epoch", -1)
    offset = Offset(part.fetch_offset)
    try:
        bounds, records = runner.read(
            offset,
            current_leader_epoch=Epoch(leader_epoch) if leader_epoch >= 0 else None,
            max_bytes=max(1, min(part.partition_max_bytes, budget)),
            now_ms=monotonic_ms(),
        )
    except (StorageError, OSError) as error:
        # A batch that failed its CRC (never served; it is repaired), or a disk that fails
        # to read: this partition only.
        if isinstance(error, OSError) and not is_disk_error(error):
            raise
        log.error(
            "fetch %s-%d at %d: %s",
            topic,
            part.partition,
            offset,
            error,
            extra=partition_fields(topic, part.partition, runner.status().epoch),
        )
        if isinstance(error, StorageError):
            return answer(error_code_for(error)), None
        return answer(ErrorCode.KAFKA_STORAGE_ERROR), None
    if bounds.error is not None:
        return answer(error_code_for(bounds.error)), None
    wait = None if records else (runner, bounds.hwm)
    return answer(ErrorCode.NONE, int(bounds.hwm), int(bounds.log_start_offset), records), wait


async def wait_any(waits: list[HwmWait], timeout_s: float) -> None:
    timeout_s = min(timeout_s, FETCH_WAIT_MS_MAX / 1000)
    if len(waits) == 1:  # one partition (the usual): waited in this task, none of its own
        runner, hwm = waits[0]
        await runner.wait_for_hwm(hwm, timeout_s)
        return
    tasks = [asyncio.ensure_future(runner.wait_for_hwm(hwm, timeout_s)) for runner, hwm in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


FETCH_HANDLERS = {ApiKey.FETCH: fetch}
