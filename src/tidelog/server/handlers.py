"""The Kafka APIs tidelog answers, each a coroutine from a decoded request to a response.

Rules of this file:
- Reads go only to a leader (or, for Fetch v11+ with a rack id, to a follower) and return
  only committed batches: what `Replica.fetch` returns. A Fetch that names a replica
  (ReplicaId, or from v15 ReplicaState, >= 0) is refused: tidelog's followers replicate
  over the peer protocol, and no Fetch reads as a follower would, past the HWM.
- From v13 (Produce and Fetch) topics are named by id; an id no topic has is
  answered UNKNOWN_TOPIC_ID. NOT_LEADER_OR_FOLLOWER answers name the current leader and
  its address when this node knows them (KIP-951): Produce from v10, Fetch from v16 (with
  FENCED_LEADER_EPOCH too), as Kafka's.
- Produce is answered once the core completes it: acks=all when the HWM passes the batch,
  acks=1 when the leader's copy is durable. acks=0 gets no response at all. Each
  partition's batch is validated as Kafka validates it (tidelog.protocol.validate) before
  it reaches the core: a refused batch is answered with Kafka's error and its reason, and
  nothing of it is appended.
- Topic changes go through the metadata log and are answered once applied on this node;
  only the metadata leader (the "controller") takes them.
- Auto-creation is Kafka's auto.create.topics.enable, off by default: with it on, a Metadata
  request that allows it (allow_auto_topic_creation, v4+; always before) and names an
  unknown topic creates it as CreateTopics would with the broker's defaults, and answers
  LEADER_NOT_AVAILABLE for it, so the client asks again until its partitions have leaders.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, NamedTuple

from tidelog.clock import monotonic_ms
from tidelog.core.producers import last_sequence_of
from tidelog.core.replica import ACKS_ALL, ReplicaStatus, Role
from tidelog.errors import (
    InvalidBatch,
    MetadataError,
    NotLeader,
    OffsetOutOfRange,
    RetriableError,
    StorageError,
    TidelogError,
)
from tidelog.protocol.framing import ProtocolError
from tidelog.protocol.kafka import (
    FETCH_NODE_ENDPOINTS_MIN,
    FETCH_TOPIC_ID_MIN,
    PRODUCE_LEADER_HINT_MIN,
    TOPIC_ID_ZERO,
    ApiKey,
    FetchedPartition,
    FetchedTopic,
    KafkaRequest,
    LeaderAndEpoch,
    NodeEndpoint,
    ProducedPartition,
    RawResponse,
    api_versions_response,
    encode_fetch_response,
    encode_produce_response,
    iter_produce_partitions,
    join_batches,
)
from tidelog.protocol.kafka_errors import ErrorCode, error_code_for
from tidelog.protocol.peer import PartitionKey
from tidelog.protocol.validate import BatchRules, refuse_request, validate_batch
from tidelog.records import read_header
from tidelog.server.acl import (
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    WRITE,
)
from tidelog.server.acl_api import ACL_HANDLERS
from tidelog.server.answers import body_of, host_of, response
from tidelog.server.authorize import allowed, authorized_operations, cluster_allowed
from tidelog.server.cluster_api import CLUSTER_HANDLERS
from tidelog.server.configs_api import CONFIGS_HANDLERS, config_entries
from tidelog.server.epochs_api import EPOCHS_HANDLERS
from tidelog.server.group_api import GROUP_HANDLERS
from tidelog.server.leadership import LEADERSHIP_HANDLERS
from tidelog.server.logs import partition_fields
from tidelog.server.metadata import (
    INTERNAL_TOPICS,
    METADATA_TOPIC,
    TopicInfo,
    place_replicas,
    quoted,
    validate_topic,
)
from tidelog.server.metrics import timed
from tidelog.server.partition import PartitionRunner, is_disk_error
from tidelog.server.sasl import SASL_HANDLERS
from tidelog.server.topics_api import TOPICS_HANDLERS
from tidelog.server.view import BrokerView
from tidelog.types import Epoch, NodeId, Offset

log = logging.getLogger("tidelog.kafka")

Handler = Callable[[BrokerView, KafkaRequest], Awaitable[Any]]
FETCH_WAIT_MS_MAX = 30_000
FETCH_MAX_BYTES = 55 * 1024 * 1024  # Kafka's broker fetch.max.bytes: one response at most
PRODUCE_TIMEOUT_MS_MAX = 120_000
# A leader that cannot answer ListOffsets yet (its new epoch's HWM, a read lease being
# renewed on a loaded machine) is waited for up to this long, polled every step, as a fetch
# long-polls, rather than answered with an error some clients do not retry.
SERVING_WAIT_S = 2.0
SERVING_POLL_S = 0.02
LOGGED_MESSAGE_MAX = 300  # characters of a refusal's message in a log line
_producer_ids = itertools.count(1)


async def handle(broker: BrokerView, request: KafkaRequest) -> Any:
    if request.api_key == ApiKey.API_VERSIONS:
        return api_versions_response(request.api_version, served=HANDLERS.keys())
    handler = HANDLERS.get(request.api_key)
    if handler is None:  # not advertised: a client that sends it anyway is misbehaving
        raise ProtocolError(f"{request.api_key.name} is not served by this broker")
    return await handler(broker, request)


# ---------------------------------------------------------------------- Metadata -------
async def metadata(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class
    body = body_of(request)
    fenced = broker.image.fenced
    brokers = [
        cls.MetadataResponseBroker(
            node_id=int(node), host=host_of(broker, node), port=port, rack=None
        )
        for node, port in sorted(broker.kafka_ports.items())
        if node not in fenced
    ]
    with_operations = bool(getattr(body, "include_topic_authorized_operations", False))
    asked = body.topics
    if asked is None:  # every topic this principal may describe
        names = [
            name for name in sorted(broker.image.topics) if allowed(broker, DESCRIBE, TOPIC, name)
        ]
        topics = [
            topic_metadata(broker, cls, name, with_operations)
            for name in names
            if name != METADATA_TOPIC
        ]
    else:
        allow = bool(getattr(body, "allow_auto_topic_creation", True))
        topics = [
            await auto_created(broker, cls, topic, allow)
            or asked_topic(broker, cls, topic, with_operations)
            for topic in asked
        ]
    controller = broker.controller_id()
    # Never name a node the broker list lacks: clients would fail on the unknown id.
    controller = controller if reachable(broker, controller) else -1
    cluster_operations = None  # not asked for: Kafka sends INT32_MIN
    if getattr(body, "include_cluster_authorized_operations", False):
        cluster_operations = authorized_operations(broker, CLUSTER, CLUSTER_NAME)
    return response(
        request,
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.config.cluster_id,
        controller_id=controller,
        topics=topics,
        authorized_operations=cluster_operations,
        error_code=0,
    )


class AutoCreatedTopic(NamedTuple):
    """A topic as auto-creation asks `create_topic` for it: the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[Any, ...] = ()


