"""CreatePartitions (v0-3): more partitions for a topic (kafka-topics --alter --partitions).

Rules of this file:
- Validated at the door: the topic exists and is no internal one, the count grows, at most
  PARTITIONS_MAX; an explicit assignment names, for each new partition, as many distinct
  known nodes as the topic's replication factor. ALTER on the topic with an authorizer.
- The new partitions' placement continues the round robin (or is the one asked for) and
  is written to the metadata log (`create_partitions`, forwarded to the controller by any
  other node); every node opens the replicas it is given once the command is applied.
- validate_only checks and writes nothing.
"""

from __future__ import annotations

from typing import Any

from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed
from tidelog.server.metadata import INTERNAL_TOPICS, PARTITIONS_MAX, place_replicas, quoted
from tidelog.server.view import BrokerView


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


TOPICS_HANDLERS = {ApiKey.CREATE_PARTITIONS: create_partitions}
