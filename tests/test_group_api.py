"""The consumer-group APIs at the protocol edge (server/group_api.py), in one process: each
request is encoded by kafka-python's client, decoded by the server codec, answered by its
handler over a fake broker and coordinator, and the answer read back by the client, at every
version tidelog serves. The coordinator's rules are tested elsewhere (test_groups_*); here,
what each version adds or changes, and that every answer, error ones included, encodes."""

from __future__ import annotations

import uuid
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

from round_trip import round_trip
from tidelog.groups.group import Group
from tidelog.groups.messages import CommittedOffset, GroupError, JoinResult
from tidelog.groups.state import GroupState
from tidelog.protocol.kafka import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import Authorizer
from tidelog.server.group_api import GROUP_HANDLERS
from tidelog.server.groups import group_partition
from tidelog.server.metadata import OFFSETS_TOPIC, MetadataImage, TopicInfo, topic_id_of

OFFSETS_PARTITIONS = 4
TOPIC = "orders"
TOPIC_ID = topic_id_of(7, TOPIC)
PORTS = {1: 9092, 2: 9093, 3: 9094}
GROUP_APIS = [
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
]


def test_the_group_apis_are_served_at_every_version_kafka_python_defines() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.JOIN_GROUP] == (0, 9)
    assert SUPPORTED_VERSIONS[ApiKey.SYNC_GROUP] == (0, 5)
    assert SUPPORTED_VERSIONS[ApiKey.HEARTBEAT] == (0, 4)
    assert SUPPORTED_VERSIONS[ApiKey.LEAVE_GROUP] == (0, 5)
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_COMMIT] == (2, 10)
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_FETCH] == (1, 10)
    assert SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR] == (0, 6)
    assert SUPPORTED_VERSIONS[ApiKey.DESCRIBE_GROUPS] == (0, 6)
    assert SUPPORTED_VERSIONS[ApiKey.LIST_GROUPS] == (0, 5)


class FakeCoordinator:
    """What the handlers ask of a `GroupCoordinator`. With `error` set every request fails
    with it; else a member joins generation 1 alone and offsets are kept as committed."""

    def __init__(self) -> None:
        self.error: ErrorCode | None = None
        self.loaded = True
        self.groups: dict[str, Group] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.asked: list[tuple[str, Any]] = []

    def check_serving(self) -> None:
        if self.error is not None:
            raise GroupError(self.error)

    def has_group(self, group_id: str) -> bool:
        self.check_serving()
        return group_id in self.groups

    async def join(self, group_id: str, **fields: Any) -> JoinResult:
        self.check_serving()
        self.asked.append(("join", fields))
        return JoinResult(1, "range", "m-1", "m-1", [("m-1", None, b"sub")], "consumer")

    async def sync(self, group_id: str, **fields: Any) -> tuple[str, str, bytes]:
        self.check_serving()
        self.asked.append(("sync", fields))
        return "consumer", "range", b"assignment"

    def heartbeat(self, group_id: str, **fields: Any) -> None:
        self.check_serving()

    def leave(
        self, group_id: str, member_ids: list[str], reasons: Any = (), instance_ids: Any = ()
    ) -> list[ErrorCode]:
        self.check_serving()
        self.asked.append(("leave", reasons))
        return [ErrorCode.NONE] * len(member_ids)

    async def commit(self, group_id: str, **fields: Any) -> dict[tuple[str, int], ErrorCode]:
        self.check_serving()
        offsets: dict[tuple[str, int], tuple[int, int, str]] = fields["offsets"]
        for key, (offset, epoch, metadata) in offsets.items():
            self.offsets[key] = CommittedOffset(offset, epoch, metadata, 0)
        return dict.fromkeys(offsets, ErrorCode.NONE)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None, *, now_ms: int
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        self.check_serving()
        if partitions is None:
            return dict(self.offsets)
        return {key: self.offsets.get(key) for key in partitions}


