"""AlterPartitionReassignments (v0-1) and ListPartitionReassignments (v0): KIP-455's admin
API, as Kafka 4's controller answers it (ReplicationControlManager.alterPartitionReassignments
and listPartitionReassignments; v1's allowReplicationFactorChange is KIP-860's).

Rules of this file:
- ALTER on the cluster for AlterPartitionReassignments, DESCRIBE on the cluster for
  ListPartitionReassignments (as Kafka); else the top-level error
  CLUSTER_AUTHORIZATION_FAILED and nothing is done.
- Each partition is checked at the door as the controller checks it
  (`MetadataImage.check_reassignment`): UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT
  (an empty or duplicate target, a node never registered; a revert that would need an
  unclean election), NO_REASSIGNMENT_IN_PROGRESS (a cancel of nothing); from v1, with
  allowReplicationFactorChange false, a target of another size than the partition's
  replicas is INVALID_REPLICATION_FACTOR. The partitions that pass go to the metadata log
  as one `alter_reassignments` command (forwarded to the controller by any other node,
  checked again when applied: server/metadata.py); the answer comes once it is applied
  here, each such partition with the commit's outcome; NOT_CONTROLLER (the controller
  changed) is the top-level error too, which admin clients retry.
- A target on a node that is registered but fenced (down) is taken, as Kafka takes it:
  the move waits for that node.
- ListPartitionReassignments answers from this node's image (the same log as the
  controller's): each partition with a move on, its replicas, adding and removing
  replicas; a topic or partition named that has none is left out, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from tidelog.errors import MetadataError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER, DESCRIBE
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.view import BrokerView

Outcome = tuple[ErrorCode, str | None]


async def alter_partition_reassignments(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    fields: dict[str, Any] = {"throttle_time_ms": 0}
    allow_factor_change = bool(getattr(body, "allow_replication_factor_change", True))
    if request.api_version >= 1:
        fields["allow_replication_factor_change"] = allow_factor_change
    if not cluster_allowed(broker, ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return response(request, error_code=int(code), error_message=None, responses=[], **fields)
    outcomes: dict[tuple[str, int], Outcome] = {}
    entries: list[dict[str, Any]] = []
    for topic in body.topics:
        for partition in topic.partitions:
            key = (str(topic.name), int(partition.partition_index))
            replicas = None if partition.replicas is None else list(partition.replicas)
            outcome = checked(broker, key, replicas, allow_factor_change=allow_factor_change)
            outcomes[key] = outcome
            if outcome[0] is ErrorCode.NONE:
                entries.append({"topic": key[0], "partition": key[1], "replicas": replicas})
    if entries:
        committed = await broker.commit_metadata(
            {"type": "alter_reassignments", "partitions": entries}
        )
        for entry in entries:
            outcomes[(entry["topic"], entry["partition"])] = committed
        if committed[0] is ErrorCode.NOT_CONTROLLER:  # the client asks the new one
            fields |= {"error_code": int(committed[0]), "error_message": committed[1]}
    cls = request.response_class.ReassignableTopicResponse
    partition_cls = cls.ReassignablePartitionResponse
    answers = [
        cls(
            name=topic.name,
            partitions=[
                partition_cls(
                    partition_index=partition.partition_index,
                    error_code=int(outcomes[(str(topic.name), int(partition.partition_index))][0]),
                    error_message=outcomes[(str(topic.name), int(partition.partition_index))][1],
                )
                for partition in topic.partitions
            ],
        )
        for topic in body.topics
    ]
    fields.setdefault("error_code", 0)
    fields.setdefault("error_message", None)
    return response(request, responses=answers, **fields)


def checked(
    broker: BrokerView,
    key: tuple[str, int],
    replicas: list[int] | None,
    *,
    allow_factor_change: bool,
) -> Outcome:
    """One partition's reassignment checked at the door (see the rules)."""
    image = broker.image
    try:
        target = image.check_reassignment(key[0], key[1], replicas)
    except MetadataError as error:
        return ErrorCode[error.code], str(error)
    if target is not None and not allow_factor_change:
        moved = image.assignment(key)
        factor = len(moved.original or moved.replicas)
        if len(target) != factor:
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"The replication factor is changed from {factor} to {len(target)}",
            )
    return ErrorCode.NONE, None


async def list_partition_reassignments(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    if not cluster_allowed(broker, DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return response(
            request, throttle_time_ms=0, error_code=int(code), error_message=None, topics=[]
        )
    image = broker.image
    moving = {key: state for key, state in image.assignments.items() if state.moving}
    if body.topics is not None:
        asked = {(str(t.name), int(p)) for t in body.topics for p in t.partition_indexes}
        moving = {key: state for key, state in moving.items() if key in asked}
    cls = request.response_class.OngoingTopicReassignment
    partition_cls = cls.OngoingPartitionReassignment
    topics = [
        cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=partition,
                    replicas=list(state.replicas),
                    adding_replicas=list(state.adding),
                    removing_replicas=list(state.removing),
                )
                for (topic, partition), state in sorted(moving.items())
                if topic == name
            ],
        )
        for name in sorted({topic for topic, _ in moving})
    ]
    return response(request, throttle_time_ms=0, error_code=0, error_message=None, topics=topics)


REASSIGN_HANDLERS = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
}
