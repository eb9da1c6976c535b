"""Every version of the consumer-group APIs, as raw kafka-python requests to a real 3-node
cluster: one connection to the group's coordinator and no client library's choices.

JoinGroup 0-9, SyncGroup 0-5, Heartbeat 0-4, OffsetCommit 2-10, OffsetFetch 1-10,
LeaveGroup 0-5, DescribeGroups 0-6, ListGroups 0-5 and FindCoordinator 0-6, each version
checked for what it adds: a member id given first at JoinGroup v4+ (MEMBER_ID_REQUIRED,
KIP-394), the protocol type in JoinGroup v7+, reasons logged (v8 join,
v5 leave), the protocol checked at SyncGroup v5, batched FindCoordinator (v4+) and
OffsetFetch (v8+, an error per group), GROUP_ID_NOT_FOUND (OffsetCommit v9+, DescribeGroups
v6), the group type (ListGroups v5), topics by id at OffsetCommit and OffsetFetch v10.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.testing.live import (
    LiveCluster,
    RawConnection,
    ask_once,
    create_topic,
    eventually,
    poll,
)

TOPIC, PARTITIONS = "versioned", 2
SESSION_MS = 60_000
PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"subscription")]
ASSIGNMENT = b"assignment"
CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup


@pytest.fixture(scope="module")
def topic(cluster: LiveCluster) -> str:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
    cluster.wait_hosted_everywhere(TOPIC, PARTITIONS)
    return TOPIC


# ---------------------------------------------------------------------- connections ----
def first_broker(cluster: LiveCluster) -> tuple[str, int]:
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def coordinator_of(cluster: LiveCluster, group: str) -> tuple[int, tuple[str, int]]:
    """(node id, address) of the group's coordinator, once a broker names one."""

    def named() -> tuple[int, tuple[str, int]] | None:
        request = FindCoordinatorRequest(version=3, key=group, key_type=0)
        answer = ask_once(first_broker(cluster), request)
        return (answer.node_id, (answer.host, answer.port)) if answer.error_code == 0 else None

    return poll(named, f"a coordinator of {group}")


@dataclass
class Member:
    """One member of `group`, talking to its coordinator `node` over `connection`."""

    group: str
    node: int
    connection: RawConnection
    member_id: str = ""
    generation: int = -1

    def ask(self, request: Any) -> Any:
        return self.connection.ask(request)


def join_request(version: int, group: str, member_id: str = "", reason: str | None = None) -> Any:
    return JoinGroupRequest(
        version=version,
        group_id=group,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=PROTOCOLS,
        reason=reason,
    )


def sync_request(member: Member, version: int, **fields: Any) -> Any:
    values: dict[str, Any] = {
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [],
    } | fields
    return SyncGroupRequest(
        version=version,
        group_id=member.group,
        generation_id=member.generation,
        member_id=member.member_id,
        **values,
    )


def joined(cluster: LiveCluster, group: str) -> Iterator[Member]:
    """A new member of the new group `group`, joined at v0 (once its coordinator has
    loaded), so the group completes its rebalance: it leads generation 1."""
    node, address = coordinator_of(cluster, group)
    member = Member(group, node, RawConnection(address))
    try:
        loading = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}

        def answered() -> Any:
            answer = member.ask(join_request(0, group))
            return None if answer.error_code in loading else answer

        first = poll(answered, f"a join of {group}")
        assert first.error_code == 0 and first.leader == first.member_id
        member.member_id, member.generation = first.member_id, first.generation_id
        yield member
    finally:
        member.connection.close()


@pytest.fixture
def member(cluster: LiveCluster, topic: str, request: pytest.FixtureRequest) -> Iterator[Member]:
    """A member of a group of its own (named after the test) in CompletingRebalance."""
    del topic
    yield from joined(cluster, re.sub("[^a-z0-9]+", "-", request.node.name)[:60])


@pytest.fixture
def stable(member: Member) -> Member:
    """`member` after its SyncGroup v0 with its assignment: the group is Stable."""
    assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member.member_id, ASSIGNMENT)]
    synced = member.ask(sync_request(member, 0, assignments=assignments))
    assert (synced.error_code, synced.assignment) == (0, ASSIGNMENT)
    return member


