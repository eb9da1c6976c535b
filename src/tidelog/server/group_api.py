"""The Kafka APIs of consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups and DescribeGroups.

Rules of this file:
- A group's coordinator is the leader of its `__consumer_offsets` partition
  (`group_partition`); FindCoordinator names it, and every other node answers that group's
  requests with NOT_COORDINATOR, so clients look it up again after a failover.
- Handlers only translate between kafka-python's request objects and `GroupCoordinator`
  (the asyncio adapter of `tidelog.server.groups`); the rules of groups live in the
  sans-IO `tidelog.groups.coordinator`.
- Versions stop here: the coordinator never sees one. Each handler's docstring says what
  its versions change, at the versions named by the `*_MIN` constants below; a field a
  version lacks reaches the coordinator as its default (None: not given).
- Offsets are stored by topic name: a topic named by id (v10) is looked up in the metadata
  image, and answered with the id it was asked by.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from tidelog.clock import monotonic_ms
from tidelog.groups.messages import CommittedOffset
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
KEY_TYPE_TRANSACTION = 1
GROUP_TYPE = "classic"  # every tidelog group (ListGroups v5+; KIP-848 adds "consumer")

# The versions where a group API's meaning changes (each at its handler):
JOIN_GROUP_KNOWN_MEMBER_ID_MIN = 4  # a member without an id gets one first (KIP-394)
FIND_COORDINATOR_BATCHED_MIN = 4  # CoordinatorKeys in, Coordinators out (KIP-699)
OFFSET_FETCH_BATCHED_MIN = 8  # Groups in, Groups out, an error per group
GROUP_ID_NOT_FOUND_MIN = 9  # OffsetCommit to a group that does not exist (KIP-848)
TOPIC_IDS_MIN = 10  # OffsetCommit and OffsetFetch name topics by id (KIP-848)
GROUP_ID_NOT_FOUND_DESCRIBED_MIN = 6  # DescribeGroups of a group that does not exist (KIP-1043)


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
    """One key below v4; from v4 a batch of keys of one type, each answered alone."""
    body = body_of(request)
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)  # v0 has none: a group
    if request.api_version < FIND_COORDINATOR_BATCHED_MIN:
        return response(request, throttle_time_ms=0, **locate(broker, key_type, body.key))
    cls = request.response_class.Coordinator
    coordinators = [cls(key=key, **locate(broker, key_type, key)) for key in body.coordinator_keys]
    return response(request, throttle_time_ms=0, coordinators=coordinators)


def locate(broker: BrokerView, key_type: int, key: str) -> dict[str, Any]:
    """The fields answering one coordinator key: where its coordinator is, or why not."""

    def answer(
        code: ErrorCode, message: str | None, node: int = -1, port: int = -1
    ) -> dict[str, Any]:
        host = host_of(broker, node) if node >= 0 else ""
        return {
            "error_code": int(code),
            "error_message": message,
            "node_id": node,
            "host": host,
            "port": port,
        }

    if key_type == KEY_TYPE_TRANSACTION:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "tidelog has no transactions")
    if key_type != KEY_TYPE_GROUP:  # share groups (KIP-932) and unknown types, as Kafka
        return answer(ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}")
    if not allowed(broker, DESCRIBE, GROUP, key):
        return answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized")
    info = broker.image.topics.get(OFFSETS_TOPIC)
    if info is None:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is not created yet")
    partition = PartitionKey(OFFSETS_TOPIC, group_partition(key, info.partitions))
    leader, _ = broker.leader_of(partition)
    if leader < 0 or leader not in broker.kafka_ports:
        return answer(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"{partition.topic}-{partition.partition} has no leader",
        )
    return answer(ErrorCode.NONE, None, leader, broker.kafka_ports[leader])  # type: ignore[index]


# ---------------------------------------------------------------------- JoinGroup ------
async def join_group(broker: BrokerView, request: KafkaRequest) -> Any:
    """v4+ gives a member without an id its id with MEMBER_ID_REQUIRED, and it joins when
    it comes back with it (KIP-394); v7+ answers the protocol type; v8+ takes a reason
    (logged); v9's SkipAssignment is always false: the leader assigns."""
    body = body_of(request)
    cls = request.response_class

    def answer(code: ErrorCode, **fields: Any) -> Any:
        values = {
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": "",
            "leader": "",
            "skip_assignment": False,
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
            reason=getattr(body, "reason", None),
            require_known_member_id=request.api_version >= JOIN_GROUP_KNOWN_MEMBER_ID_MIN,
        )
    except GroupError as error:
        return answer(error.code, member_id=error.member_id or body.member_id)
    members = [
        cls.JoinGroupResponseMember(member_id=member, group_instance_id=instance, metadata=data)
        for member, instance, data in result.members
    ]
    return answer(
        ErrorCode.NONE,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol or "",
        leader=result.leader,
        member_id=result.member_id,
        members=members,
    )