async def auto_created(broker: BrokerView, cls: Any, topic: Any, allow: bool) -> Any | None:
    """The answer for an unknown topic this request creates (this module's rules): the
    creation's error, or LEADER_NOT_AVAILABLE once it is created; None when the topic is
    not one to create (known, internal, not named, or creation not asked for or off)."""
    name = topic.name
    if not (allow and broker.config.auto_create_topics_enable):
        return None
    if not isinstance(name, str) or not name or name in broker.image.topics:
        return None
    if name in INTERNAL_TOPICS or name == METADATA_TOPIC:
        return None
    if not allowed(broker, DESCRIBE, TOPIC, name):  # answered as any undescribable topic
        return None
    code, message, _ = await create_topic(broker, AutoCreatedTopic(name), validate_only=False)
    if code is ErrorCode.NONE:
        log.info("auto-created topic %s for a Metadata request", name)
    if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        code = ErrorCode.LEADER_NOT_AVAILABLE
    else:
        log.info("did not auto-create topic %s: %s", name, message or code.name)
    return cls.MetadataResponseTopic(
        error_code=int(code), name=name, is_internal=False, partitions=[]
    )


def asked_topic(broker: BrokerView, cls: Any, topic: Any, with_operations: bool) -> Any:
    """The answer for one topic of a Metadata request: named, or (v10+) named by its id
    alone (UNKNOWN_TOPIC_ID when no topic has it, as Kafka answers)."""
    name = topic.name
    topic_id = getattr(topic, "topic_id", None)
    # kafka-python decodes the zero id as None: a topic named by its id alone has a null
    # (v12+) or empty name and an id.
    if name is None or (not name and topic_id is not None):
        name = broker.image.topic_named(topic_id) if topic_id is not None else None
        if name is None or not allowed(broker, DESCRIBE, TOPIC, name):
            return cls.MetadataResponseTopic(
                error_code=int(ErrorCode.UNKNOWN_TOPIC_ID),
                name=None,
                topic_id=topic_id,
                is_internal=False,
                partitions=[],
            )
    if name == METADATA_TOPIC:
        return cls.MetadataResponseTopic(
            error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            name=name,
            is_internal=False,
            partitions=[],
        )
    return topic_metadata(broker, cls, name, with_operations)


