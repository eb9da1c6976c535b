"""ISR mode of the core replica (core/mode/isr.py): who leads, what it refuses, what it
proposes. The scenarios of docs/isr.md are transcripts in tests/scenarios/isr/."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tidelog.core import MemoryStorage, Ready, Replica, ReplicaConfig, Role
from tidelog.core.isr import NO_LEADER, GivenUp, IsrProposal, PartitionRecord, alter_isr, elect
from tidelog.core.messages import AppendRequest, AppendResponse, VoteRequest
from tidelog.core.replica import ACKS_ALL, ACKS_LEADER, Replication
from tidelog.errors import NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeader
from tidelog.node.driver import run_round
from tidelog.records import stamp
from tidelog.testing.sim import build_batch
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
NODES = (N1, N2, N3)
LAG_MS = 5


def config(node: NodeId = N1, *, min_insync: int | None = None) -> ReplicaConfig:
    return ReplicaConfig(
        node,
        NODES,
        min_insync_replicas=min_insync,
        replication=Replication.ISR,
        replica_lag_time_max_ms=LAG_MS,
    )


def isr_replica(
    node: NodeId = N1, *, storage: MemoryStorage | None = None, min_insync: int | None = None
) -> tuple[Replica, MemoryStorage]:
    storage = storage or MemoryStorage()
    replica = Replica(config(node, min_insync=min_insync), storage, random.Random(1))
    assert replica.isr is not None
    return replica, storage


def record(
    leader: NodeId = N1,
    *,
    epoch: int = 1,
    partition_epoch: int = 0,
    isr: tuple[NodeId, ...] = NODES,
) -> PartitionRecord:
    return PartitionRecord(NODES, leader, Epoch(epoch), partition_epoch, isr)


def rounds(replica: Replica, storage: MemoryStorage) -> list[Ready]:
    """Carry out every Ready (messages go nowhere), as the node driver does."""
    readies = []
    while (ready := run_round(replica, storage, lambda messages: None)) is not None:
        readies.append(ready)
    return readies


def proposals(readies: list[Ready]) -> list[IsrProposal]:
    return [proposal for ready in readies for proposal in ready.isr_proposals]


def leader(
    *, isr: tuple[NodeId, ...] = NODES, min_insync: int | None = None
) -> tuple[Replica, MemoryStorage]:
    replica, storage = isr_replica(min_insync=min_insync)
    assert replica.on_partition_record(record(isr=isr)) is None
    rounds(replica, storage)
    assert replica.role is Role.LEADER
    return replica, storage


def ack(replica: Replica, peer: NodeId, match: int) -> None:
    """`peer` answers the latest append with a durable, verified match."""
    replica.step(
        AppendResponse(
            peer, N1, replica.epoch, True, Offset(0), Offset(match), NO_EPOCH, 0, replica.append_seq
        )
    )


# ------------------------------------------------------------------ configuration ---------
def test_the_config_decides_the_mode() -> None:
    quorum = ReplicaConfig(N1, NODES)
    assert Replica(quorum, MemoryStorage(), random.Random(1)).isr is None
    assert isr_replica()[0].isr is not None
    with pytest.raises(ValueError, match="replica_lag_time_max_ms"):
        ReplicaConfig(N1, NODES, replica_lag_time_max_ms=0)


# ------------------------------------------------------------------ rule 4: no elections --
def test_a_replica_never_campaigns_votes_or_transfers() -> None:
    replica, storage = isr_replica()
    for now in range(100):
        replica.tick(now_ms=now)
        assert not any(ready.messages for ready in rounds(replica, storage))
    replica.campaign()
    assert replica.role is Role.FOLLOWER
    assert not replica.has_ready()
    vote = VoteRequest(N2, N1, Epoch(5), NO_EPOCH, Offset(0), pre_vote=False)
    assert "no elections" in (replica.step(vote) or "")
    assert replica.epoch == 0
    assert replica.on_partition_record(record()) is None
    rounds(replica, storage)
    assert "controller chooses" in (replica.transfer_leadership(N2) or "")


def test_appends_only_from_the_leader_a_record_names() -> None:
    replica, _ = isr_replica(N2)
    append = AppendRequest(N3, N2, Epoch(1), Offset(0), NO_EPOCH, (), Offset(0), 0, Offset(0))
    assert "no record here names" in (replica.step(append) or "")
    assert replica.on_partition_record(record(N3)) is None
    assert replica.step(append) is None
    assert (replica.role, replica.leader_id, replica.epoch) == (Role.FOLLOWER, N3, 1)
    later = AppendRequest(N1, N2, Epoch(2), Offset(0), NO_EPOCH, (), Offset(0), 0, Offset(0))
    assert "no record here names" in (replica.step(later) or "")
    assert replica.epoch == 1


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (PartitionRecord((N1, N2), N1, Epoch(1), 0, (N1,)), "naming replicas"),
        (PartitionRecord(NODES, NodeId(9), Epoch(1), 0, NODES), "no replica"),
        (PartitionRecord(NODES, N1, Epoch(1), 0, (N1, NodeId(9))), "beyond the replicas"),
        (PartitionRecord(NODES, N1, Epoch(-1), 0, NODES), "leader epoch -1"),
        (PartitionRecord(NODES, N1, Epoch(1), 0, NODES, restarts=(1,)), "counting restarts"),
        (PartitionRecord(NODES, N1, Epoch(1), 0, NODES, restarts=(0, -1, 0)), "restarts"),
    ],
)
def test_a_record_that_cannot_be_right_changes_nothing(bad: PartitionRecord, reason: str) -> None:
    replica, _ = isr_replica()
    assert reason in (replica.on_partition_record(bad) or "")
    assert replica.partition_record() is None
    assert not replica.has_ready()


def test_old_records_are_ignored_and_an_older_leader_epoch_refused() -> None:
    replica, storage = isr_replica(N2)
    assert replica.on_partition_record(record(N1, epoch=3, partition_epoch=5)) is None
    rounds(replica, storage)
    assert replica.on_partition_record(record(N3, epoch=4, partition_epoch=4)) is None
    assert replica.leader_id == N1
    refusal = replica.on_partition_record(record(N3, epoch=2, partition_epoch=6))
    assert "older than 3" in (refusal or "")
    assert (replica.leader_id, replica.epoch) == (N1, 3)


# ------------------------------------------------------------------ becoming leader ------
def test_the_claim_is_durable_before_the_named_replica_leads() -> None:
    replica, storage = isr_replica()
    replica.on_partition_record(record())
    assert replica.role is Role.FOLLOWER
    first = replica.ready()
    assert first.hard_state is not None
    assert first.hard_state.voted_for == N1
    assert not first.batches  # nothing of the epoch before the claim is durable
    storage.save_hard_state(first.hard_state)
    storage.sync()
    replica.advance(first)
    assert replica.role is Role.LEADER
    assert replica.log.last_epoch == 1  # the epoch-start control batch, appended
    assert replica.epoch_start_offset == 0
    assert replica.status().in_sync_replicas == NODES


def test_a_restarted_replica_never_leads_an_epoch_it_claimed_again() -> None:
    _, storage = leader()  # it led epoch 1, then its process stopped
    restarted, _ = isr_replica(storage=storage)
    refusal = restarted.on_partition_record(record(partition_epoch=1))
    assert "claimed leader epoch 1 before" in (refusal or "")
    rounds(restarted, storage)
    assert restarted.role is Role.FOLLOWER
    assert restarted.on_partition_record(record(epoch=2, partition_epoch=2)) is None
    rounds(restarted, storage)
    assert (restarted.role, restarted.epoch) == (Role.LEADER, 2)


def test_a_record_naming_another_leader_deposes_the_leader() -> None:
    replica, storage = leader()
    replica.propose(1, build_batch(b"a"), acks=ACKS_ALL)
    rounds(replica, storage)
    replica.on_partition_record(record(N2, epoch=2, partition_epoch=1))
    (ready,) = rounds(replica, storage)
    assert [type(c.error) for c in ready.completions] == [NotLeader]
    assert (replica.role, replica.leader_id, replica.epoch) == (Role.FOLLOWER, N2, 2)
    replica.on_partition_record(record(NO_LEADER, epoch=3, partition_epoch=2))
    assert (replica.leader_id, replica.epoch) == (None, 3)


# ------------------------------------------------------------------ the HWM and acks ------
def test_the_hwm_waits_for_every_member_of_the_isr() -> None:
    replica, storage = leader()
    replica.propose(1, build_batch(b"a"), acks=ACKS_ALL)
    rounds(replica, storage)
    ack(replica, N2, 2)
    assert replica.hwm == 0  # 3 is in the ISR and has not answered
    ack(replica, N3, 1)
    assert replica.hwm == 1
    ack(replica, N3, 2)
    (ready,) = rounds(replica, storage)
    assert replica.hwm == 2
    assert [c.base_offset for c in ready.completions] == [1]


def test_min_insync_refuses_acks_all_and_answers_those_waiting() -> None:
    replica, storage = leader(min_insync=2)
    replica.propose(1, build_batch(b"a"), acks=ACKS_ALL)
    rounds(replica, storage)
    shrunk = record(partition_epoch=1, isr=(N1,))
    replica.on_partition_record(shrunk)
    replica.propose(2, build_batch(b"b"), acks=ACKS_ALL)
    replica.propose(3, build_batch(b"c"), acks=ACKS_LEADER)
    completions = [c for ready in rounds(replica, storage) for c in ready.completions]
    errors = {c.request_id: type(c.error) for c in completions}
    assert errors == {1: NotEnoughReplicasAfterAppend, 2: NotEnoughReplicas, 3: type(None)}
    assert replica.hwm == 0  # strict min ISR: the HWM waits while the ISR is too small
    assert replica.set_min_insync_replicas(1) is None
    assert replica.hwm == replica.log.durable_end_offset


# ------------------------------------------------------------------ proposals -------------
def test_a_lagging_follower_is_proposed_out_and_a_lost_proposal_sent_again() -> None:
    replica, storage = leader()
    ack(replica, N2, 1)
    ack(replica, N3, 1)
    sent: list[IsrProposal] = []
    # The clock first reads 1: the followers are dated from then.
    for now in range(1, LAG_MS + replica.config.election_ticks + 3):
        replica.tick(now_ms=now)
        if now % 2 == 0:
            ack(replica, N2, 1)  # 2 keeps up; 3 went quiet
        sent += proposals(rounds(replica, storage))
    assert len(sent) == 2  # the first, and once more an election timeout later
    assert sent[0] == sent[1]
    assert sent[0].isr == (N1, N2)
    assert replica.partition_record() is not None
    result = alter_isr(replica.partition_record(), sent[0], min_insync=1)
    assert result.accepted
    assert replica.on_isr_answer(sent[0], result) is None
    assert replica.status().in_sync_replicas == (N1, N2)
    settled = now
    for later in range(settled + 1, settled + 30):
        ack(replica, N2, 1)
        replica.tick(now_ms=later)
        assert not proposals(rounds(replica, storage))  # settled: nothing to send again


def test_a_leader_counts_a_restarted_follower_only_on_its_answers_from_then() -> None:
    """Rule 9: 3, outside the ISR, held the leader's log; its node starts again on an empty
    disk and registers, and the record says so (`restarts`). An answer to a request sent
    before that record came (its previous incarnation's, delivered late) is not counted:
    3 is proposed only on what it answers from then on."""
    replica, storage = leader(isr=(N1, N2))
    ack(replica, N2, 1)
    before = replica.partition_record()
    assert before is not None
    stale_seq = replica.append_seq
    restarted = replace(before, partition_epoch=1, restarts=(0, 0, 1))
    assert replica.on_partition_record(restarted) is None
    rounds(replica, storage)
    replica.step(  # the old incarnation's answer: the whole log, verified
        AppendResponse(N3, N1, replica.epoch, True, Offset(0), Offset(1), NO_EPOCH, 0, stale_seq)
    )
    sent: list[IsrProposal] = []
    for now in range(1, 4):
        replica.tick(now_ms=now)
        sent += proposals(rounds(replica, storage))
    assert sent == []
    ack(replica, N3, 0)  # the new incarnation: its log is empty
    replica.tick(now_ms=4)
    assert proposals(rounds(replica, storage)) == []
    ack(replica, N3, 1)  # caught up again
    replica.tick(now_ms=5)
    assert [p.isr for p in proposals(rounds(replica, storage))] == [(N1, N2, N3)]


# ------------------------------------------------------------------ unclean recovery ------
def append_from(
    leader_node: NodeId, epoch: int, prev: int, prev_epoch: int, batches: list[tuple[int, int]]
) -> AppendRequest:
    """An append to N2 of one-record batches (base offset, epoch), the leader's HWM high."""
    stamped = tuple(
        stamp(build_batch(b"x"), base_offset=Offset(base), epoch=Epoch(batch_epoch))
        for base, batch_epoch in batches
    )
    return AppendRequest(
        leader_node,
        N2,
        Epoch(epoch),
        Offset(prev),
        Epoch(prev_epoch),
        stamped,
        Offset(9),
        0,
        Offset(0),
    )


def follower_that_committed_three() -> tuple[Replica, MemoryStorage]:
    """N2, following N1 in epoch 1, holding offsets 0..2 of epoch 1, all committed."""
    replica, storage = isr_replica(N2)
    replica.on_partition_record(record(N1))
    rounds(replica, storage)
    assert replica.step(append_from(N1, 1, 0, NO_EPOCH, [(0, 1), (1, 1), (2, 1)])) is None
    rounds(replica, storage)
    assert replica.hwm == 3
    return replica, storage


def unclean_record(*, unclean: bool) -> PartitionRecord:
    """N3, which holds only offset 0, elected in epoch 2 (outside the ISR and ELR)."""
    return PartitionRecord(
        NODES, N3, Epoch(2), 1, (N3,), unclean_epoch=Epoch(2) if unclean else None
    )


def test_after_an_unclean_election_a_follower_gives_up_and_names_what_it_committed() -> None:
    replica, storage = follower_that_committed_three()
    assert replica.on_partition_record(unclean_record(unclean=True)) is None
    # N3's first append: its log up to its epoch start (1) matches ours; our HWM (3) is
    # beyond it, unchecked: no reads until it is.
    assert replica.step(append_from(N3, 2, 1, 1, [])) is None
    rounds(replica, storage)
    assert replica.hwm == 3
    assert isinstance(replica.fetch(Offset(0), max_bytes=1 << 20).error, NotLeader)
    assert replica.step(append_from(N3, 2, 1, 1, [(1, 2)])) is None
    (ready, *_) = rounds(replica, storage)
    assert ready.given_up == (GivenUp(Offset(1), Offset(3), N3, Epoch(2), Epoch(2)),)
    assert ready.truncate_to == 1
    assert (replica.log.log_end_offset, replica.hwm, replica.log.last_epoch) == (2, 2, 2)
    fetched = replica.fetch(Offset(0), max_bytes=1 << 20)
    assert fetched.error is None
    assert fetched.hwm == 2


def test_a_follower_saves_its_hwm_again_when_it_regains_the_old_one_in_the_give_up_round() -> None:
    """Storage lowers its saved HWM to where records are given up; when the leader's
    batches bring the HWM back to its old value in the same round, that value is saved
    anew (else a restart would come back below the HWM this replica last saved)."""
    replica, storage = follower_that_committed_three()
    assert replica.on_partition_record(unclean_record(unclean=True)) is None
    assert replica.step(append_from(N3, 2, 1, 1, [(1, 2), (2, 2)])) is None
    (ready, *_) = rounds(replica, storage)
    assert ready.given_up == (GivenUp(Offset(1), Offset(3), N3, Epoch(2), Epoch(2)),)
    assert replica.hwm == 3
    assert ready.hwm == 3
    assert storage.load().hwm == 3


def test_without_an_unclean_election_a_follower_never_gives_up_what_it_committed() -> None:
    replica, storage = follower_that_committed_three()
    assert replica.on_partition_record(unclean_record(unclean=False)) is None
    assert replica.step(append_from(N3, 2, 1, 1, [(1, 2)])) is None
    readies = rounds(replica, storage)
    assert not any(ready.given_up or ready.truncate_to is not None for ready in readies)
    assert not any(ready.messages_after_persist for ready in readies)  # refused: no answer
    assert (replica.log.log_end_offset, replica.hwm) == (3, 3)


def test_an_unclean_election_is_recorded_with_its_epoch_and_checked_at_the_door() -> None:
    base = PartitionRecord(NODES, N1, Epoch(3), 4, (N1,), elr=(N1,))
    election = elect(base, live=(N2,), min_insync=2, unclean_allowed=True)
    assert (election.leader, election.unclean) == (N2, True)
    assert election.record.unclean_epoch == election.record.leader_epoch == 4
    assert not base.may_give_up(Epoch(9))
    assert election.record.may_give_up(Epoch(4))
    assert not election.record.may_give_up(Epoch(3))
    clean = elect(base, live=(N1,), min_insync=2)
    assert clean.record.unclean_epoch is None
    replica, _ = isr_replica(N2)
    bad = PartitionRecord(NODES, N1, Epoch(1), 0, NODES, unclean_epoch=Epoch(2))
    assert "unclean election in epoch 2" in (replica.on_partition_record(bad) or "")


# ------------------------------------------------------------------ found by the simulator -
def test_a_leader_named_before_its_first_tick_dates_its_followers_by_the_clock() -> None:
    """Found by the simulator (ISR mode): a replica named leader before its first tick dated
    its followers by a clock reading 0, so at the first tick of a clock that starts large
    every follower looked lagging since then and was proposed out of the ISR. A follower
    outside the ISR that joins before it ever reached the log end was proposed out at the
    next tick just so."""
    replica, storage = leader(isr=(N1, N2))
    replica.tick(now_ms=1_000_000)
    assert proposals(rounds(replica, storage)) == []
    ack(replica, N2, int(replica.log.log_end_offset))
    rounds(replica, storage)
    replica.propose(1, build_batch(b"a"), acks=ACKS_LEADER)
    rounds(replica, storage)
    ack(replica, N3, int(replica.hwm))  # at the HWM, short of the log end: it may join
    (expand,) = proposals(rounds(replica, storage))
    assert expand.isr == NODES
    result = alter_isr(replica.partition_record() or record(), expand, min_insync=1)
    assert replica.on_isr_answer(expand, result) is None
    replica.tick(now_ms=1_000_001)
    assert proposals(rounds(replica, storage)) == []