class FakeBroker:
    """The `BrokerView` the group handlers use: node 1 of 3, no ACLs, one topic; node 1
    leads every `__consumer_offsets` partition but `leaderless`."""

    def __init__(self) -> None:
        self.node_id = 1
        self.kafka_hosts = {1: "127.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"}
        self.kafka_ports = PORTS
        self.authorizer = Authorizer(enabled=False, super_users=frozenset())
        self.image = MetadataImage()
        self.image.topics[OFFSETS_TOPIC] = TopicInfo(
            OFFSETS_TOPIC, ((1, 2, 3),) * OFFSETS_PARTITIONS, topic_id_of(0, OFFSETS_TOPIC)
        )
        self.image.topics[TOPIC] = TopicInfo(TOPIC, ((1, 2, 3), (2, 3, 1)), TOPIC_ID)
        self.leaderless: set[int] = set()
        self.coordinator = FakeCoordinator()
        self.coordinators = dict.fromkeys(range(OFFSETS_PARTITIONS), self.coordinator)

    def leader_of(self, key: Any) -> tuple[int, int]:
        return (-1, -1) if key.partition in self.leaderless else (2, 5)


def ask(broker: FakeBroker, sent: Any) -> Any:
    return round_trip(GROUP_HANDLERS, broker, sent)


def commit_topic(version: int, partitions: list[int], topic_id: uuid.UUID = TOPIC_ID) -> Any:
    cls = OffsetCommitRequest.OffsetCommitRequestTopic
    return cls(
        name=TOPIC,
        topic_id=topic_id,
        partitions=[
            cls.OffsetCommitRequestPartition(
                partition_index=p,
                committed_offset=10 + p,
                committed_leader_epoch=-1,
                committed_metadata=None,
            )
            for p in partitions
        ],
    )


def group_request(api_key: ApiKey, version: int) -> Any:
    """A request of `api_key` at `version` with every field given, for group `g`."""
    fetched = [OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]
    group_topics = [
        OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
            name=TOPIC, topic_id=TOPIC_ID, partition_indexes=[0]
        )
    ]
    common = {"version": version, "group_id": "g", "member_id": "m-1", "group_instance_id": None}
    requests = {
        ApiKey.FIND_COORDINATOR: lambda: FindCoordinatorRequest(
            version=version, key="g", key_type=0, coordinator_keys=["g", "h"]
        ),
        ApiKey.JOIN_GROUP: lambda: JoinGroupRequest(
            **common,
            session_timeout_ms=6000,
            rebalance_timeout_ms=6000,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"s")],
            reason="because",
        ),
        ApiKey.SYNC_GROUP: lambda: SyncGroupRequest(
            **common,
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment("m-1", b"a")],
        ),
        ApiKey.HEARTBEAT: lambda: HeartbeatRequest(**common, generation_id=1),
        ApiKey.LEAVE_GROUP: lambda: LeaveGroupRequest(
            version=version,
            group_id="g",
            member_id="m-1",
            members=[LeaveGroupRequest.MemberIdentity("m-1", None, "done")],
        ),
        ApiKey.OFFSET_COMMIT: lambda: OffsetCommitRequest(
            **common,
            generation_id_or_member_epoch=1,
            retention_time_ms=-1,
            topics=[commit_topic(version, [0, 1])],
        ),
        ApiKey.OFFSET_FETCH: lambda: OffsetFetchRequest(
            version=version,
            group_id="g",
            topics=fetched,
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=group_topics),
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id="h", topics=None),
            ],
            require_stable=True,
        ),
        ApiKey.DESCRIBE_GROUPS: lambda: DescribeGroupsRequest(
            version=version, groups=["g", "h"], include_authorized_operations=True
        ),
        ApiKey.LIST_GROUPS: lambda: ListGroupsRequest(
            version=version, states_filter=["Stable"], types_filter=["classic"]
        ),
    }
    return requests[api_key]()