def other_groups(cluster: LiveCluster, node: int, prefix: str) -> tuple[str, str]:
    """(a group coordinated by `node`, one coordinated by another node), named `prefix-N`."""
    keys = [f"{prefix}-{i}" for i in range(40)]
    request = FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=keys)
    found = {c.key: c.node_id for c in ask_once(first_broker(cluster), request).coordinators}
    here = next(key for key in keys if found[key] == node)
    there = next(key for key in keys if found[key] not in (node, -1))
    return here, there


# ---------------------------------------------------------------------- FindCoordinator
def test_find_coordinator_at_every_version_and_batched_from_v4(cluster: LiveCluster) -> None:
    address = first_broker(cluster)
    keys = ["alpha", "beta", "gamma"]
    expected = {key: coordinator_of(cluster, key) for key in keys}
    for version in range(4):
        answer = ask_once(address, FindCoordinatorRequest(version=version, key="beta", key_type=0))
        node, (host, port) = expected["beta"]
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
            0,
            node,
            host,
            port,
        )
    for version in range(1, 4):
        transaction = FindCoordinatorRequest(version=version, key="tx", key_type=1)
        answer = ask_once(address, transaction)
        assert (answer.error_code, answer.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
        share = FindCoordinatorRequest(version=version, key="g:x:0", key_type=2)
        assert ask_once(address, share).error_code == ErrorCode.INVALID_REQUEST
    for version in range(4, 7):
        request = FindCoordinatorRequest(version=version, key_type=0, coordinator_keys=keys)
        answer = ask_once(address, request)
        got = [(c.key, c.error_code, c.node_id, (c.host, c.port)) for c in answer.coordinators]
        assert got == [(key, 0, *expected[key]) for key in keys]
        request = FindCoordinatorRequest(version=version, key_type=1, coordinator_keys=["t1", "t2"])
        answer = ask_once(address, request)
        got = [(c.key, c.error_code, c.node_id) for c in answer.coordinators]
        assert got == [(key, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1) for key in ("t1", "t2")]
    share_key = f"alpha:{uuid.uuid4()}:0"  # KIP-932: groupId:topicId:partition
    request = FindCoordinatorRequest(version=6, key_type=2, coordinator_keys=[share_key])
    [share] = ask_once(address, request).coordinators
    assert (share.key, share.error_code, share.node_id) == (
        share_key,
        ErrorCode.INVALID_REQUEST,
        -1,
    )


# ---------------------------------------------------------------------- membership -----
@pytest.mark.parametrize("version", range(3, 10))
def test_a_join_without_a_member_id_is_given_one_first_from_v4(
    cluster: LiveCluster, topic: str, version: int
) -> None:
    del topic
    group = f"given-first-v{version}-{uuid.uuid4().hex[:8]}"
    node, address = coordinator_of(cluster, group)
    member = Member(group, node, RawConnection(address))
    try:
        loading = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}

        def answered() -> Any:
            answer = member.ask(join_request(version, group))
            return None if answer.error_code in loading else answer

        first = poll(answered, f"a join of {group}")
        if version < 4:  # joins at once, as before KIP-394
            assert (first.error_code, first.generation_id) == (0, 1)
            assert first.leader == first.member_id != ""
            return
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert (first.generation_id, first.leader, first.members) == (-1, "", [])
        assert first.member_id.startswith("tidelog-test-")  # the client id, then a uuid
        described = member.ask(DescribeGroupsRequest(version=0, groups=[group]))
        assert described.groups[0].members == []  # an id given out is no member
        joined = member.ask(join_request(version, group, first.member_id))
        assert (joined.error_code, joined.generation_id) == (0, 1)
        assert joined.member_id == joined.leader == first.member_id
        # A second id given out and not used: the group has one member still.
        other = member.ask(join_request(version, group))
        assert other.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert other.member_id not in ("", first.member_id)
        described = member.ask(DescribeGroupsRequest(version=0, groups=[group]))
        assert [m.member_id for m in described.groups[0].members] == [first.member_id]
    finally:
        member.connection.close()


