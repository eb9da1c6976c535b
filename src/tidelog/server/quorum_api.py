"""DescribeQuorum (v0-2): the metadata log's leader, epoch, HWM, voters and observers, as
Kafka 4.0 answers it (KIP-595; KIP-836 adds the v1 timestamps; KIP-853 the v2 directory ids,
error messages and nodes).

Rules of this file:
- Any node answers: the report comes from the metadata log's leader (tidelog.server.quorum;
  a node that does not lead it asks the one that does, as Kafka's brokers forward this
  request to the active controller). When no leader answers, the partition's error is
  NOT_LEADER_OR_FOLLOWER, with the leader and epoch this node knows.
- Only `__cluster_metadata` partition 0, alone, is served (Kafka's hasValidTopicPartition):
  any other request is answered UNKNOWN_TOPIC_OR_PARTITION for every partition it names.
- DESCRIBE on the cluster when the authorizer is on, else the top-level error
  CLUSTER_AUTHORIZATION_FAILED (as Kafka's controller authorizes it).
- A directory id is the uuid whose low 64 bits are the copy's id (all zero: not known).
- Nodes (v2) names each voter's port and host on the listener the request came in on.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import DESCRIBE
from tidelog.server.answers import body_of, host_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.quorum import UNKNOWN, QuorumReport, ReplicaState
from tidelog.server.view import BrokerView, client_listener
from tidelog.types import NodeId

METADATA_PARTITION: Final = 0
NOT_LEADER_MESSAGE: Final = "no leader of the metadata log answered"
UNKNOWN_PARTITION_MESSAGE: Final = f"only {METADATA_TOPIC}-{METADATA_PARTITION} has a quorum"


async def describe_quorum(broker: BrokerView, request: KafkaRequest) -> Any:
    asked = [
        (str(t.topic_name), int(p.partition_index))
        for t in body_of(request).topics
        for p in t.partitions
    ]
    if not cluster_allowed(broker, DESCRIBE):
        return top_level_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if asked != [(METADATA_TOPIC, METADATA_PARTITION)]:
        return unknown_partitions(request, asked)
    report = await broker.quorum_report()
    if report is None:
        leader, epoch = broker.leader_of(broker.metadata.key)
        return answer(request, [partition_error(request, leader, epoch)], nodes=[])
    return answer(request, [partition_of(request, report)], nodes=nodes_of(broker, request, report))


def answer(request: KafkaRequest, partitions: list[Any], *, nodes: list[Any]) -> Any:
    topic = request.response_class.TopicData(topic_name=METADATA_TOPIC, partitions=partitions)
    return response(request, error_code=0, error_message=None, topics=[topic], nodes=nodes)


def partition_of(request: KafkaRequest, report: QuorumReport) -> Any:
    cls = request.response_class.TopicData.PartitionData
    return cls(
        partition_index=METADATA_PARTITION,
        error_code=0,
        error_message=None,
        leader_id=report.leader_id,
        leader_epoch=report.leader_epoch,
        high_watermark=report.high_watermark,
        current_voters=[replica_of(cls, state) for state in report.voters],
        observers=[replica_of(cls, state) for state in report.observers],
    )


def replica_of(partition_cls: Any, state: ReplicaState) -> Any:
    return partition_cls.ReplicaState(
        replica_id=state.replica_id,
        replica_directory_id=uuid.UUID(int=state.directory_id),
        log_end_offset=state.log_end_offset,
        last_fetch_timestamp=state.last_fetch_timestamp,
        last_caught_up_timestamp=state.last_caught_up_timestamp,
    )


def partition_error(request: KafkaRequest, leader: int, epoch: int) -> Any:
    return failed_partition(
        request,
        METADATA_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        NOT_LEADER_MESSAGE,
        leader=leader,
        epoch=epoch,
    )


def failed_partition(
    request: KafkaRequest,
    partition: int,
    code: ErrorCode,
    message: str,
    *,
    leader: int = UNKNOWN,
    epoch: int = UNKNOWN,
) -> Any:
    """A partition's answer that names an error and no replica."""
    return request.response_class.TopicData.PartitionData(
        partition_index=partition,
        error_code=int(code),
        error_message=message,
        leader_id=leader,
        leader_epoch=epoch,
        high_watermark=UNKNOWN,
        current_voters=[],
        observers=[],
    )


def unknown_partitions(request: KafkaRequest, asked: list[tuple[str, int]]) -> Any:
    topic_cls = request.response_class.TopicData
    by_topic: dict[str, list[int]] = {}
    for topic, partition in asked:
        by_topic.setdefault(topic, []).append(partition)
    topics = [
        topic_cls(
            topic_name=topic,
            partitions=[
                failed_partition(
                    request,
                    partition,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    UNKNOWN_PARTITION_MESSAGE,
                )
                for partition in partitions
            ],
        )
        for topic, partitions in by_topic.items()
    ]
    return response(request, error_code=0, error_message=None, topics=topics, nodes=[])


def top_level_error(request: KafkaRequest, code: ErrorCode) -> Any:
    return response(request, error_code=int(code), error_message=None, topics=[], nodes=[])


def nodes_of(broker: BrokerView, request: KafkaRequest, report: QuorumReport) -> list[Any]:
    """Each voter's endpoint on this request's listener, where this node knows its port."""
    cls = request.response_class.Node
    name = client_listener.get() or broker.config.listeners[0].protocol
    ports = broker.kafka_ports
    voters = sorted({state.replica_id for state in report.voters})
    return [
        cls(
            node_id=node,
            listeners=[
                cls.Listener(name=name, host=host_of(broker, node), port=ports[NodeId(node)])
            ],
        )
        for node in voters
        if NodeId(node) in ports
    ]


QUORUM_HANDLERS = {ApiKey.DESCRIBE_QUORUM: describe_quorum}