def topic_metadata(broker: BrokerView, cls: Any, name: str, with_operations: bool = False) -> Any:
    topic_cls = cls.MetadataResponseTopic
    info = broker.image.topics.get(name)
    if not allowed(broker, DESCRIBE, TOPIC, name):
        return topic_cls(
            error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            name=name,
            is_internal=False,
            partitions=[],
        )
    if info is None:
        return topic_cls(
            error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            name=name,
            is_internal=False,
            partitions=[],
        )
    partitions = []
    fenced = broker.image.fenced
    for index, replicas in enumerate(info.replicas):
        key = PartitionKey(name, index)
        reported = broker.image.partitions.get((name, index))
        leader, epoch = latest_leader(broker, name, index)
        if not reachable(broker, leader):
            leader = -1  # not listed (its address has not reached us yet, or fenced): retry
        error = ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        record = broker.image.records.get((name, index))
        if record is not None:  # ISR mode: the committed ISR
            isr = [int(node) for node in record.isr]
        elif reported is not None:
            isr = list(reported.isr)
        else:
            isr = in_sync_nodes(broker, key, replicas)
        partitions.append(
            topic_cls.MetadataResponsePartition(
                error_code=int(error),
                partition_index=index,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=list(replicas),
                isr_nodes=isr,
                offline_replicas=[node for node in replicas if node in fenced],
            )
        )
    return topic_cls(
        error_code=0,
        name=name,
        topic_id=info.topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        authorized_operations=(
            authorized_operations(broker, TOPIC, name) if with_operations else None
        ),
    )


def in_sync_nodes(broker: BrokerView, key: PartitionKey, replicas: tuple[int, ...]) -> list[int]:
    """The leader and the followers that acked within an election timeout and are not
    repairing (`Replica.in_sync_replicas`); every replica where this node does not lead."""
    runner = broker.runners.get(key)
    if runner is None:
        return list(replicas)
    return in_sync_of(runner.replica.status(), replicas)


def in_sync_of(state: ReplicaStatus, replicas: tuple[int, ...]) -> list[int]:
    """`in_sync_nodes` from one status value the caller has read already: a leader's
    in-sync replicas, else every replica."""
    if state.role is not Role.LEADER:
        return list(replicas)
    return [int(node) for node in state.in_sync_replicas]


# ---------------------------------------------------------------------- Produce --------
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


def name_of(broker: BrokerView, key: str | uuid.UUID) -> str | None:
    """The topic a request names: by name, or (Fetch v13+, Produce v13) by id; None when
    no topic has that id (KIP-516: UNKNOWN_TOPIC_ID)."""
    return key if isinstance(key, str) else broker.image.topic_named(key)


def latest_leader(broker: BrokerView, topic: str, partition: int) -> LeaderAndEpoch:
    """The partition's leader (or -1) and epoch as this node knows them: its replica's, or
    a later epoch the metadata log reported. This node is named only while its replica
    leads: a report naming it is out of date once it stepped down (cut away from the
    others, its last report is still the latest it holds) or before it has taken over."""
    own, epoch = broker.leader_of(PartitionKey(topic, partition))
    leader = own
    reported = broker.image.partitions.get((topic, partition))
    if reported is not None and reported.epoch > epoch:
        leader, epoch = reported.leader, reported.epoch
    record = broker.image.records.get((topic, partition))  # ISR mode: the controller's
    if record is not None and record.leader_epoch > epoch:
        leader, epoch = int(record.leader), int(record.leader_epoch)
    if leader == broker.node_id and own != leader:
        leader = -1
    return LeaderAndEpoch(leader, epoch)


def reachable(broker: BrokerView, node: int) -> bool:
    """Whether clients can reach `node`: listed in Metadata (its address known here, not
    fenced)."""
    return node in broker.kafka_ports and node not in broker.image.fenced