def test_join_sync_and_heartbeat_at_every_version(cluster: LiveCluster, member: Member) -> None:
    # The leader joins again at v1-v9 with nothing changed: answered at once, same generation.
    for version in range(1, 10):
        reason = f"joining again at v{version}" if version >= 8 else None
        again = member.ask(join_request(version, member.group, member.member_id, reason))
        assert (again.error_code, again.generation_id) == (0, member.generation)
        assert (again.member_id, again.leader, again.protocol_name) == (
            member.member_id,
            member.member_id,
            "range",
        )
        assert [m.member_id for m in again.members] == [member.member_id]
        if version >= 7:
            assert again.protocol_type == "consumer"
        if version >= 9:
            assert again.skip_assignment is False
    eventually(
        lambda: "client reason: joining again at v9" in cluster.log_of(member.node),
        "the v9 join's reason in the coordinator's log",
    )
    assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member.member_id, ASSIGNMENT)]
    synced = member.ask(sync_request(member, 0, assignments=assignments))
    assert (synced.error_code, synced.assignment) == (0, ASSIGNMENT)
    for version in range(1, 6):
        again = member.ask(sync_request(member, version))
        assert (again.error_code, again.assignment) == (0, ASSIGNMENT)
        if version >= 5:
            assert (again.protocol_type, again.protocol_name) == ("consumer", "range")
    # v5 names the protocol: one that is not the group's is refused (KIP-559).
    for wrong in ({"protocol_name": "roundrobin"}, {"protocol_type": "connect"}):
        refused = member.ask(sync_request(member, 5, **wrong))
        assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    unnamed = member.ask(sync_request(member, 5, protocol_type=None, protocol_name=None))
    assert (unnamed.error_code, unnamed.assignment) == (0, ASSIGNMENT)
    for version in range(5):
        beat = HeartbeatRequest(
            version=version,
            group_id=member.group,
            generation_id=member.generation,
            member_id=member.member_id,
            group_instance_id=None,
        )
        assert member.ask(beat).error_code == 0


@pytest.mark.parametrize("version", range(6))
def test_leave_at_every_version(cluster: LiveCluster, member: Member, version: int) -> None:
    reason = f"leaving at v{version}"
    identity = LeaveGroupRequest.MemberIdentity(
        member_id=member.member_id, group_instance_id=None, reason=reason
    )
    left = member.ask(
        LeaveGroupRequest(
            version=version, group_id=member.group, member_id=member.member_id, members=[identity]
        )
    )
    assert left.error_code == 0
    if version >= 3:
        assert [(m.member_id, m.error_code) for m in left.members] == [(member.member_id, 0)]
    described = member.ask(DescribeGroupsRequest(version=0, groups=[member.group]))
    assert (described.groups[0].group_state, described.groups[0].members) == ("Empty", [])
    if version >= 5:
        eventually(
            lambda: f"client reason: {reason}" in cluster.log_of(member.node),
            "the v5 leave's reason in the coordinator's log",
        )


# ---------------------------------------------------------------------- offsets --------
def commit_request(member: Member, version: int, offsets: dict[int, int], **named: Any) -> Any:
    """OffsetCommit of `offsets` (partition -> offset) of TOPIC, by name unless `named`
    gives its `topic_id` (v10)."""
    partitions = [
        CommitTopic.OffsetCommitRequestPartition(
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=-1,
            committed_metadata=f"v{version}",
        )
        for p, o in offsets.items()
    ]
    return OffsetCommitRequest(
        version=version,
        group_id=member.group,
        generation_id_or_member_epoch=member.generation,
        member_id=member.member_id,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[CommitTopic(**(named or {"name": TOPIC}), partitions=partitions)],
    )


def committed(member: Member, version: int) -> dict[int, tuple[int, str]]:
    """(offset, metadata) of each partition of TOPIC, by OffsetFetch `version` (1-9)."""
    names = [OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])]
    groups = [FetchGroup(group_id=member.group, member_id=None, topics=[
        FetchGroup.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0, 1])
    ])]  # fmt: skip
    answer = member.ask(
        OffsetFetchRequest(
            version=version, group_id=member.group, topics=names, groups=groups, require_stable=True
        )
    )
    if version >= 8:
        [group] = answer.groups
        assert (group.group_id, group.error_code) == (member.group, 0)
        topics = group.topics
    else:
        assert version < 2 or answer.error_code == 0
        topics = answer.topics
    [found] = topics
    assert found.name == TOPIC
    assert all(p.error_code == 0 for p in found.partitions)
    return {p.partition_index: (p.committed_offset, p.metadata) for p in found.partitions}


