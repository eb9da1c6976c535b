"""CreateTopics, DeleteTopics and CreatePartitions (v0-3: more partitions for a topic,
kafka-topics --alter --partitions).

Rules of this file:
- CreateTopics takes a topic's own placement (`assignments`) as Kafka's controller does:
  partitions 0..n-1, each on as many distinct registered nodes as the first, and no
  partition count or replication factor beside it (INVALID_REQUEST); else
  INVALID_REPLICA_ASSIGNMENT.
- Validated at the door: the topic exists and is no internal one, the count grows, at most
  PARTITIONS_MAX; an explicit assignment names, for each new partition, as many distinct
  known nodes as the topic's replication factor. ALTER on the topic with an authorizer.
- The new partitions' placement continues the round robin (or is the one asked for) and
  is written to the metadata log (`create_partitions`, forwarded to the controller by any
  other node); every node opens the replicas it is given once the command is applied.
- validate_only checks and writes nothing.
- Topic changes go through the metadata log and are answered once applied on this node;
  only the metadata leader (the "controller") takes them.
"""

from __future__ import annotations

from typing import Any

from tidelog.errors import MetadataError
from tidelog.protocol.kafka import TOPIC_ID_ZERO, ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER, CREATE, DELETE, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed, cluster_allowed
from tidelog.server.configs_api import config_entries
from tidelog.server.metadata import (
    INTERNAL_TOPICS,
    TopicInfo,
    validate_topic,
)
from tidelog.server.metadata_fields import PARTITIONS_MAX, place_replicas, quoted
from tidelog.server.reassignment import target_of
from tidelog.server.view import BrokerView


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
    manual = manual_assignment(broker, topic)
    if isinstance(manual, tuple):
        return manual[0], manual[1], None
    partitions = (
        topic.num_partitions if topic.num_partitions > 0 else broker.config.default_partitions
    )
    factor = (
        topic.replication_factor
        if topic.replication_factor > 0
        else broker.config.default_replication_factor
    )
    if manual is not None:  # its nodes need only be registered, as in Kafka
        partitions, factor = len(manual), len(manual[0])
    configs = {config.name: config.value for config in topic.configs or ()}
    # As Kafka: replicas go to the brokers available now, not to one the controller fenced.
    available = [int(node) for node in broker.all_nodes if node not in broker.image.fenced]
    try:
        config = validate_topic(
            topic.name,
            partitions,
            factor,
            configs,
            nodes=len(broker.all_nodes if manual else available),
            existing=set(broker.image.topics),
        )
    except MetadataError as error:
        return ErrorCode[error.code], str(error), None
    start = broker.rng.randrange(len(available))
    replicas = manual or place_replicas(available, partitions, factor, start)
    if validate_only:
        planned = tuple(tuple(nodes) for nodes in replicas)
        return ErrorCode.NONE, None, TopicInfo(topic.name, planned, TOPIC_ID_ZERO, configs, config)
    command = {"type": "create_topic", "name": topic.name, "replicas": replicas, "configs": configs}
    code, message = await broker.commit_metadata(command)
    return code, message, broker.image.topics.get(topic.name) if code == ErrorCode.NONE else None


def manual_assignment(
    broker: BrokerView, topic: Any
) -> list[tuple[int, ...]] | tuple[ErrorCode, str] | None:
    """A CreateTopics topic's own placement (its `assignments`), checked as Kafka's
    controller checks one: partitions 0..n-1, each naming as many distinct registered
    nodes as the first; not with a partition count or replication factor. None when it
    names none; the refusal when it cannot be."""
    given = sorted(getattr(topic, "assignments", None) or (), key=lambda a: a.partition_index)
    if not given:
        return None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        return (
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    if [a.partition_index for a in given] != list(range(len(given))):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    placement: list[tuple[int, ...]] = []
    for assignment in given:
        try:
            nodes = target_of(list(assignment.broker_ids), broker.image.incarnations)
        except MetadataError as error:
            return ErrorCode[error.code], str(error)
        assert nodes is not None
        if len(nodes) != len(placement[0] if placement else nodes):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes a partition with "
                f"{len(nodes)} replica(s), but this is not consistent with previous "
                f"partitions, which have {len(placement[0])} replica(s).",
            )
        placement.append(nodes)
    return placement


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


async def create_partitions(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.CreatePartitionsTopicResult
    results = []
    for topic in body.topics:
        code, message = await grow(broker, topic, bool(body.validate_only))
        results.append(cls(name=topic.name, error_code=int(code), error_message=message))
    return response(request, throttle_time_ms=0, results=results)


async def grow(broker: BrokerView, topic: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    name = str(topic.name)
    if not allowed(broker, ALTER, TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized"
    info = broker.image.topics.get(name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {quoted(name)}"
    if name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_REQUEST, f"{name} is an internal topic"
    count = int(topic.count)
    if count <= info.partitions:
        return (
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {info.partitions} partitions, which is higher than or equal "
            f"to the requested {count}.",
        )
    if count > PARTITIONS_MAX:
        return ErrorCode.INVALID_PARTITIONS, f"at most {PARTITIONS_MAX} partitions"
    factor = len(info.replicas[0])
    new = count - info.partitions
    if topic.assignments:
        added = [tuple(int(n) for n in a.broker_ids) for a in topic.assignments]
        wrong = [
            a
            for a in added
            if len(a) != factor or len(set(a)) != factor or not set(a) <= set(broker.all_nodes)
        ]
        if len(added) != new or wrong:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"want {new} assignments of {factor} distinct known nodes each",
            )
    else:
        start = broker.rng.randrange(len(broker.all_nodes))
        added = list(place_replicas(list(broker.all_nodes), count, factor, start))[-new:]
    if validate_only:
        return ErrorCode.NONE, None
    command = {"type": "create_partitions", "name": name, "replicas": [list(a) for a in added]}
    return await broker.commit_metadata(command)


TOPICS_HANDLERS = {
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
}