# ---------------------------------------------------------------------- SyncGroup ------
async def sync_group(broker: BrokerView, request: KafkaRequest) -> Any:
    """v5+ names the protocol type and protocol both ways (KIP-559): ones that are not the
    group's get INCONSISTENT_GROUP_PROTOCOL."""
    body = body_of(request)
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    try:
        coordinator = coordinator_of(broker, body.group_id)
        protocol_type, protocol, assignment = await coordinator.sync(
            body.group_id,
            generation=body.generation_id,
            member_id=body.member_id,
            assignments=assignments,
            protocol_type=getattr(body, "protocol_type", None),
            protocol=getattr(body, "protocol_name", None),
            group_instance_id=getattr(body, "group_instance_id", None),
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
            body.group_id,
            generation=body.generation_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
        )
    except GroupError as error:
        code = error.code
    return response(request, throttle_time_ms=0, error_code=int(code))


# ---------------------------------------------------------------------- LeaveGroup -----
async def leave_group(broker: BrokerView, request: KafkaRequest) -> Any:
    """One member below v3; from v3 a batch, each answered alone; v5+ reasons (logged)."""
    body = body_of(request)
    cls = request.response_class
    batch = request.api_version >= 3
    identities = list(body.members) if batch else []
    member_ids = [m.member_id for m in identities] if batch else [body.member_id]
    reasons = tuple(getattr(m, "reason", None) for m in identities)
    instance_ids = tuple(m.group_instance_id for m in identities)
    try:
        coordinator = coordinator_of(broker, body.group_id)
        codes = coordinator.leave(body.group_id, member_ids, reasons, instance_ids)
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


# ---------------------------------------------------------------------- topics by id ---
def topic_name(broker: BrokerView, topic: Any, *, by_id: bool) -> str | None:
    """The name of a request's topic: its own below v10 of OffsetCommit and OffsetFetch,
    else the topic its id names (KIP-848), None when no topic has that id now."""
    return broker.image.topic_named(topic.topic_id) if by_id else str(topic.name)


def topic_named_as_asked(topic: Any, *, by_id: bool) -> dict[str, Any]:
    """A response topic's name field, as its request topic named it."""
    return {"topic_id": topic.topic_id} if by_id else {"name": topic.name}


