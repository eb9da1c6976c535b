"""The Kafka APIs of consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups and DescribeGroups.

Rules of this file:
- A group's coordinator is the leader of its `__consumer_offsets` partition
  (`group_partition`); FindCoordinator names it, and every other node answers that group's
  requests with NOT_COORDINATOR, so clients look it up again after a failover.
- Handlers only translate between kafka-python's request objects and `GroupCoordinator`
  (the asyncio adapter of `tidelog.server.groups`); the rules of groups live in the
  sans-IO `tidelog.groups.coordinator`.
"""

from __future__ import annotations

from typing import Any

from tidelog.clock import monotonic_ms
from tidelog.groups.state import GroupState
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.acl import DELETE, DESCRIBE, GROUP, READ, TOPIC
from tidelog.server.answers import body_of, client_host, host_of, response
from tidelog.server.authorize import allowed
from tidelog.server.groups import GroupCoordinator, GroupError, group_partition
from tidelog.server.metadata import OFFSETS_TOPIC
from tidelog.server.view import BrokerView

KEY_TYPE_GROUP = 0


def coordinator_of(broker: BrokerView, group_id: str, operation: int = READ) -> GroupCoordinator:
    """This node's coordinator of `group_id`, when the client may do `operation` to the
    group; GroupError when it may not, or the coordinator is not here."""
    if not allowed(broker, operation, GROUP, group_id):
        raise GroupError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    info = broker.image.topics.get(OFFSETS_TOPIC)
    if info is None:
        raise GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    coordinator = broker.coordinators.get(group_partition(group_id, info.partitions))
    if coordinator is None:
        raise GroupError(ErrorCode.NOT_COORDINATOR)
    return coordinator


# ---------------------------------------------------------------------- FindCoordinator
async def find_coordinator(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)

    def answer(code: ErrorCode, message: str | None, node: int = -1, port: int = -1) -> Any:
        host = host_of(broker, node) if node >= 0 else ""
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(code),
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )

    if getattr(body, "key_type", KEY_TYPE_GROUP) != KEY_TYPE_GROUP:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "tidelog has no transactions")
    if not allowed(broker, DESCRIBE, GROUP, body.key):
        return answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized")
    info = broker.image.topics.get(OFFSETS_TOPIC)
    if info is None:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is not created yet")
    key = PartitionKey(OFFSETS_TOPIC, group_partition(body.key, info.partitions))
    leader, _ = broker.leader_of(key)
    if leader < 0 or leader not in broker.kafka_ports:
        return answer(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{key.topic}-{key.partition} has no leader"
        )
    return answer(ErrorCode.NONE, None, leader, broker.kafka_ports[leader])  # type: ignore[index]


