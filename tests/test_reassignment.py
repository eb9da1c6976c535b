"""Partition reassignment (KIP-455) in the metadata image: the pure state machine of
server/reassignment.py, and the commands every node applies (`alter_reassignments`, a
leader's `partition_state` naming its committed voter set), in quorum mode and in ISR mode
(core/isr.py's `reassigned`). What the broker does with a change is tested live
(tests/test_reassign_live.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)

from round_trip import round_trip
from tidelog.core.isr import NO_LEADER, PartitionRecord, reassigned
from tidelog.errors import MetadataError
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import ForwardRequest
from tidelog.server.acl import Authorizer
from tidelog.server.broker import forwarded_command
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.server.reassign_api import REASSIGN_HANDLERS
from tidelog.server.reassignment import (
    Assignment,
    cancel,
    is_done,
    on_voters,
    submit,
    target_of,
)
from tidelog.types import Epoch, NodeId

KEY = ("t", 0)
NODES = (1, 2, 3, 4, 5)


def nodes(*ids: int) -> tuple[NodeId, ...]:
    return tuple(NodeId(n) for n in ids)


class Log:
    """A metadata image fed commands at increasing offsets: nodes 1-5 registered, topic t
    on replicas 1, 2, 3 (`mode`: quorum or isr)."""

    def __init__(self, mode: str = "quorum", **configs: str) -> None:
        self.image = MetadataImage()
        self.offset = 0
        for node in NODES:
            self.apply(type="register_broker", node=node, clean=False, incarnation=f"n{node}")
        self.apply(
            type="create_topic",
            name="t",
            replicas=[[1, 2, 3]],
            configs={"replication.mode": mode, **configs},
        )

    def apply(self, **fields: Any) -> Any:
        change = self.image.apply(self.offset, encode_command(fields))
        self.offset += 1
        return change

    def move(self, replicas: list[int] | None) -> Any:
        entry = {"topic": "t", "partition": 0, "replicas": replicas}
        return self.apply(type="alter_reassignments", partitions=[entry])

    def report(
        self, voters: list[int] | None, *, version: int | None = None, leader: int = 1, **extra: Any
    ) -> Any:
        isr = extra.pop("isr", [leader])
        return self.apply(
            type="partition_state",
            topic="t",
            partition=0,
            leader=leader,
            epoch=extra.pop("epoch", 1),
            isr=isr,
            voters=voters,
            version=version,
        )

    @property
    def state(self) -> Assignment:
        return self.image.assignment(KEY)

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.image.topics["t"].replicas[0]

    @property
    def record(self) -> PartitionRecord:
        return self.image.records[KEY]


# ---------------------------------------------------------------------- the state machine
def test_a_move_keeps_its_original_replicas_and_only_adds_voters() -> None:
    moving = submit(Assignment((1, 2, 3)), (2, 3, 4), version=10)
    assert moving.replicas == (2, 3, 4, 1)  # Kafka's: target + removing
    assert (moving.adding, moving.removing) == ((4,), (1,))
    assert moving.members == (2, 3, 4, 1)
    assert set(moving.voter_target) == {1, 2, 3, 4}  # nothing is removed yet
    again = submit(moving, (2, 3, 5), version=11)  # incremental: R0 stays {1, 2, 3}
    assert again.original == (1, 2, 3)
    assert (again.adding, again.removing) == ((5,), (1,))
    assert again.retiring == (4,)  # it may have become a voter: it stays until it is not
    assert set(again.members) == {1, 2, 3, 4, 5}


def test_completion_waits_for_every_target_node_in_the_committed_voters() -> None:
    moving = submit(Assignment((1, 2, 3)), (2, 3, 4), version=10)
    assert on_voters(moving, (1, 2, 3), 10, version=11) == moving
    done = on_voters(moving, (1, 2, 3, 4), 10, version=12)
    assert not done.moving
    assert done.replicas == (2, 3, 4)
    assert done.retiring == (1,)
    assert done.voter_target == (2, 3, 4)  # now the leader removes node 1
    # Node 1 goes only on a report of the leader holding this very assignment.
    assert on_voters(done, (2, 3, 4), 10, version=13) == done
    gone = on_voters(done, (2, 3, 4), 12, version=13)
    assert gone.retiring == ()
    assert gone.members == (2, 3, 4)
    assert on_voters(done, (1, 2, 3, 4), 12, version=13).retiring == (1,)  # still a voter


def test_a_cancel_goes_back_at_once_and_retires_what_it_added() -> None:
    moving = submit(Assignment((1, 2, 3)), (2, 3, 4), version=10)
    back = cancel(moving, version=11)
    assert not back.moving
    assert back.replicas == (1, 2, 3)
    assert back.voter_target == (1, 2, 3)
    assert back.retiring == (4,)
    assert on_voters(back, (1, 2, 3), 11, version=12).retiring == ()


def test_a_target_that_reorders_the_replicas_is_no_move() -> None:
    reordered = submit(Assignment((1, 2, 3)), (3, 1, 2), version=5)
    assert not reordered.moving
    assert reordered.replicas == (3, 1, 2)
    moving = submit(Assignment((1, 2, 3)), (4,), version=5)
    assert submit(moving, (2, 3, 1), version=6).replicas == (2, 3, 1)  # a cancel, reordered


def test_a_shrink_completes_on_voters_it_already_has() -> None:
    moving = submit(Assignment((1, 2, 3)), (1,), version=5)
    done = on_voters(moving, (1, 2, 3), None, version=6)
    assert done.replicas == (1,)
    assert done.retiring == (2, 3)


def test_isr_mode_is_done_when_the_target_is_in_the_isr() -> None:
    moving = submit(Assignment((1, 2, 3)), (2, 3, 4), version=5)
    assert not is_done(moving, (1, 2, 3), 2)
    assert is_done(moving, (1, 2, 3, 4), 2)
    assert not is_done(Assignment((1, 2, 3)), (1, 2, 3), 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "empty replica list"),
        ([1, 1], "more than once"),
        ([1, 9], "broker 9, but no such broker is registered"),
        ("1,2", "a list of node ids"),
        ([True], "a list of node ids"),
    ],
)
def test_a_target_is_checked_as_kafka_checks_it(value: object, message: str) -> None:
    with pytest.raises(MetadataError, match=message) as raised:
        target_of(value, {1, 2, 3})
    assert raised.value.code == "INVALID_REPLICA_ASSIGNMENT"
    assert target_of(None, {1}) is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("submit"), st.lists(st.sampled_from(NODES), min_size=1, unique=True)),
            st.tuples(st.just("cancel"), st.none()),
            st.tuples(st.just("voters"), st.lists(st.sampled_from(NODES), unique=True)),
        ),
        max_size=12,
    )
)
def test_any_history_keeps_the_invariants(steps: list[tuple[str, Any]]) -> None:
    """Replicas are the target and R0 while moving, a retiring copy is never a replica,
    every copy that ever held data stays until a current report says it votes no more,
    and only a report may take a copy away."""
    state = Assignment((1, 2, 3))
    for version, (kind, value) in enumerate(steps, start=1):
        before = state
        if kind == "submit":
            state = submit(state, tuple(value), version=version)
        elif kind == "cancel" and state.moving:
            state = cancel(state, version=version)
        elif kind == "voters":
            state = on_voters(state, tuple(value), before.version, version=version)
        if state.moving:
            assert set(state.replicas) == set(state.target) | set(state.original)
            assert set(state.voter_target) == set(state.replicas)
        assert not set(state.retiring) & set(state.replicas)
        gone = set(before.members) - set(state.members)
        if kind != "voters":
            assert gone == set()  # a change of plan never drops a copy by itself
        else:
            assert not gone & set(value)  # a copy still voting stays


# ---------------------------------------------------------------------- quorum mode ---
def test_quorum_mode_moves_through_the_image() -> None:
    log = Log()
    change = log.move([2, 3, 4])
    assert change.moved == (KEY,)
    assert log.replicas == (2, 3, 4, 1)
    assert log.image.members(KEY) == (2, 3, 4, 1)
    assert log.image.topics["t"].born_of(0)[0] == (1, 2, 3)  # its first voter set
    version = log.state.version
    log.report([1, 2, 3], version=version)
    assert log.state.moving
    change = log.report([1, 2, 3, 4], version=version, isr=[1, 2, 3, 4])
    assert change.moved == (KEY,)
    assert log.replicas == (2, 3, 4)
    assert log.state.retiring == (1,)
    assert log.image.voter_target(KEY) == (2, 3, 4)
    done_version = log.state.version
    log.report([2, 3, 4], version=done_version, leader=2, epoch=2, isr=[2, 3, 4])
    assert log.image.members(KEY) == (2, 3, 4)
    assert log.image.partitions[KEY].isr == (2, 3, 4)


def test_quorum_mode_cancel_terminates_in_the_image() -> None:
    log = Log()
    log.move([2, 3, 4])
    log.move(None)
    assert not log.state.moving
    assert log.replicas == (1, 2, 3)
    assert log.state.retiring == (4,)
    log.report([1, 2, 3], version=log.state.version - 1)  # a leader not yet told
    assert log.state.retiring == (4,)
    log.report([1, 2, 3], version=log.state.version)
    assert log.image.members(KEY) == (1, 2, 3)


def test_a_cancel_without_a_move_is_refused() -> None:
    log = Log()
    with pytest.raises(MetadataError) as raised:
        log.image.check_reassignment("t", 0, None)
    assert raised.value.code == "NO_REASSIGNMENT_IN_PROGRESS"
    for topic, partition in (("nope", 0), ("t", 1), ("t", True)):
        with pytest.raises(MetadataError) as unknown:
            log.image.check_reassignment(topic, partition, [1])
        assert unknown.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
    log.move(None)  # committed anyway: applying it changes nothing
    assert log.replicas == (1, 2, 3)


def test_a_report_naming_a_copy_that_went_changes_nothing() -> None:
    log = Log()
    log.move([2, 3, 4])
    log.report([1, 2, 3, 4], version=log.state.version, isr=[1, 2, 3, 4])
    log.report([2, 3, 4], version=log.state.version, isr=[1, 2, 3, 4])  # 1 went meanwhile
    assert log.image.members(KEY) == (2, 3, 4)
    log.report([2, 3, 4], version=log.state.version, isr=[1, 2, 3, 4], epoch=2)
    assert log.image.partitions[KEY].epoch == 1  # refused: node 1 is no copy now


def test_replication_factor_grows_and_shrinks() -> None:
    log = Log()
    log.move([1])
    log.report([1, 2, 3], version=None, isr=[1, 2, 3])
    assert log.replicas == (1,)
    log.report([1], version=log.state.version)
    assert log.image.members(KEY) == (1,)
    log.move([1, 2, 3, 4])
    assert log.replicas == (1, 2, 3, 4)
    log.report([1, 2, 3, 4], version=log.state.version, isr=[1, 2, 3, 4])
    assert not log.state.moving
    assert log.image.members(KEY) == (1, 2, 3, 4)


def test_a_new_partition_and_a_deleted_topic_keep_their_births() -> None:
    log = Log()
    log.move([2, 3, 4])
    # As Kafka: a new partition has as many replicas as partition 0 has now.
    log.apply(type="create_partitions", name="t", replicas=[[3, 4, 5, 1]])
    info = log.image.topics["t"]
    assert info.born_of(1)[0] == (3, 4, 5, 1)
    assert info.replicas[1] == (3, 4, 5, 1)
    log.apply(type="delete_topic", name="t")
    assert log.image.assignments == {}


def test_the_leaders_report_speaks_for_its_leader_only() -> None:
    report = {"type": "partition_state", "topic": "t", "partition": 0, "leader": 2}
    forged = ForwardRequest(NodeId(3), NodeId(1), 1, (encode_command(report),))
    assert forwarded_command(forged) is None
    honest = ForwardRequest(NodeId(2), NodeId(1), 1, (encode_command(report),))
    assert forwarded_command(honest) == report
    move = {"type": "alter_reassignments", "partitions": []}
    assert forwarded_command(ForwardRequest(NodeId(3), NodeId(1), 1, (encode_command(move),)))


# ---------------------------------------------------------------------- ISR mode ------
def record_of(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int) -> PartitionRecord:
    return PartitionRecord(nodes(*replicas), NodeId(leader), Epoch(3), 7, nodes(*isr))


def test_reassigned_keeps_the_isr_within_the_replicas_and_moves_the_leader() -> None:
    record = record_of((1, 2, 3), (1, 2, 3), 1)
    grown = reassigned(record, nodes(2, 3, 4, 1), min_insync=1)
    assert grown.isr == nodes(2, 3, 1)
    assert (grown.leader, grown.leader_epoch, grown.partition_epoch) == (1, 3, 8)
    shrunk = reassigned(grown, nodes(2, 3, 4), min_insync=1)
    assert shrunk.isr == nodes(2, 3)
    assert (shrunk.leader, shrunk.leader_epoch) == (NO_LEADER, 4)  # elect picks the next
    assert reassigned(shrunk, shrunk.replicas, min_insync=1) is shrunk


def test_isr_mode_moves_when_the_new_replica_joins_the_isr() -> None:
    log = Log("isr")
    assert log.record.leader == 1
    change = log.move([2, 3, 4])
    assert change.records == (KEY,)
    assert log.record.replicas == nodes(2, 3, 4, 1)
    assert log.record.isr == nodes(2, 3, 1)  # node 4 joins through its leader
    assert log.image.members(KEY) == (2, 3, 4, 1)
    record = log.record
    log.apply(
        type="alter_partition",
        topic="t",
        partition=0,
        leader=1,
        leader_epoch=int(record.leader_epoch),
        partition_epoch=record.partition_epoch,
        isr=[1, 2, 3, 4],
    )
    assert not log.state.moving
    assert log.replicas == (2, 3, 4)
    assert log.record.replicas == nodes(2, 3, 4)
    assert log.record.isr == nodes(2, 3, 4)
    assert log.record.leader == 2  # node 1 left: the first of the ISR leads
    assert log.image.members(KEY) == (2, 3, 4)
    _, answer = log.image.answers[KEY]
    assert answer.accepted and answer.record == log.record


def test_isr_mode_cancel_reverts_the_record() -> None:
    log = Log("isr")
    log.move([4, 5])
    assert log.record.isr == nodes(1, 2, 3)
    log.move(None)
    assert log.record.replicas == nodes(1, 2, 3)
    assert log.image.members(KEY) == (1, 2, 3)
    assert not log.state.moving


def test_isr_mode_refuses_a_cancel_that_would_need_an_unclean_election() -> None:
    log = Log("isr")
    log.move([4])
    for node in (1, 2, 3):
        log.apply(type="fence_broker", node=node)
    assert log.record.elr == nodes(3)  # it holds everything: a revert to it is clean
    log.image.check_reassignment("t", 0, None)
    log.apply(type="register_broker", node=3, clean=False, incarnation="again")
    assert (log.record.isr, log.record.elr) == ((), ())
    with pytest.raises(MetadataError) as raised:
        log.image.check_reassignment("t", 0, None)
    assert raised.value.code == "INVALID_REPLICA_ASSIGNMENT"


def test_isr_mode_a_shrink_completes_at_once() -> None:
    log = Log("isr")
    log.move([3])
    assert log.record.replicas == nodes(3)
    assert log.record.isr == nodes(3)
    assert log.record.leader == 3
    assert not log.state.moving


# ---------------------------------------------------------------------- the Kafka APIs
class FakeBroker:
    """The `BrokerView` the reassignment handlers use: the image of a `Log`, and a
    controller that applies each command it is given there."""

    def __init__(self, log: Log, *, authorizer: bool = False) -> None:
        self.log = log
        self.image = log.image
        self.authorizer = Authorizer(enabled=authorizer, super_users=frozenset())
        self.committed: list[dict[str, Any]] = []

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[ErrorCode, None]:
        self.committed.append(command)
        self.log.apply(**command)
        return ErrorCode.NONE, None


def ask(broker: FakeBroker, sent: Any) -> Any:
    return round_trip(REASSIGN_HANDLERS, broker, sent)


def alter_request(
    version: int, moves: Mapping[tuple[str, int], list[int] | None], **extra: Any
) -> Any:
    cls = AlterPartitionReassignmentsRequest.ReassignableTopic
    topics = [
        cls(
            name=topic,
            partitions=[
                cls.ReassignablePartition(partition_index=p, replicas=target)
                for (t, p), target in moves.items()
                if t == topic
            ],
        )
        for topic in dict.fromkeys(t for t, _ in moves)
    ]
    return AlterPartitionReassignmentsRequest[version](timeout_ms=1000, topics=topics, **extra)


def outcomes(answer: Any) -> dict[tuple[str, int], str]:
    return {
        (topic.name, p.partition_index): ErrorCode(p.error_code).name
        for topic in answer.responses
        for p in topic.partitions
    }


@pytest.mark.parametrize("version", [0, 1])
def test_alter_checks_each_partition_as_kafka_and_commits_the_rest(version: int) -> None:
    broker = FakeBroker(Log())
    moves: dict[tuple[str, int], list[int] | None] = {
        ("t", 0): [2, 3, 4],
        ("t", 1): [1],
        ("nope", 0): [1],
        ("t", 5): None,
    }
    answer = ask(broker, alter_request(version, moves))
    assert answer.error_code == 0
    assert outcomes(answer) == {
        ("t", 0): "NONE",
        ("t", 1): "UNKNOWN_TOPIC_OR_PARTITION",
        ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION",
        ("t", 5): "UNKNOWN_TOPIC_OR_PARTITION",
    }
    assert broker.committed == [
        {
            "type": "alter_reassignments",
            "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}],
        }
    ]
    bad = {("t", 0): [1, 1]}
    assert outcomes(ask(broker, alter_request(version, bad))) == {
        ("t", 0): "INVALID_REPLICA_ASSIGNMENT"
    }
    listed = ask(broker, ListPartitionReassignmentsRequest[0](timeout_ms=1000, topics=None))
    [topic] = listed.topics
    [partition] = topic.partitions
    assert (topic.name, partition.partition_index) == ("t", 0)
    assert (partition.replicas, partition.adding_replicas, partition.removing_replicas) == (
        [2, 3, 4, 1],
        [4],
        [1],
    )
    assert outcomes(ask(broker, alter_request(version, {("t", 0): None}))) == {("t", 0): "NONE"}
    assert outcomes(ask(broker, alter_request(version, {("t", 0): None}))) == {
        ("t", 0): "NO_REASSIGNMENT_IN_PROGRESS"
    }
    empty = ask(broker, ListPartitionReassignmentsRequest[0](timeout_ms=1000, topics=None))
    assert empty.topics == []


def test_v1_may_forbid_a_change_of_the_replication_factor() -> None:
    broker = FakeBroker(Log())
    forbidden = alter_request(1, {("t", 0): [1, 2]}, allow_replication_factor_change=False)
    assert outcomes(ask(broker, forbidden)) == {("t", 0): "INVALID_REPLICATION_FACTOR"}
    allowed = alter_request(1, {("t", 0): [4, 2, 3]}, allow_replication_factor_change=False)
    assert outcomes(ask(broker, allowed)) == {("t", 0): "NONE"}


def test_both_apis_want_the_cluster_as_kafka_does() -> None:
    broker = FakeBroker(Log(), authorizer=True)  # no ACLs: the anonymous client may not
    denied = ask(broker, alter_request(0, {("t", 0): [2, 3, 4]}))
    assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert broker.committed == []
    listed = ask(broker, ListPartitionReassignmentsRequest[0](timeout_ms=1000, topics=None))
    assert listed.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_retiring_copy_keeps_its_node_registered() -> None:
    """UnregisterBroker is refused while the node keeps a copy a move removed (retiring:
    its leader has not yet committed a voter set without it), and taken once it is gone."""
    log = Log()
    log.move([2, 3, 4])
    version = log.state.version
    log.report([1, 2, 3, 4], version=version, isr=[1, 2, 3, 4])
    assert log.state.retiring == (1,)
    log.apply(type="voter_target", voters=[2, 3])
    log.apply(type="unregister_broker", node=1, voters=[2, 3])
    assert 1 not in log.image.membership.unregistered  # refused: node 1 keeps a copy
    log.report([2, 3, 4], version=log.state.version, leader=2, epoch=2, isr=[2, 3, 4])
    log.apply(type="unregister_broker", node=1, voters=[2, 3])
    assert 1 in log.image.membership.unregistered