def topic_id_of(member: Member) -> uuid.UUID:
    """TOPIC's id, as OffsetFetch v10 names it once `member`'s group has an offset in it."""
    assert member.ask(commit_request(member, 9, {0: 1})).topics[0].partitions[0].error_code == 0
    whole = OffsetFetchRequest(version=10, groups=[FetchGroup(group_id=member.group, topics=None)])
    [group] = member.ask(whole).groups
    [topic] = group.topics
    assert isinstance(topic.topic_id, uuid.UUID)
    return topic.topic_id


def test_commit_and_fetch_at_every_version(stable: Member) -> None:
    member = stable
    for version in range(2, 10):
        offsets = {0: 10 * version, 1: 10 * version + 1}
        answer = member.ask(commit_request(member, version, offsets))
        [topic] = answer.topics
        assert topic.name == TOPIC
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0), (1, 0)]
        assert committed(member, 1) == {p: (o, f"v{version}") for p, o in offsets.items()}
    for version in range(1, 10):
        assert committed(member, version) == {0: (90, "v9"), 1: (91, "v9")}
    # v7+ RequireStable: nothing is ever pending, answered as usual (above); v9's member
    # id and epoch are for KIP-848 groups: a classic group ignores them, as Kafka does.
    request = OffsetFetchRequest(
        version=9,
        groups=[
            FetchGroup(group_id=member.group, member_id="someone", member_epoch=7, topics=None)
        ],
        require_stable=False,
    )
    [group] = member.ask(request).groups
    assert [(p.partition_index, p.committed_offset) for p in group.topics[0].partitions] == [
        (0, 90),
        (1, 91),
    ]


def test_offset_fetch_batched_from_v8_answers_each_group(
    cluster: LiveCluster, stable: Member
) -> None:
    member = stable
    assert member.ask(commit_request(member, 8, {0: 5})).topics[0].partitions[0].error_code == 0
    here, there = other_groups(cluster, member.node, "batched")
    asked = [FetchGroup.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0, 1])]
    for version in (8, 9):
        request = OffsetFetchRequest(
            version=version,
            groups=[
                FetchGroup(group_id=member.group, topics=None),  # null: every partition
                FetchGroup(group_id=member.group, topics=asked),
                FetchGroup(group_id=here, topics=asked),  # no offsets: -1, no error
                FetchGroup(group_id=there, topics=asked),  # another node's group
            ],
            require_stable=False,
        )
        answer = member.ask(request)
        got = {
            (g.group_id, i): (
                g.error_code,
                [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                 for t in g.topics],
            )
            for i, g in enumerate(answer.groups)
        }  # fmt: skip
        assert got == {
            (member.group, 0): (0, [(TOPIC, [(0, 5)])]),
            (member.group, 1): (0, [(TOPIC, [(0, 5), (1, -1)])]),
            (here, 2): (0, [(TOPIC, [(0, -1), (1, -1)])]),
            (there, 3): (ErrorCode.NOT_COORDINATOR, []),
        }