# ---------------------------------------------------------------------- JoinGroup ------
async def join_group(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class

    def answer(code: ErrorCode, **fields: Any) -> Any:
        values = {
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": body.member_id,
            "members": [],
        } | fields
        return response(request, throttle_time_ms=0, error_code=int(code), **values)

    rebalance_timeout_ms = getattr(body, "rebalance_timeout_ms", -1)
    if rebalance_timeout_ms < 0:  # v0 has none: Kafka uses the session timeout
        rebalance_timeout_ms = body.session_timeout_ms
    try:
        coordinator = coordinator_of(broker, body.group_id)
        result = await coordinator.join(
            body.group_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            client_id=request.client_id or "",
            client_host=client_host.get(),
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        )
    except GroupError as error:
        return answer(error.code)
    members = [
        cls.JoinGroupResponseMember(member_id=member, group_instance_id=instance, metadata=data)
        for member, instance, data in result.members
    ]
    return answer(
        ErrorCode.NONE,
        generation_id=result.generation,
        protocol_name=result.protocol or "",
        leader=result.leader,
        member_id=result.member_id,
        members=members,
    )


# ---------------------------------------------------------------------- SyncGroup ------
async def sync_group(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    try:
        coordinator = coordinator_of(broker, body.group_id)
        protocol_type, protocol, assignment = await coordinator.sync(
            body.group_id,
            generation=body.generation_id,
            member_id=body.member_id,
            assignments=assignments,
        )
    except GroupError as error:
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(error.code),
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    return response(
        request,
        throttle_time_ms=0,
        error_code=0,
        protocol_type=protocol_type,
        protocol_name=protocol,
        assignment=assignment,
    )


# ---------------------------------------------------------------------- Heartbeat ------
async def heartbeat(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    code = ErrorCode.NONE
    try:
        coordinator_of(broker, body.group_id).heartbeat(
            body.group_id, generation=body.generation_id, member_id=body.member_id
        )
    except GroupError as error:
        code = error.code
    return response(request, throttle_time_ms=0, error_code=int(code))


# ---------------------------------------------------------------------- LeaveGroup -----
async def leave_group(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class
    batch = request.api_version >= 3
    identities = list(body.members) if batch else []
    member_ids = [m.member_id for m in identities] if batch else [body.member_id]
    try:
        codes = coordinator_of(broker, body.group_id).leave(body.group_id, member_ids)
    except GroupError as error:
        return response(request, throttle_time_ms=0, error_code=int(error.code), members=[])
    if not batch:
        return response(request, throttle_time_ms=0, error_code=int(codes[0]), members=[])
    members = [
        cls.MemberResponse(
            member_id=identity.member_id,
            group_instance_id=identity.group_instance_id,
            error_code=int(code),
        )
        for identity, code in zip(identities, codes, strict=True)
    ]
    return response(request, throttle_time_ms=0, error_code=0, members=members)


# ---------------------------------------------------------------------- OffsetCommit ---
async def offset_commit(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.OffsetCommitResponseTopic
    offsets = {
        (topic.name, part.partition_index): (
            part.committed_offset,
            getattr(part, "committed_leader_epoch", -1),
            part.committed_metadata or "",
        )
        for topic in body.topics
        for part in topic.partitions
    }
    refused = {key for key in offsets if not allowed(broker, READ, TOPIC, key[0])}
    try:
        codes = await coordinator_of(broker, body.group_id).commit(
            body.group_id,
            generation=body.generation_id_or_member_epoch,
            member_id=body.member_id,
            offsets={key: value for key, value in offsets.items() if key not in refused},
        )
    except GroupError as error:
        codes = dict.fromkeys(offsets, error.code)
    codes.update(dict.fromkeys(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    topics = [
        cls(
            name=topic.name,
            partitions=[
                cls.OffsetCommitResponsePartition(
                    partition_index=part.partition_index,
                    error_code=int(codes[(topic.name, part.partition_index)]),
                )
                for part in topic.partitions
            ],
        )
        for topic in body.topics
    ]
    return response(request, throttle_time_ms=0, topics=topics)


# ---------------------------------------------------------------------- OffsetFetch ----
async def offset_fetch(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.OffsetFetchResponseTopic
    asked = (
        None
        if body.topics is None
        else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    )
    try:
        coordinator = coordinator_of(broker, body.group_id, DESCRIBE)
        offsets = coordinator.fetch_offsets(body.group_id, asked, now_ms=monotonic_ms())
        code = ErrorCode.NONE
    except GroupError as error:
        offsets, code = dict.fromkeys(asked or [], None), error.code
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), committed in offsets.items():
        by_topic.setdefault(topic, []).append(
            cls.OffsetFetchResponsePartition(
                partition_index=partition,
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=int(code) if request.api_version < 2 else 0,
            )
        )
    topics = [cls(name=topic, partitions=parts) for topic, parts in by_topic.items()]
    return response(request, throttle_time_ms=0, topics=topics, error_code=int(code))


# ---------------------------------------------------------------------- ListGroups -----
async def list_groups(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.ListedGroup
    wanted = {s.lower() for s in getattr(body, "states_filter", None) or []}
    groups = []
    for coordinator in broker.coordinators.values():
        if not coordinator.loaded:
            continue
        for group in coordinator.groups.values():
            if wanted and group.state.value.lower() not in wanted:
                continue
            if not allowed(broker, DESCRIBE, GROUP, group.group_id):
                continue
            groups.append(
                cls(
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=group.state.value,
                    group_type="classic",
                )
            )
    return response(request, throttle_time_ms=0, error_code=0, groups=groups)


# ---------------------------------------------------------------------- DescribeGroups -
async def describe_groups(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DescribedGroup
    described = []
    for group_id in body_of(request).groups:
        try:
            coordinator = coordinator_of(broker, group_id, DESCRIBE)
            coordinator.check_serving()
        except GroupError as error:
            described.append(dead_group(cls, group_id, error.code))
            continue
        group = coordinator.groups.get(group_id)
        if group is None:
            described.append(dead_group(cls, group_id, ErrorCode.NONE))
            continue
        members = [
            cls.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol),
                member_assignment=m.assignment if group.state is GroupState.STABLE else b"",
            )
            for m in group.members.values()
        ]
        described.append(
            cls(
                error_code=0,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=group.protocol or "",
                members=members,
                authorized_operations=None,  # not asked for: Kafka sends INT32_MIN
            )
        )
    return response(request, throttle_time_ms=0, groups=described)


def dead_group(cls: Any, group_id: str, code: ErrorCode) -> Any:
    return cls(
        error_code=int(code),
        error_message=None,
        group_id=group_id,
        group_state=GroupState.DEAD.value,
        protocol_type="",
        protocol_data="",
        members=[],
        authorized_operations=None,  # not asked for: Kafka sends INT32_MIN
    )


# ---------------------------------------------------------------------- deletes --------
async def delete_groups(broker: BrokerView, request: KafkaRequest) -> Any:
    """DeleteGroups: each group at its coordinator; DELETE on the group."""
    cls = request.response_class.DeletableGroupResult
    results = []
    for group_id in body_of(request).groups_names:
        code = ErrorCode.NONE
        try:
            await coordinator_of(broker, group_id, DELETE).delete_group(group_id)
        except GroupError as error:
            code = error.code
        results.append(cls(group_id=group_id, error_code=int(code)))
    return response(request, throttle_time_ms=0, results=results)


async def offset_delete(broker: BrokerView, request: KafkaRequest) -> Any:
    """OffsetDelete: DELETE on the group, READ on each topic."""
    body = body_of(request)
    cls = request.response_class.OffsetDeleteResponseTopic
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    refused = {key for key in asked if not allowed(broker, READ, TOPIC, key[0])}
    top = ErrorCode.NONE
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        coordinator = coordinator_of(broker, body.group_id, DELETE)
        codes = await coordinator.delete_offsets(
            body.group_id, [key for key in asked if key not in refused]
        )
    except GroupError as error:
        top = error.code
    codes.update(dict.fromkeys(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    topics = [
        cls(
            name=topic.name,
            partitions=[
                cls.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index,
                    error_code=int(codes.get((topic.name, p.partition_index), ErrorCode.NONE)),
                )
                for p in topic.partitions
            ],
        )
        for topic in body.topics
    ]
    return response(request, error_code=int(top), throttle_time_ms=0, topics=topics)


GROUP_HANDLERS = {
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.SYNC_GROUP: sync_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.OFFSET_DELETE: offset_delete,
}