def known_leader(broker: BrokerView, topic: str, partition: int) -> LeaderAndEpoch | None:
    """The partition's latest leader and epoch when clients can reach that leader. Kafka's
    getCurrentLeader."""
    latest = latest_leader(broker, topic, partition)
    return latest if reachable(broker, latest.leader_id) else None


def node_endpoints(
    broker: BrokerView, leaders: Iterable[LeaderAndEpoch | None]
) -> list[NodeEndpoint]:
    """The addresses of `leaders` on this request's listener, each node once (KIP-951's
    NodeEndpoints, by node id)."""
    nodes = sorted({leader.leader_id for leader in leaders if leader is not None})
    ports = broker.kafka_ports
    return [NodeEndpoint(node, host_of(broker, node), ports[NodeId(node)]) for node in nodes]


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
    status = runner.replica.status()
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


# ---------------------------------------------------------------------- Fetch ----------
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
    if runner.busy:  # its log is being repaired
        return answer(ErrorCode.KAFKA_STORAGE_ERROR), None
    replica = runner.replica
    if replica.status().role is not Role.LEADER and not follower_reads:
        return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER), None
    leader_epoch = getattr(part, "current_leader_epoch", -1)
    offset = Offset(part.fetch_offset)
    bounds = replica.fetch_bounds(
        offset,
        current_leader_epoch=Epoch(leader_epoch) if leader_epoch >= 0 else None,
        now_ms=monotonic_ms(),
    )
    if bounds.error is not None:
        return answer(error_code_for(bounds.error)), None
    try:
        records = read_records(
            runner, offset, bounds.hwm, max(1, min(part.partition_max_bytes, budget))
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
            extra=partition_fields(topic, part.partition, replica.status().epoch),
        )
        if isinstance(error, StorageError):
            return answer(error_code_for(error)), None
        return answer(ErrorCode.KAFKA_STORAGE_ERROR), None
    wait = None if records else (runner, bounds.hwm)
    return answer(ErrorCode.NONE, int(bounds.hwm), int(bounds.log_start_offset), records), wait


def read_records(
    runner: PartitionRunner, offset: Offset, end: Offset, max_bytes: int
) -> bytes | memoryview:
    """Committed batches from `offset` to `end`: straight from the segment file when they
    are written there (always, below a leader's HWM), else through the replica's log."""
    if offset >= end:
        return b""
    if end <= runner.storage.log_end_offset:
        try:
            return runner.storage.read_range(offset, end_offset=end, max_bytes=max_bytes)
        except OffsetOutOfRange:
            pass  # retention moved the log start since the bounds were taken: ask the core
    result = runner.replica.fetch(offset, max_bytes=max_bytes)
    return join_batches(result.batches)


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


# ---------------------------------------------------------------------- ListOffsets ----
LATEST, EARLIEST = -1, -2
# KIP-734, KIP-405/KIP-1005, KIP-1023: the special timestamps of later versions, each with
# the first version that may send it (an older request that sends one gets
# UNSUPPORTED_VERSION for that partition, as Kafka answers).
MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -3, -4, -5, -6
SPECIAL_SINCE: Final = {
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}