# ---------------------------------------------------------------------- OffsetCommit ---
async def offset_commit(broker: BrokerView, request: KafkaRequest) -> Any:
    """Offsets are stored by topic name; v10 names topics by id (an unknown one:
    UNKNOWN_TOPIC_ID). v9+ answers GROUP_ID_NOT_FOUND for a commit with a generation to a
    group that does not exist (older versions: UNKNOWN_MEMBER_ID, as before)."""
    body = body_of(request)
    cls = request.response_class.OffsetCommitResponseTopic
    by_id = request.api_version >= TOPIC_IDS_MIN
    names = [topic_name(broker, topic, by_id=by_id) for topic in body.topics]
    offsets = {
        (name, part.partition_index): (
            part.committed_offset,
            getattr(part, "committed_leader_epoch", -1),
            part.committed_metadata or "",
        )
        for topic, name in zip(body.topics, names, strict=True)
        if name is not None
        for part in topic.partitions
    }
    refused = {key for key in offsets if not allowed(broker, READ, TOPIC, key[0])}
    generation = body.generation_id_or_member_epoch
    try:
        coordinator = coordinator_of(broker, body.group_id)
        unknown = generation >= 0 and not coordinator.has_group(body.group_id)
        if unknown and request.api_version >= GROUP_ID_NOT_FOUND_MIN:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
        codes = await coordinator.commit(
            body.group_id,
            generation=generation,
            member_id=body.member_id,
            offsets={key: value for key, value in offsets.items() if key not in refused},
            group_instance_id=getattr(body, "group_instance_id", None),
        )
    except GroupError as error:
        codes = dict.fromkeys(offsets, error.code)
    codes.update(dict.fromkeys(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    topics = [
        cls(
            **topic_named_as_asked(topic, by_id=by_id),
            partitions=[
                cls.OffsetCommitResponsePartition(
                    partition_index=part.partition_index,
                    error_code=int(
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if name is None
                        else codes[(name, part.partition_index)]
                    ),
                )
                for part in topic.partitions
            ],
        )
        for topic, name in zip(body.topics, names, strict=True)
    ]
    return response(request, throttle_time_ms=0, topics=topics)


# ---------------------------------------------------------------------- OffsetFetch ----
Fetched = dict[tuple[str, int], CommittedOffset | None]


def fetch_offsets(
    broker: BrokerView, group_id: str, asked: list[tuple[str, int]] | None
) -> tuple[ErrorCode, Fetched, set[tuple[str, int]]]:
    """(error, each partition's committed offset or None, the partitions asked of topics
    this principal may not describe): every partition with an offset when `asked` is None,
    those of undescribable topics left out (as Kafka's handleOffsetFetchRequest); on an
    error, None for each partition asked."""
    try:
        coordinator = coordinator_of(broker, group_id, DESCRIBE)
        offsets = dict(coordinator.fetch_offsets(group_id, asked, now_ms=monotonic_ms()))
    except GroupError as error:
        return error.code, dict.fromkeys(asked or [], None), set()
    hidden = {key for key in offsets if not allowed(broker, DESCRIBE, TOPIC, key[0])}
    for key in hidden:
        if asked is None:
            del offsets[key]
        else:
            offsets[key] = None
    return ErrorCode.NONE, offsets, hidden if asked is not None else set()


def fetched_partition(
    cls: Any, partition: int, committed: CommittedOffset | None, code: ErrorCode
) -> Any:
    return cls(
        partition_index=partition,
        committed_offset=-1 if committed is None else committed.offset,
        committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
        metadata="" if committed is None else committed.metadata,
        error_code=int(code),
    )


def partitions_by_topic(
    cls: Any, offsets: Fetched, code: ErrorCode, refused: AbstractSet[tuple[str, int]] = frozenset()
) -> dict[str, list[Any]]:
    """Each topic's answered partitions (of class `cls`), in the order of `offsets`; those
    `refused` with TOPIC_AUTHORIZATION_FAILED."""
    grouped: dict[str, list[Any]] = {}
    for (topic, partition), committed in offsets.items():
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED if (topic, partition) in refused else code
        grouped.setdefault(topic, []).append(fetched_partition(cls, partition, committed, error))
    return grouped


async def offset_fetch(broker: BrokerView, request: KafkaRequest) -> Any:
    """One group below v8, a batch of groups from v8, each answered alone. Nothing is ever
    pending (commits are answered once applied), so v7's RequireStable changes nothing; v9's
    MemberId and MemberEpoch are for KIP-848 groups, and a classic group ignores them, as in
    Kafka's ClassicGroup.validateOffsetFetch."""
    body = body_of(request)
    if request.api_version >= OFFSET_FETCH_BATCHED_MIN:
        groups = [offset_fetch_group(broker, request, group) for group in body.groups]
        return response(request, throttle_time_ms=0, groups=groups)
    cls = request.response_class.OffsetFetchResponseTopic
    asked = (
        None
        if body.topics is None
        else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    )
    code, offsets, refused = fetch_offsets(broker, body.group_id, asked)
    partition_code = code if request.api_version < 2 else ErrorCode.NONE  # v2+: top-level
    grouped = partitions_by_topic(
        cls.OffsetFetchResponsePartition, offsets, partition_code, refused
    )
    topics = [cls(name=topic, partitions=parts) for topic, parts in grouped.items()]
    return response(request, throttle_time_ms=0, topics=topics, error_code=int(code))


def offset_fetch_group(broker: BrokerView, request: KafkaRequest, group: Any) -> Any:
    """One group of an OffsetFetch v8+: its topics (by id from v10: an unknown id gets
    UNKNOWN_TOPIC_ID; a topic with offsets but no id now is left out, as Kafka does), or
    its error alone."""
    cls = request.response_class.OffsetFetchResponseGroup
    topic_cls = cls.OffsetFetchResponseTopics
    part_cls = topic_cls.OffsetFetchResponsePartitions
    by_id = request.api_version >= TOPIC_IDS_MIN
    asked_topics = [] if group.topics is None else list(group.topics)
    names = [topic_name(broker, topic, by_id=by_id) for topic in asked_topics]
    asked = [
        (name, p)
        for topic, name in zip(asked_topics, names, strict=True)
        if name is not None
        for p in topic.partition_indexes
    ]
    code, offsets, refused = fetch_offsets(
        broker, group.group_id, None if group.topics is None else asked
    )
    if code is not ErrorCode.NONE:
        return cls(group_id=group.group_id, topics=[], error_code=int(code))
    if group.topics is not None:
        topics = [
            topic_cls(
                **topic_named_as_asked(topic, by_id=by_id),
                partitions=[
                    fetched_partition(part_cls, p, None, ErrorCode.UNKNOWN_TOPIC_ID)
                    if name is None
                    else fetched_partition(
                        part_cls,
                        p,
                        offsets[(name, p)],
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if (name, p) in refused
                        else ErrorCode.NONE,
                    )
                    for p in topic.partition_indexes
                ],
            )
            for topic, name in zip(asked_topics, names, strict=True)
        ]
        return cls(group_id=group.group_id, topics=topics, error_code=0)
    grouped = partitions_by_topic(part_cls, offsets, ErrorCode.NONE)
    if not by_id:
        topics = [topic_cls(name=name, partitions=parts) for name, parts in grouped.items()]
    else:
        topics = [
            topic_cls(topic_id=info.topic_id, partitions=parts)
            for name, parts in grouped.items()
            if (info := broker.image.topics.get(name)) is not None
        ]
    return cls(group_id=group.group_id, topics=topics, error_code=0)


# ---------------------------------------------------------------------- ListGroups -----
async def list_groups(broker: BrokerView, request: KafkaRequest) -> Any:
    """v4+ filters by state, v5+ by type (both case-insensitive, as Kafka): every tidelog
    group is "classic", so a types filter without it lists none."""
    body = body_of(request)
    cls = request.response_class.ListedGroup
    states = {s.strip().lower() for s in getattr(body, "states_filter", None) or []}
    types = {t.lower() for t in getattr(body, "types_filter", None) or []}
    groups = []
    for coordinator in broker.coordinators.values():
        if not coordinator.loaded or (types and GROUP_TYPE not in types):
            continue
        for group in coordinator.groups.values():
            if states and group.state.value.lower() not in states:
                continue
            if not allowed(broker, DESCRIBE, GROUP, group.group_id):
                continue
            groups.append(
                cls(
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=group.state.value,
                    group_type=GROUP_TYPE,
                )
            )
    return response(request, throttle_time_ms=0, error_code=0, groups=groups)


# ---------------------------------------------------------------------- DescribeGroups -
async def describe_groups(broker: BrokerView, request: KafkaRequest) -> Any:
    """A group that does not exist: Dead, with GROUP_ID_NOT_FOUND and a message from v6
    (KIP-1043), with no error below."""
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
            if request.api_version >= GROUP_ID_NOT_FOUND_DESCRIBED_MIN:
                message = f"Group {group_id} not found."
                described.append(dead_group(cls, group_id, ErrorCode.GROUP_ID_NOT_FOUND, message))
            else:
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


def dead_group(cls: Any, group_id: str, code: ErrorCode, message: str | None = None) -> Any:
    return cls(
        error_code=int(code),
        error_message=message,
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