EVERY_VERSION = [
    (api_key, version)
    for api_key in GROUP_APIS
    for version in range(SUPPORTED_VERSIONS[api_key][0], SUPPORTED_VERSIONS[api_key][1] + 1)
]


@pytest.mark.parametrize(("api_key", "version"), EVERY_VERSION)
@pytest.mark.parametrize("error", [None, ErrorCode.NOT_COORDINATOR])
def test_every_answer_encodes_at_every_version(
    api_key: ApiKey, version: int, error: ErrorCode | None
) -> None:
    broker = FakeBroker()
    broker.coordinator.error = error
    broker.coordinator.groups["g"] = Group("g", GroupState.STABLE, 1, "consumer", "range")
    answer = ask(broker, group_request(api_key, version))
    assert version == answer.API_VERSION


def test_find_coordinator_answers_each_key_from_v4() -> None:
    broker = FakeBroker()
    broker.leaderless = {group_partition("lost", OFFSETS_PARTITIONS)}
    assert group_partition("g", OFFSETS_PARTITIONS) not in broker.leaderless
    for version in range(4):
        answer = ask(broker, FindCoordinatorRequest(version=version, key="g", key_type=0))
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
            0,
            2,
            "10.0.0.2",
            9093,
        )
    keys = ["g", "lost"]
    for version in range(4, 7):
        answer = ask(broker, FindCoordinatorRequest(version=version, coordinator_keys=keys))
        got = [(c.key, c.error_code, c.node_id, c.port) for c in answer.coordinators]
        assert got == [
            ("g", 0, 2, 9093),
            ("lost", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1),
        ]
    # Transactions (1): none in tidelog, at every version; share groups (2, KIP-932) and
    # unknown types: INVALID_REQUEST, as Kafka answers them.
    for key_type, code in [
        (1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (2, ErrorCode.INVALID_REQUEST),
        (5, ErrorCode.INVALID_REQUEST),
    ]:
        answer = ask(broker, FindCoordinatorRequest(version=3, key="k", key_type=key_type))
        assert (answer.error_code, answer.node_id) == (code, -1)
        request = FindCoordinatorRequest(version=6, key_type=key_type, coordinator_keys=["k"])
        [found] = ask(broker, request).coordinators
        assert (found.key, found.error_code, found.node_id) == ("k", code, -1)


def test_join_sync_and_leave_pass_what_their_versions_add() -> None:
    broker = FakeBroker()
    for version in range(10):
        answer = ask(broker, group_request(ApiKey.JOIN_GROUP, version))
        assert (answer.error_code, answer.protocol_name) == (0, "range")
        assert answer.to_dict().get("protocol_type") == ("consumer" if version >= 7 else None)
    reasons = [fields["reason"] for what, fields in broker.coordinator.asked if what == "join"]
    assert reasons == [None] * 8 + ["because"] * 2
    broker.coordinator.asked.clear()
    for version in range(6):
        answer = ask(broker, group_request(ApiKey.SYNC_GROUP, version))
        assert (answer.error_code, answer.assignment) == (0, b"assignment")
    named = [(f["protocol_type"], f["protocol"]) for _, f in broker.coordinator.asked]
    assert named == [(None, None)] * 5 + [("consumer", "range")]
    broker.coordinator.asked.clear()
    for version in range(6):
        answer = ask(broker, group_request(ApiKey.LEAVE_GROUP, version))
        assert answer.error_code == 0
    reasons = [given for _, given in broker.coordinator.asked]
    assert reasons == [()] * 3 + [(None,)] * 2 + [("done",)]


def test_offset_commit_by_topic_id_at_v10() -> None:
    broker = FakeBroker()
    broker.coordinator.groups["g"] = Group("g", GroupState.STABLE, 1, "consumer", "range")
    unknown = uuid.uuid4()
    request = group_request(ApiKey.OFFSET_COMMIT, 10)
    request.topics.append(commit_topic(10, [0], unknown))
    answer = ask(broker, request)
    got = [
        (t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in answer.topics
    ]
    assert got == [(TOPIC_ID, [(0, 0), (1, 0)]), (unknown, [(0, ErrorCode.UNKNOWN_TOPIC_ID)])]
    assert set(broker.coordinator.offsets) == {(TOPIC, 0), (TOPIC, 1)}  # stored by name


@pytest.mark.parametrize("version", range(2, 11))
def test_offset_commit_to_a_group_that_does_not_exist(version: int) -> None:
    """With a generation: GROUP_ID_NOT_FOUND from v9 (KIP-848); below, the coordinator
    answers (here, the fake takes it). Without one (a standalone commit), always taken."""
    for generation, refused in [(1, version >= 9), (-1, False)]:
        broker = FakeBroker()
        request = group_request(ApiKey.OFFSET_COMMIT, version)
        request.generation_id_or_member_epoch = generation
        answer = ask(broker, request)
        codes = {p.error_code for t in answer.topics for p in t.partitions}
        assert codes == {ErrorCode.GROUP_ID_NOT_FOUND if refused else ErrorCode.NONE}


def test_offset_fetch_answers_each_group_from_v8_and_topics_by_id_at_v10() -> None:
    broker = FakeBroker()
    broker.coordinator.offsets[(TOPIC, 0)] = CommittedOffset(42, 3, "meta", 0)
    broker.coordinator.offsets[("deleted", 0)] = CommittedOffset(9, -1, "", 0)
    for version in range(8, 11):
        [asked, everything] = ask(broker, group_request(ApiKey.OFFSET_FETCH, version)).groups
        assert (asked.group_id, asked.error_code, everything.group_id) == ("g", 0, "h")
        [topic] = asked.topics
        assert (topic.name if version < 10 else topic.topic_id) == (
            TOPIC if version < 10 else TOPIC_ID
        )
        [part] = topic.partitions
        assert (part.committed_offset, part.committed_leader_epoch, part.metadata) == (
            42,
            3,
            "meta",
        )
        listed = [t.name if version < 10 else t.topic_id for t in everything.topics]
        # v10 names topics by id: one that no longer exists has none, and is left out.
        assert listed == ([TOPIC, "deleted"] if version < 10 else [TOPIC_ID])
    request = group_request(ApiKey.OFFSET_FETCH, 10)
    unknown = uuid.uuid4()
    request.groups[0].topics[0].topic_id = unknown
    [asked, _] = ask(broker, request).groups
    [topic] = asked.topics
    [part] = topic.partitions
    assert (topic.topic_id, part.committed_offset, part.error_code) == (
        unknown,
        -1,
        ErrorCode.UNKNOWN_TOPIC_ID,
    )


def test_describe_and_list_groups_at_their_new_versions() -> None:
    broker = FakeBroker()
    broker.coordinator.groups["g"] = Group("g", GroupState.STABLE, 1, "consumer", "range")
    for version in range(7):
        found, absent = ask(broker, group_request(ApiKey.DESCRIBE_GROUPS, version)).groups
        assert (found.group_id, found.error_code, found.group_state) == ("g", 0, "Stable")
        assert (absent.group_id, absent.group_state) == ("h", "Dead")
        if version >= 6:
            assert (absent.error_code, absent.error_message) == (
                ErrorCode.GROUP_ID_NOT_FOUND,
                "Group h not found.",
            )
        else:
            assert absent.error_code == 0
    broker.coordinators = {0: broker.coordinator}  # ListGroups asks every coordinator
    for filters, shown in [
        ({}, True),
        ({"types_filter": ["CLASSIC"]}, True),
        ({"types_filter": ["consumer", "share"]}, False),
        ({"states_filter": ["  stable"], "types_filter": ["classic"]}, True),
        ({"states_filter": ["empty"]}, False),
    ]:
        answer = ask(broker, ListGroupsRequest(version=5, **filters))
        listed = [(g.group_id, g.group_state, g.group_type) for g in answer.groups]
        assert listed == ([("g", "Stable", "classic")] if shown else []), filters