def test_offsets_by_topic_id_at_v10(stable: Member) -> None:
    member = stable
    assert (
        member.ask(commit_request(member, 9, {0: 7, 1: 8})).topics[0].partitions[0].error_code == 0
    )
    # Every partition of the group (Topics null): named by id at v10.
    whole = OffsetFetchRequest(version=10, groups=[FetchGroup(group_id=member.group, topics=None)])
    [group] = member.ask(whole).groups
    [listed] = group.topics
    topic_id = listed.topic_id
    assert isinstance(topic_id, uuid.UUID) and topic_id.int > 1
    assert [(p.partition_index, p.committed_offset) for p in listed.partitions] == [(0, 7), (1, 8)]
    # A commit by id is stored by name: v9 reads it by name.
    answer = member.ask(commit_request(member, 10, {0: 500, 1: 501}, topic_id=topic_id))
    [topic] = answer.topics
    assert topic.topic_id == topic_id
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0), (1, 0)]
    assert committed(member, 9) == {0: (500, "v10"), 1: (501, "v10")}
    unknown = uuid.uuid4()
    by_id = [
        FetchGroup.OffsetFetchRequestTopics(topic_id=topic_id, partition_indexes=[0, 1]),
        FetchGroup.OffsetFetchRequestTopics(topic_id=unknown, partition_indexes=[0]),
    ]
    request = OffsetFetchRequest(
        version=10, groups=[FetchGroup(group_id=member.group, topics=by_id)]
    )
    [group] = member.ask(request).groups
    got = [
        (t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
        for t in group.topics
    ]
    assert got == [
        (topic_id, [(0, 500, 0), (1, 501, 0)]),
        (unknown, [(0, -1, ErrorCode.UNKNOWN_TOPIC_ID)]),
    ]
    # An id no topic has: UNKNOWN_TOPIC_ID for each of its partitions, nothing stored.
    answer = member.ask(commit_request(member, 10, {0: 1, 1: 2}, topic_id=unknown))
    [topic] = answer.topics
    assert topic.topic_id == unknown
    codes = [(p.partition_index, p.error_code) for p in topic.partitions]
    assert codes == [(0, ErrorCode.UNKNOWN_TOPIC_ID), (1, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert committed(member, 9) == {0: (500, "v10"), 1: (501, "v10")}


def test_a_commit_to_a_group_that_does_not_exist(cluster: LiveCluster, stable: Member) -> None:
    """v9+: GROUP_ID_NOT_FOUND (KIP-848); below: UNKNOWN_MEMBER_ID, as tidelog answered."""
    here, _ = other_groups(cluster, stable.node, "unborn")
    stranger = Member(here, stable.node, stable.connection, "nobody", 1)
    topic_id = topic_id_of(stable)
    for version in range(2, 11):
        named = {"topic_id": topic_id} if version >= 10 else {}
        answer = stable.ask(commit_request(stranger, version, {0: 3}, **named))
        expected = ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.UNKNOWN_MEMBER_ID
        assert answer.topics[0].partitions[0].error_code == expected, version


# ---------------------------------------------------------------------- describe, list -
def test_describe_and_list_at_every_version(cluster: LiveCluster, stable: Member) -> None:
    missing, _ = other_groups(cluster, stable.node, "missing")
    for version in range(7):
        request = DescribeGroupsRequest(
            version=version, groups=[stable.group, missing], include_authorized_operations=False
        )
        found, absent = stable.ask(request).groups
        assert (found.error_code, found.group_id, found.group_state) == (0, stable.group, "Stable")
        assert (found.protocol_type, found.protocol_data) == ("consumer", "range")
        [described] = found.members
        assert (described.member_id, described.member_assignment) == (stable.member_id, ASSIGNMENT)
        assert (absent.group_id, absent.group_state, absent.members) == (missing, "Dead", [])
        if version >= 6:
            assert absent.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert absent.error_message == f"Group {missing} not found."
        else:
            assert absent.error_code == 0
    for version in range(6):
        listed = stable.ask(ListGroupsRequest(version=version))
        assert listed.error_code == 0
        [mine] = [g for g in listed.groups if g.group_id == stable.group]
        assert mine.protocol_type == "consumer"
        if version >= 4:
            assert mine.group_state == "Stable"
        if version >= 5:
            assert mine.group_type == "classic"
    for version, filters, shown in [
        (4, {"states_filter": [" stable "]}, True),
        (4, {"states_filter": ["Empty"]}, False),
        (5, {"types_filter": ["Classic"]}, True),
        (5, {"types_filter": ["consumer"]}, False),
        (5, {"states_filter": ["Stable"], "types_filter": ["share", "classic"]}, True),
    ]:
        listed = stable.ask(ListGroupsRequest(version=version, **filters))
        assert (stable.group in {g.group_id for g in listed.groups}) is shown, filters
