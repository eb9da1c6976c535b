"""The Kafka APIs tidelog answers, each a coroutine from a decoded request to a response:
the table of them (`HANDLERS`, each request family in its own *_api module), Metadata and
InitProducerId.

Rules of this file:
- Every API a client may ask is in `HANDLERS`; one not there is not advertised, and a
  client that sends it anyway is misbehaving (ProtocolError).
- Metadata names a partition's leader only when clients can reach it
  (tidelog.server.leader_hints), and the in-sync replicas as its leader here counts them.
- Auto-creation is Kafka's auto.create.topics.enable, off by default: with it on, a Metadata
  request that allows it (allow_auto_topic_creation, v4+; always before) and names an
  unknown topic creates it as CreateTopics would with the broker's defaults, and answers
  LEADER_NOT_AVAILABLE for it, so the client asks again until its partitions have leaders.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from tidelog.core.replica import ReplicaStatus, Role
from tidelog.protocol.framing import ProtocolError
from tidelog.protocol.kafka import ApiKey, KafkaRequest, api_versions_response
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.acl import CLUSTER, CLUSTER_NAME, DESCRIBE, IDEMPOTENT_WRITE, TOPIC, WRITE
from tidelog.server.acl_api import ACL_HANDLERS
from tidelog.server.answers import body_of, host_of, response
from tidelog.server.authorize import allowed, authorized_operations, cluster_allowed
from tidelog.server.cluster_api import CLUSTER_HANDLERS
from tidelog.server.configs_api import CONFIGS_HANDLERS
from tidelog.server.epochs_api import EPOCHS_HANDLERS
from tidelog.server.fetch_api import FETCH_HANDLERS
from tidelog.server.group_api import GROUP_HANDLERS
from tidelog.server.leader_hints import latest_leader, reachable
from tidelog.server.leadership import LEADERSHIP_HANDLERS
from tidelog.server.metadata import INTERNAL_TOPICS, METADATA_TOPIC
from tidelog.server.offsets_api import OFFSETS_HANDLERS
from tidelog.server.produce_api import PRODUCE_HANDLERS
from tidelog.server.quorum_api import QUORUM_HANDLERS
from tidelog.server.reassign_api import REASSIGN_HANDLERS
from tidelog.server.sasl import SASL_HANDLERS
from tidelog.server.topics_api import TOPICS_HANDLERS, create_topic
from tidelog.server.view import BrokerView
from tidelog.server.voters_api import VOTERS_HANDLERS

log = logging.getLogger("tidelog.kafka")

Handler = Callable[[BrokerView, KafkaRequest], Awaitable[Any]]
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
        elif reported is not None:  # a copy leaving (KIP-455) is no replica to name
            isr = [node for node in reported.isr if node in replicas]
        else:
            isr = [node for node in in_sync_nodes(broker, key, replicas) if node in replicas]
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
    runner = broker.hosting(key)
    if runner is None:
        return list(replicas)
    return in_sync_of(runner.status(), replicas)


def in_sync_of(state: ReplicaStatus, replicas: tuple[int, ...]) -> list[int]:
    """`in_sync_nodes` from one status value the caller has read already: a leader's
    in-sync replicas, else every replica."""
    if state.role is not Role.LEADER:
        return list(replicas)
    return [int(node) for node in state.in_sync_replicas]


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


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.METADATA: metadata,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    **PRODUCE_HANDLERS,
    **FETCH_HANDLERS,
    **OFFSETS_HANDLERS,
    **GROUP_HANDLERS,
    **SASL_HANDLERS,
    **ACL_HANDLERS,
    **LEADERSHIP_HANDLERS,
    **CONFIGS_HANDLERS,
    **EPOCHS_HANDLERS,
    **TOPICS_HANDLERS,
    **VOTERS_HANDLERS,
    **CLUSTER_HANDLERS,
    **QUORUM_HANDLERS,
    **REASSIGN_HANDLERS,
}