async def list_offsets(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.ListOffsetsTopicResponse
    topics = []
    for topic in body_of(request).topics:
        partitions = await asyncio.gather(
            *(
                list_partition(
                    broker,
                    cls,
                    topic.name,
                    part.partition_index,
                    part.timestamp,
                    version=request.api_version,
                )
                for part in topic.partitions
            )
        )
        topics.append(cls(name=topic.name, partitions=partitions))
    return response(request, throttle_time_ms=0, topics=topics)


async def list_partition(
    broker: BrokerView,
    cls: Any,
    topic: str,
    partition: int,
    timestamp: int,
    *,
    version: int,
) -> Any:
    def answer(error: ErrorCode, offset: int = -1, found_timestamp: int = -1) -> Any:
        return cls.ListOffsetsPartitionResponse(
            partition_index=partition,
            error_code=int(error),
            old_style_offsets=[],
            timestamp=found_timestamp,
            offset=offset,
            leader_epoch=epoch,
        )

    epoch = -1
    if not allowed(broker, DESCRIBE, TOPIC, topic):
        return answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if version < SPECIAL_SINCE.get(timestamp, 0):
        return answer(ErrorCode.UNSUPPORTED_VERSION)
    runner = broker.runner(topic, partition)
    if runner is None or runner.replica.status().role is not Role.LEADER:
        known = topic in broker.image.topics
        return answer(
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    if runner.busy:  # its log is being repaired
        return answer(ErrorCode.KAFKA_STORAGE_ERROR)
    replica = runner.replica
    deadline = time.monotonic() + SERVING_WAIT_S
    while True:
        epoch = int(replica.status().epoch)
        try:
            latest = replica.latest_offset(now_ms=monotonic_ms())
            break
        except RetriableError as error:
            if time.monotonic() >= deadline or replica.status().role is not Role.LEADER:
                return answer(error_code_for(error))
        except TidelogError as error:
            return answer(error_code_for(error))
        await asyncio.sleep(SERVING_POLL_S)
    if timestamp == LATEST:
        return answer(ErrorCode.NONE, int(latest))
    if timestamp in (EARLIEST, EARLIEST_LOCAL):  # every record is local: no tiered storage
        return answer(ErrorCode.NONE, int(replica.status().log_start_offset))
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return answer(ErrorCode.NONE, -1)  # nothing is tiered, nothing waits to be
    try:
        if timestamp == MAX_TIMESTAMP:
            found = runner.storage.max_timestamp_record(latest)
        else:
            found = runner.storage.offset_for_timestamp(timestamp)
    except StorageError as error:  # a batch failed its CRC: never served; it is repaired
        return answer(error_code_for(error))
    if found is None or found[0] >= latest:
        return answer(ErrorCode.NONE, -1)  # no record that recent (yet committed)
    return answer(ErrorCode.NONE, int(found[0]), found[1])  # the found record's timestamp


# ---------------------------------------------------------------------- InitProducerId -
async def init_producer_id(broker: BrokerView, request: KafkaRequest) -> Any:
    """A producer id unique to this node's run: node id, start time, counter. With an
    authorizer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (as Kafka)."""
    may = cluster_allowed(broker, IDEMPOTENT_WRITE) or any(
        allowed(broker, WRITE, TOPIC, name) for name in broker.image.topics
    )
    if not may:
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            producer_id=-1,
            producer_epoch=-1,
        )
    started = int(time.time()) & 0xFFFFFFFF
    producer_id = (int(broker.node_id) << 52) | (started << 20) | (next(_producer_ids) & 0xFFFFF)
    # A producer that asks to bump its epoch (v3+, KIP-360) gets a new id at epoch 0, as
    # Kafka does when an epoch cannot grow; no transaction is ever ongoing (v6).
    return response(
        request,
        throttle_time_ms=0,
        error_code=0,
        producer_id=producer_id,
        producer_epoch=0,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )


# ---------------------------------------------------------------------- topics ---------
async def create_topics(broker: BrokerView, request: KafkaRequest) -> Any:
    """Each topic, created through the metadata log (or only checked, validate_only). From
    v5 the answer carries the topic's partitions, replication factor and configs as
    created, and from v7 its id (zero when only validated), as Kafka's."""
    cls = request.response_class.CreatableTopicResult
    validate_only = bool(getattr(request.body, "validate_only", False))
    results = []
    for topic in body_of(request).topics:
        code, message, info = await create_topic(broker, topic, validate_only)
        if info is None:
            results.append(
                cls(
                    name=topic.name,
                    error_code=int(code),
                    error_message=message,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=[],
                )
            )
            continue
        results.append(
            cls(
                name=topic.name,
                topic_id=info.topic_id,
                error_code=int(code),
                error_message=message,
                num_partitions=info.partitions,
                replication_factor=len(info.replicas[0]),
                configs=[
                    cls.CreatableTopicConfigs(
                        name=config.name,
                        value=config.value,
                        read_only=False,
                        config_source=config.source,
                        is_sensitive=False,
                    )
                    for config in config_entries(info)
                ],
            )
        )
    return response(request, throttle_time_ms=0, topics=results)


async def create_topic(
    broker: BrokerView, topic: Any, validate_only: bool
) -> tuple[ErrorCode, str | None, TopicInfo | None]:
    """The outcome of creating one topic, and the topic as created (as it would be, with a
    zero id, when only validated); None when it is not."""
    if not isinstance(topic.name, str):
        return ErrorCode.INVALID_REQUEST, "a topic name is required", None
    if not (cluster_allowed(broker, CREATE) or allowed(broker, CREATE, TOPIC, topic.name)):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to create this topic", None
    if topic.name in INTERNAL_TOPICS:
        refused = f"Creation of internal topic {topic.name} is prohibited."
        return ErrorCode.INVALID_REQUEST, refused, None
    if topic.name in broker.image.topics:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic {quoted(topic.name)} already exists.", None
    partitions = (
        topic.num_partitions if topic.num_partitions > 0 else broker.config.default_partitions
    )
    factor = (
        topic.replication_factor
        if topic.replication_factor > 0
        else broker.config.default_replication_factor
    )
    configs = {config.name: config.value for config in topic.configs or ()}
    # As Kafka: replicas go to the brokers available now, not to one the controller fenced.
    available = [int(node) for node in broker.all_nodes if node not in broker.image.fenced]
    try:
        config = validate_topic(
            topic.name,
            partitions,
            factor,
            configs,
            nodes=len(available),
            existing=set(broker.image.topics),
        )
    except MetadataError as error:
        return ErrorCode[error.code], str(error), None
    start = broker.rng.randrange(len(available))
    replicas = place_replicas(available, partitions, factor, start)
    if validate_only:
        planned = tuple(tuple(nodes) for nodes in replicas)
        return ErrorCode.NONE, None, TopicInfo(topic.name, planned, TOPIC_ID_ZERO, configs, config)
    command = {"type": "create_topic", "name": topic.name, "replicas": replicas, "configs": configs}
    code, message = await broker.commit_metadata(command)
    return code, message, broker.image.topics.get(topic.name) if code == ErrorCode.NONE else None


async def delete_topics(broker: BrokerView, request: KafkaRequest) -> Any:
    """Each topic named (or, from v6, named by its id), deleted through the metadata log."""
    body = body_of(request)
    if request.api_version < 6:
        asked = [(name, None) for name in body.topic_names]
    else:
        asked = [(topic.name, topic.topic_id) for topic in body.topics]
    cls = request.response_class.DeletableTopicResult
    results = []
    for given, topic_id in asked:
        name = given
        if not name and topic_id is not None:  # the zero id decodes as None
            name = broker.image.topic_named(topic_id)
        message: str | None
        if name is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}"
        elif name in INTERNAL_TOPICS:
            code, message = ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name} is an internal topic"
        elif not allowed(broker, DELETE, TOPIC, str(name)):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized"
        elif name not in broker.image.topics:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {quoted(str(name))}"
        else:
            topic_id = broker.image.topics[name].topic_id
            code, message = await broker.commit_metadata({"type": "delete_topic", "name": name})
        results.append(
            cls(name=name, topic_id=topic_id, error_code=int(code), error_message=message)
        )
    return response(request, throttle_time_ms=0, responses=results)


