"""ISR mode in the metadata image (docs/isr.md): the controller's partition records as every
node applies the committed commands, the topic configs, and the door for forwarded
commands. Each node applies the same log, so each test applies commands and reads the
image; what the broker does with a change is tested live (test_isr_live.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.core.isr import NO_LEADER, PartitionRecord, Refusal
from tidelog.errors import MetadataError
from tidelog.protocol.peer import ForwardRequest
from tidelog.server.broker import forwarded_command
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.server.topic_config import TopicConfig, keep_fixed
from tidelog.types import Epoch, NodeId

KEY = ("t", 0)


def command(**fields: Any) -> bytes:
    return encode_command(fields)


class Log:
    """A metadata image fed commands at increasing offsets."""

    def __init__(self, *, registered: bool = True, **configs: str) -> None:
        """The topic t (replicas 1, 2, 3), created after its nodes' first registrations
        (`registered`) or before them."""
        self.image = MetadataImage()
        self.offset = 0
        for node in (1, 2, 3) if registered else ():
            self.apply(type="register_broker", node=node, clean=False, incarnation=f"n{node}")
        self.apply(
            type="create_topic",
            name="t",
            replicas=[[1, 2, 3]],
            configs={"replication.mode": "isr", **configs},
        )

    def apply(self, **fields: Any) -> tuple[tuple[str, int], ...]:
        change = self.image.apply(self.offset, command(**fields))
        self.offset += 1
        return change.records

    @property
    def record(self) -> PartitionRecord:
        return self.image.records[KEY]

    def alter(self, isr: list[int], *, leader: int | None = None, epoch: int | None = None,
              partition_epoch: int | None = None) -> tuple[tuple[str, int], ...]:  # fmt: skip
        record = self.record
        return self.apply(
            type="alter_partition",
            topic="t",
            partition=0,
            leader=int(record.leader) if leader is None else leader,
            leader_epoch=int(record.leader_epoch) if epoch is None else epoch,
            partition_epoch=record.partition_epoch if partition_epoch is None else partition_epoch,
            isr=isr,
        )


def nodes(*ids: int) -> tuple[NodeId, ...]:
    return tuple(NodeId(n) for n in ids)


# ---------------------------------------------------------------------- configs -------
def test_isr_mode_configs_parse_and_default() -> None:
    config = TopicConfig.parse(
        {"replication.mode": " ISR ", "unclean.leader.election.enable": "true"},
        replication_factor=3,
    )
    assert config.isr_mode and config.unclean_leader_election
    assert config.min_insync(3) == 1  # Kafka's default in ISR mode
    assert TopicConfig().min_insync(3) == 2  # a majority in quorum mode
    assert TopicConfig.parse({}, replication_factor=3).replication_mode == "quorum"


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"replication.mode": "raft"},
            "Invalid value raft for configuration replication.mode: String must be one of: "
            "quorum, isr",
        ),
        (
            {"unclean.leader.election.enable": "yes"},
            "Invalid value yes for configuration unclean.leader.election.enable: Expected "
            "value to be either true or false",
        ),
    ],
)
def test_bad_isr_configs_are_refused(configs: dict[str, str], message: str) -> None:
    with pytest.raises(MetadataError) as refused:
        TopicConfig.parse(configs, replication_factor=3)
    assert refused.value.code == "INVALID_CONFIG"
    assert str(refused.value) == message


def test_the_replication_mode_is_fixed_at_creation() -> None:
    keep_fixed({"replication.mode": "isr"}, {"replication.mode": "isr", "retention.ms": "1"})
    keep_fixed({}, {"replication.mode": "quorum"})  # the default, spelt out
    for held, wanted in (({"replication.mode": "isr"}, {}), ({}, {"replication.mode": "isr"})):
        with pytest.raises(MetadataError, match="fixed when a topic is created"):
            keep_fixed(held, wanted)


# ---------------------------------------------------------------------- records -------
def test_a_new_isr_topic_has_a_record_led_by_its_first_live_replica() -> None:
    log = Log()
    assert log.record == PartitionRecord(nodes(1, 2, 3), NodeId(1), Epoch(1), 1, nodes(1, 2, 3))
    quorum = MetadataImage()
    quorum.apply(0, command(type="create_topic", name="q", replicas=[[1, 2, 3]]))
    assert quorum.records == {}  # quorum mode: the replicas elect


def test_a_new_partition_skips_a_fenced_node() -> None:
    log = Log()
    log.apply(type="fence_broker", node=2)
    log.apply(type="create_partitions", name="t", replicas=[[2, 3, 1]])
    assert log.image.records[("t", 1)].leader == 3


def test_alter_partition_applies_a_current_proposal_and_refuses_a_stale_one() -> None:
    log = Log()
    assert log.alter([1, 2]) == (KEY,)  # shrink: 3 lags
    assert log.record.isr == nodes(1, 2)
    assert log.record.partition_epoch == 2
    proposal, result = log.image.answers[KEY]
    assert result.accepted and result.record == log.record and proposal.isr == nodes(1, 2)
    # isr-02: a proposal made against the record before the shrink is refused.
    assert log.alter([1, 2, 3], partition_epoch=1) == ()
    assert log.image.answers[KEY][1].refusal is Refusal.INVALID_UPDATE_VERSION
    assert log.record.isr == nodes(1, 2)
    # Not from the leader; an older leader epoch.
    log.alter([1, 2, 3], leader=2)
    assert log.image.answers[KEY][1].refusal is Refusal.INVALID_REQUEST
    log.alter([1, 2, 3], epoch=0)
    assert log.image.answers[KEY][1].refusal is Refusal.FENCED_LEADER_EPOCH
    assert log.record.partition_epoch == 2


def test_a_fenced_leader_is_replaced_from_the_isr_and_an_offline_partition_comes_back() -> None:
    log = Log()
    log.alter([1, 3])
    assert log.apply(type="fence_broker", node=1) == (KEY,)
    assert (log.record.leader, log.record.isr) == (3, nodes(3))  # 2 was not in the ISR
    assert log.record.leader_epoch > 1
    log.apply(type="fence_broker", node=3)  # min.insync=1: 3 held everything; nobody else
    assert log.record.leader == NO_LEADER
    assert log.record.elr == nodes(3)
    log.apply(type="unfence_broker", node=2)  # 2 is no ISR or ELR member: still offline
    assert log.record.leader == NO_LEADER
    log.apply(type="unfence_broker", node=3)
    assert log.record.leader == 3


def test_unclean_election_only_when_enabled() -> None:
    for enabled in (False, True):
        log = Log(**{"unclean.leader.election.enable": str(enabled).lower()})
        log.alter([1])
        log.apply(type="fence_broker", node=1)
        log.apply(type="register_broker", node=1, clean=False)  # it lost its tail
        assert log.record.leader == (2 if enabled else NO_LEADER)


def test_a_node_that_starts_again_unclean_leaves_every_isr_and_elr() -> None:
    log = Log(**{"min.insync.replicas": "2"})
    log.apply(type="register_broker", node=1, clean=False)
    assert log.record.isr == nodes(2, 3)
    assert log.record.leader == 2
    assert 1 not in log.record.elr


def test_a_node_that_stopped_cleanly_gives_up_its_leadership_only() -> None:
    log = Log()
    before = log.record
    log.apply(type="register_broker", node=1, clean=True)
    assert log.record.isr == before.isr
    # It may lead again, but only a new leader epoch (it never re-leads a claimed one).
    assert log.record.leader_epoch > before.leader_epoch
    log.apply(type="register_broker", node=3, clean=True)  # not leading: nothing changes
    assert log.record.leader_epoch == log.image.records[KEY].leader_epoch


def test_a_first_registration_changes_nothing() -> None:
    """A topic created before its nodes registered (a fresh cluster whose nodes start one by
    one): their first registrations, unclean as a fresh data directory is, leave the record
    as created; each node's replicas took no record before it, so it holds nothing anyone
    counted. A later registration of a new incarnation is a restart (rule 9)."""
    log = Log(registered=False)
    created = log.record
    for node in (3, 1, 2):
        assert log.apply(type="register_broker", node=node, clean=False, incarnation="a") == ()
    assert log.record == created
    log.apply(type="register_broker", node=1, clean=False, incarnation="b")
    assert log.record.leader == 2 and log.record.isr == nodes(2, 3)


def test_a_registration_committed_twice_counts_once() -> None:
    log = Log()
    log.apply(type="register_broker", node=2, clean=False, incarnation="n2")  # a copy
    assert log.record.isr == nodes(1, 2, 3)
    log.apply(type="register_broker", node=2, clean=False, incarnation="again")
    assert log.record.isr == nodes(1, 3)
    log.apply(type="register_broker", node=3, clean=False)  # no incarnation: a new one
    log.apply(type="register_broker", node=3, clean=False)
    assert 3 not in log.record.isr


@pytest.mark.parametrize("incarnation", [7, "", "x" * 65, ["a"]])
def test_a_registration_with_a_bad_incarnation_changes_nothing(incarnation: object) -> None:
    log = Log()
    before = log.record
    log.apply(type="register_broker", node=1, clean=False, incarnation=incarnation)
    assert log.record == before and log.image.incarnations[1] == "n1"


def test_replica_restarted_counts_only_for_the_leader_epoch_it_names() -> None:
    log = Log()
    epoch = int(log.record.leader_epoch)
    log.apply(type="replica_restarted", topic="t", partition=0, node=1, leader_epoch=epoch - 1)
    assert log.record.leader == 1  # about an epoch that is over: nothing
    log.apply(type="replica_restarted", topic="t", partition=0, node=1, leader_epoch=epoch)
    assert log.record.leader == 2 and 1 not in log.record.isr


def test_controlled_shutdown_and_the_preferred_leader() -> None:
    log = Log()
    log.apply(type="shutdown_broker", node=1)
    assert log.record.leader == 2 and 1 not in log.record.isr
    log.apply(type="elect_preferred", topic="t", partition=0)
    assert log.record.leader == 2  # 1 is neither live nor in the ISR
    log.apply(type="unfence_broker", node=1)
    log.alter([1, 2, 3])  # 2 took 1 back once caught up
    epoch = log.record.leader_epoch
    log.apply(type="elect_preferred", topic="t", partition=0)
    assert (log.record.leader, log.record.leader_epoch) == (1, epoch + 1)


def test_a_deleted_topic_takes_its_records() -> None:
    log = Log()
    log.alter([1, 2])
    log.apply(type="delete_topic", name="t")
    assert log.image.records == {} and log.image.answers == {}


ISR_COMMANDS = st.sampled_from(
    ["alter_partition", "replica_restarted", "elect_preferred", "register_broker", "fence_broker"]
)


@settings(max_examples=300, deadline=None)
@given(
    kind=ISR_COMMANDS,
    fields=st.dictionaries(
        st.sampled_from(
            [
                "topic",
                "partition",
                "leader",
                "leader_epoch",
                "partition_epoch",
                "isr",
                "node",
                "clean",
                "incarnation",
            ]
        ),
        st.one_of(
            st.integers(-3, 2**40),
            st.booleans(),
            st.none(),
            st.text(max_size=3),
            st.lists(st.integers(-2, 5), max_size=5),
            st.just("t"),
        ),
    ),
)
def test_no_isr_command_stops_a_node(kind: str, fields: dict[str, Any]) -> None:
    """Any command committed, however malformed, changes nothing it should not and never
    raises; the record stays one a replica takes (replicas, leader, epochs in range)."""
    log = Log()
    log.image.apply(log.offset, command(type=kind, **fields))
    record = log.record
    assert set(record.isr) | set(record.elr) <= set(record.replicas)
    assert record.leader == NO_LEADER or record.leader in record.replicas
    assert record.partition_epoch >= 1 and record.leader_epoch >= 1


# ---------------------------------------------------------------------- the door ------
@pytest.mark.parametrize(
    ("fields", "taken"),
    [
        ({"type": "alter_partition", "leader": 2}, True),
        ({"type": "alter_partition", "leader": 3}, False),  # speaking for another node
        ({"type": "register_broker", "node": 2, "clean": True}, True),
        ({"type": "register_broker", "node": 1, "clean": False}, False),
        ({"type": "replica_restarted", "node": 3}, False),
        ({"type": "shutdown_broker", "node": 1}, False),
        ({"type": "elect_preferred", "topic": "t", "partition": 0}, True),
    ],
)
def test_a_forwarded_isr_command_speaks_only_for_its_sender(
    fields: dict[str, Any], taken: bool
) -> None:
    request = ForwardRequest(NodeId(2), NodeId(1), 7, (json.dumps(fields).encode(),))
    assert (forwarded_command(request) is not None) is taken