# ---------------------------------------------------------------------- DeleteRecords --
async def delete_records(broker: BrokerView, request: KafkaRequest) -> Any:
    """Move each partition's log start (Kafka's low watermark), never past its HWM."""
    cls = request.response_class.DeleteRecordsTopicResult
    topics = []
    for topic in body_of(request).topics:
        partitions = []
        for part in topic.partitions:
            code, low = await delete_partition_records(broker, topic.name, part)
            partitions.append(
                cls.DeleteRecordsPartitionResult(
                    partition_index=part.partition_index, low_watermark=low, error_code=int(code)
                )
            )
        topics.append(cls(name=topic.name, partitions=partitions))
    return response(request, throttle_time_ms=0, topics=topics)


async def delete_partition_records(
    broker: BrokerView, topic: str, part: Any
) -> tuple[ErrorCode, int]:
    if topic in INTERNAL_TOPICS:  # Kafka: "Cannot delete records of internal topic"
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    if not allowed(broker, DELETE, TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
    runner = broker.runner(topic, part.partition_index)
    if runner is None:
        known = topic in broker.image.topics
        return (
            ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ), -1

    def delete(replica: Any) -> Offset:
        offset = part.offset if part.offset >= 0 else replica.status().readable_end
        result: Offset = replica.delete_records(Offset(offset))
        return result

    try:
        low = await runner.call(delete)
    except TidelogError as error:
        return error_code_for(error), -1
    return ErrorCode.NONE, int(low)


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.METADATA: metadata,
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.DELETE_RECORDS: delete_records,
    **GROUP_HANDLERS,
    **SASL_HANDLERS,
    **ACL_HANDLERS,
    **LEADERSHIP_HANDLERS,
    **CONFIGS_HANDLERS,
    **EPOCHS_HANDLERS,
    **TOPICS_HANDLERS,
    **CLUSTER_HANDLERS,
}
