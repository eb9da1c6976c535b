"""ISR mode's sans-IO core (core/isr.py): each rule of docs/isr.md, its scenarios played on
the abstract model (testing/isr_model.py), a model-based random walk, and mutants of the
rules that the walk must catch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patching import patched
from tidelog.core import isr
from tidelog.core.isr import (
    NO_LEADER,
    IsrConfig,
    IsrLeader,
    IsrProposal,
    PartitionRecord,
    Refusal,
    alter_isr,
    elect,
    fence,
    registered,
    relinquish,
    restarted,
)
from tidelog.testing.isr_model import IsrModel, Loss, Violation, random_walk
from tidelog.types import Epoch, NodeId, Offset

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


def record(
    isr_: tuple[int, ...] = (1, 2, 3),
    *,
    leader: int = 1,
    leader_epoch: int = 5,
    partition_epoch: int = 10,
    elr: tuple[int, ...] = (),
) -> PartitionRecord:
    return PartitionRecord(
        (N1, N2, N3),
        NodeId(leader),
        Epoch(leader_epoch),
        partition_epoch,
        tuple(NodeId(n) for n in isr_),
        tuple(NodeId(n) for n in elr),
    )


def proposal(rec: PartitionRecord, isr_: tuple[int, ...], **changes: Any) -> IsrProposal:
    base = IsrProposal(
        rec.leader, rec.leader_epoch, rec.partition_epoch, tuple(NodeId(n) for n in isr_)
    )
    return replace(base, **changes)


# ------------------------------------------------------------------ rule 3: alter_isr ------


def test_rule_3_a_current_proposal_is_applied_with_partition_epoch_plus_one() -> None:
    rec = record()
    result = alter_isr(rec, proposal(rec, (1, 2)), min_insync=1)
    assert result.accepted
    assert (result.record.isr, result.record.partition_epoch) == ((N1, N2), 11)
    assert result.record.leader_epoch == rec.leader_epoch


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"leader_epoch": Epoch(4)}, Refusal.FENCED_LEADER_EPOCH),
        ({"partition_epoch": 9}, Refusal.INVALID_UPDATE_VERSION),
        ({"leader": N2}, Refusal.INVALID_REQUEST),
        ({"isr": (N2, N3)}, Refusal.INVALID_REQUEST),  # the leader left out
        ({"isr": (N1, NodeId(7))}, Refusal.INVALID_REQUEST),  # not a replica
        ({"isr": (N1, N1)}, Refusal.INVALID_REQUEST),
        ({"leader_epoch": Epoch(6)}, Refusal.NOT_CONTROLLER),  # this controller is behind
        ({"partition_epoch": 11}, Refusal.NOT_CONTROLLER),
    ],
    ids=[
        "old-leader-epoch",
        "old-partition-epoch",
        "not-leader",
        "no-leader",
        "stranger",
        "twice",
        "newer-leader-epoch",
        "newer-partition-epoch",
    ],
)
def test_rule_3_a_stale_or_invalid_proposal_is_refused_and_changes_nothing(
    changes: dict[str, Any], refusal: Refusal
) -> None:
    rec = record(isr_=(1, 2))
    result = alter_isr(rec, proposal(rec, (1, 2, 3), **changes), min_insync=1)
    assert (result.refusal, result.record) == (refusal, rec)


def test_rule_3_the_controller_takes_the_leader_s_word_on_who_is_caught_up() -> None:
    rec = record(isr_=(1,))
    assert alter_isr(rec, proposal(rec, (1, 2, 3)), min_insync=2).record.isr == (N1, N2, N3)


def test_rule_3_a_proposal_that_changes_nothing_is_accepted_as_it_stands() -> None:
    rec = record()
    assert alter_isr(rec, proposal(rec, (1, 2, 3)), min_insync=2) == isr.AlterResult(rec)


# ------------------------------------------------------------------ rule 8: the ELR -------


def test_rule_8_a_shrink_below_min_insync_moves_the_removed_to_the_elr() -> None:
    rec = record()
    after = alter_isr(rec, proposal(rec, (1,)), min_insync=2).record
    assert (after.isr, after.elr) == ((N1,), (N2, N3))


def test_rule_8_a_shrink_that_keeps_min_insync_leaves_no_elr() -> None:
    rec = record()
    after = alter_isr(rec, proposal(rec, (1, 3)), min_insync=2).record
    assert (after.isr, after.elr) == ((N1, N3), ())


def test_rule_8_an_elr_member_that_rejoins_leaves_the_elr_and_min_insync_clears_it() -> None:
    rec = record(isr_=(1,), elr=(2, 3))
    rejoined = alter_isr(rec, proposal(rec, (1, 2)), min_insync=3).record
    assert (rejoined.isr, rejoined.elr) == ((N1, N2), (N3,))
    back = alter_isr(rec, proposal(rec, (1, 2)), min_insync=2).record
    assert (back.isr, back.elr) == ((N1, N2), ())


def test_rule_8_min_insync_counts_at_most_the_replication_factor() -> None:
    rec = record()
    after = alter_isr(rec, proposal(rec, (1, 2, 3)), min_insync=5)
    assert isr.effective_min_insync(rec, 5) == 3
    assert after.record.elr == ()


# ------------------------------------------------------------------ rules 6, 9: fence -----


def test_rule_6_a_fenced_leader_leaves_isr_and_leadership_and_may_empty_the_isr() -> None:
    rec = record(isr_=(1,))
    after = fence(rec, N1, min_insync=1)
    # Kafka with ELR: the ISR may become empty; the fenced last member goes to the ELR.
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (NO_LEADER, 6, 11)
    assert (after.isr, after.elr) == ((), (N1,))
    assert alter_isr(after, proposal(rec, (1, 2)), min_insync=1).refusal is (
        Refusal.FENCED_LEADER_EPOCH
    )


def test_rule_6_fencing_a_follower_keeps_the_leader_and_its_epoch() -> None:
    after = fence(record(), N3, min_insync=2)
    assert (after.leader, after.leader_epoch, after.isr, after.elr) == (N1, 5, (N1, N2), ())
    assert fence(after, N3, min_insync=2) == after  # nothing more to do: no epoch bump


def test_rule_9_a_restarted_replica_leaves_isr_and_elr() -> None:
    rec = record(isr_=(1,), elr=(2, 3))
    after = restarted(rec, N2, min_insync=2)
    assert (after.isr, after.elr, after.partition_epoch) == ((N1,), (N3,), 11)
    led = restarted(record(isr_=(1, 2)), N1, min_insync=3)
    assert (led.leader, led.isr, led.elr) == (NO_LEADER, (N2,), ())  # never to the ELR
    # In none of them: only a new partition epoch, which refuses a proposal made on what
    # its previous incarnation reported (rule 3).
    counted = restarted(record(isr_=(1, 2)), N3, min_insync=2)
    assert counted == replace(record(isr_=(1, 2)), partition_epoch=11, restarts=(0, 0, 1))
    assert isr.restarted_since(record(), counted) == {N3}


def test_rule_9_registrations() -> None:
    rec = record(isr_=(1, 2, 3))
    assert registered(rec, N2, first=True, clean=False, min_insync=2) == rec
    assert registered(rec, N2, first=False, clean=False, min_insync=2) == restarted(
        rec, N2, min_insync=2
    )
    assert registered(rec, N1, first=False, clean=True, min_insync=2) == relinquish(rec, N1)


def test_rule_9_a_leader_forgets_what_followers_outside_the_isr_reported() -> None:
    """3 caught up outside the ISR; before the leader's proposal to take it back commits, 3
    starts again on an empty disk and registers: the proposal is refused (a new partition
    epoch) and the leader proposes 3 again only on what it reports from then on."""
    rec = record(isr_=(1, 2))
    leader = IsrLeader(N1, rec, IsrConfig(2, 100), epoch_start_offset=Offset(0),
                       log_end=Offset(5), hwm=Offset(5), now_ms=0)  # fmt: skip
    leader.follower_fetched(N3, Offset(5), 10, past_epoch_start=True)
    proposal = leader.proposal(10)
    assert proposal is not None and N3 in proposal.isr
    after = restarted(rec, N3, min_insync=2)
    assert alter_isr(after, proposal, min_insync=2).refusal is Refusal.INVALID_UPDATE_VERSION
    leader.committed(after)
    assert leader.proposal(20) is None  # 3's report came from before
    leader.follower_fetched(N3, Offset(0), 30, past_epoch_start=False)
    assert leader.proposal(30) is None  # its log is empty now


# ------------------------------------------------------------------ rules 4, 8, 10: elect -


def test_rule_4_the_first_live_isr_member_in_assignment_order_leads() -> None:
    rec = record(isr_=(1, 2, 3))
    chosen = elect(rec, {N2, N3}, min_insync=2)
    assert (chosen.leader, chosen.unclean) == (N2, False)
    assert (chosen.record.leader_epoch, chosen.record.partition_epoch) == (6, 11)


def test_rule_4_a_live_leader_is_kept() -> None:
    rec = record()
    assert elect(rec, {N1, N2}, min_insync=2) == isr.Election(rec, N1)


def test_rule_8_with_no_live_isr_member_a_live_elr_member_leads() -> None:
    rec = record(isr_=(), elr=(2, 3), leader=-1)
    chosen = elect(rec, {N3}, min_insync=2)
    assert (chosen.leader, chosen.unclean) == (N3, False)
    assert (chosen.record.isr, chosen.record.elr) == ((N3,), (N2,))


def test_rules_8_10_without_unclean_election_the_partition_stays_offline() -> None:
    rec = record(isr_=(1,), elr=(2,), leader=1)
    chosen = elect(rec, {N3}, min_insync=2)
    assert chosen.leader == NO_LEADER
    assert chosen.record.leader_epoch == 6  # the old leader is deposed all the same
    assert elect(chosen.record, {N3}, min_insync=2).record == chosen.record


def test_rule_10_an_unclean_election_says_so_and_leaves_only_its_leader() -> None:
    rec = record(isr_=(1,), elr=(2,), leader=1)
    chosen = elect(rec, {N3}, min_insync=2, unclean_allowed=True)
    assert (chosen.leader, chosen.unclean) == (N3, True)
    assert (chosen.record.isr, chosen.record.elr) == ((N3,), ())


# ------------------------------------------------------------------ the leader: 2, 5, 6, 7


def leader(rec: PartitionRecord, *, hwm: int = 0, start: int = 0, min_insync: int = 1) -> IsrLeader:
    return IsrLeader(
        N1,
        rec,
        IsrConfig(min_insync=min_insync, replica_lag_time_max_ms=100),
        epoch_start_offset=Offset(start),
        log_end=Offset(start),
        hwm=Offset(hwm),
        now_ms=0,
    )


def fetched(lead: IsrLeader, node: NodeId, match: int, now: int = 0, *, past: bool = True) -> None:
    lead.follower_fetched(node, Offset(match), now, past_epoch_start=past)


def test_rule_2_the_hwm_is_the_least_durable_leo_of_the_isr_and_never_goes_back() -> None:
    lead = leader(record())
    lead.log_end(Offset(10))
    fetched(lead, N2, 7)
    assert lead.hwm == 0  # 3 not heard yet
    fetched(lead, N3, 4)
    assert lead.hwm == 4
    fetched(lead, N3, 12)
    assert lead.hwm == 7
    fetched(lead, N2, 3)  # a report from before a restart: the HWM stays
    assert lead.hwm == 7


def test_rule_2_the_hwm_never_passes_the_leader_s_durable_leo() -> None:
    lead = leader(record(isr_=(1,)))
    fetched(lead, N2, 50)
    lead.log_end(Offset(8))
    assert lead.hwm == 8


def test_rule_2_a_pending_shrink_still_waits_for_the_replica_removed() -> None:
    lead = leader(record())
    lead.log_end(Offset(10))
    fetched(lead, N2, 10, now=500)
    fetched(lead, N3, 2, now=500)
    pending = lead.proposal(now_ms=500)  # 3 not caught up for 500 ms > 100
    assert pending is not None and pending.isr == (N1, N2)
    lead.log_end(Offset(20))
    fetched(lead, N2, 20, now=500)
    assert lead.hwm == 2  # the maximal ISR still holds 3
    lead.answered(pending, alter_isr(lead.record, pending, min_insync=1))
    assert lead.hwm == 20


def test_rule_2_a_pending_expansion_already_waits_for_the_replica_added() -> None:
    lead = leader(record(isr_=(1, 2)), hwm=5)
    lead.log_end(Offset(10))
    fetched(lead, N2, 10)
    assert lead.hwm == 10
    fetched(lead, N3, 10)
    pending = lead.proposal(now_ms=1)
    assert pending is not None and pending.isr == (N1, N2, N3)
    lead.log_end(Offset(20))
    fetched(lead, N2, 20)
    assert lead.hwm == 10  # waits for 3, though the controller has not said yes yet


def test_rule_5_a_follower_joins_only_caught_up_to_the_hwm_and_past_the_epoch_start() -> None:
    lead = leader(record(isr_=(1, 2)), hwm=6, start=8)
    lead.log_end(Offset(12))
    fetched(lead, N3, 5)
    assert lead.proposal(now_ms=1) is None  # below the HWM
    fetched(lead, N3, 7, past=False)
    assert lead.proposal(now_ms=2) is None  # at the HWM, but its divergence check not done
    fetched(lead, N3, 9)
    pending = lead.proposal(now_ms=3)
    assert pending is not None and pending.isr == (N1, N2, N3)


def test_rule_6_a_follower_leaves_only_after_replica_lag_time_max_ms() -> None:
    lead = leader(record())
    lead.log_end(Offset(10))
    fetched(lead, N2, 10, now=0)
    fetched(lead, N3, 3, now=0)
    assert lead.proposal(now_ms=100) is None  # 100 ms is not more than 100 ms
    fetched(lead, N2, 10, now=150)
    pending = lead.proposal(now_ms=150)
    assert pending is not None and pending.isr == (N1, N2)


def test_rule_6_caught_up_to_the_leo_the_leader_had_at_the_previous_fetch_counts() -> None:
    lead = leader(record(isr_=(1, 2)))
    lead.log_end(Offset(10))
    fetched(lead, N2, 4, now=50)  # behind the leader's 10
    lead.log_end(Offset(20))
    fetched(lead, N2, 10, now=120)  # reached the 10 of its previous fetch: caught up at 50
    assert lead.proposal(now_ms=150) is None
    pending = lead.proposal(now_ms=151)
    assert pending is not None and pending.isr == (N1,)


def test_at_most_one_proposal_is_pending_and_a_refusal_or_newer_record_clears_it() -> None:
    lead = leader(record())
    lead.log_end(Offset(10))
    first = lead.proposal(now_ms=500)
    assert first is not None and first.isr == (N1,)
    assert lead.proposal(now_ms=600) is None
    stale = replace(first, partition_epoch=1)
    lead.answered(stale, alter_isr(lead.record, stale, min_insync=1))
    assert lead.pending == first  # an answer to another proposal settles nothing
    lead.answered(first, isr.AlterResult(lead.record, Refusal.NOT_CONTROLLER))
    assert lead.pending == first  # that controller was behind: the next may apply it
    lead.answered(first, isr.AlterResult(lead.record, Refusal.INVALID_UPDATE_VERSION))
    assert lead.pending is None
    second = lead.proposal(now_ms=700)
    assert second is not None
    lead.committed(fence(lead.record, N3, min_insync=1))
    assert lead.pending is None


def test_a_record_naming_another_leader_deposes_the_leader() -> None:
    lead = leader(record(isr_=(1, 2)))
    lead.committed(elect(fence(lead.record, N1, min_insync=1), {N2}, min_insync=1).record)
    assert lead.deposed
    lead.log_end(Offset(10))
    fetched(lead, N2, 10)
    assert (lead.hwm, lead.proposal(now_ms=1000), lead.acks_all_allowed()) == (0, None, False)


def test_rule_7_acks_all_needs_the_committed_isr_at_min_insync() -> None:
    lead = leader(record(isr_=(1, 2)), min_insync=2)
    assert lead.acks_all_allowed()
    assert not lead.acks_all_allowed(3)
    fetched(lead, N3, 0)
    pending = lead.proposal(now_ms=1)
    assert pending is not None and len(lead.maximal_isr()) == 3
    assert not lead.acks_all_allowed(3)  # the pending expansion does not count


def test_rule_8_kip_966_strict_min_isr_the_hwm_stands_below_min_insync() -> None:
    lead = leader(record(isr_=(1,)), min_insync=2)
    lead.log_end(Offset(10))
    assert lead.hwm == 0
    fetched(lead, N2, 10)
    pending = lead.proposal(now_ms=1)
    assert pending is not None
    lead.answered(pending, alter_isr(lead.record, pending, min_insync=2))
    assert lead.hwm == 10


# ------------------------------------------------------------------ the scenarios --------


def in_sync_at_hwm_1(m: IsrModel) -> None:
    """Every replica holds the first leader's control batch durably, and the HWM is 1."""
    for n in range(2, m.replicas + 1):
        m.fetch(n), m.sync(n)
    m.sync(1)
    for n in range(2, m.replicas + 1):
        m.fetch(n)
    assert m.acked == [0]


def test_isr_01_a_shrink_not_committed_when_the_leader_fails() -> None:
    m = IsrModel(replicas=3, min_insync=1)
    in_sync_at_hwm_1(m)
    m.now += 150
    m.fetch(2)  # 2 is caught up; 3 has not fetched for 150 ms
    m.tick(0)
    assert [p.isr for p in m.inflight] == [(N1, N2)]
    m.produce(1, 3), m.sync(1), m.fetch(2, 4), m.sync(2), m.fetch(2)
    assert len(m.acked) == 1  # rule 2: the HWM still waits for 3
    m.crash(1), m.fence(1), m.fence(2), m.elect()  # 2 cut off too: 3 is elected
    assert (m.record.leader, m.record.isr) == (N3, (N3,))
    m.check()  # every acknowledged record is on 3; the batch at 1..3 is lost
    m.deliver()  # the shrink arrives late: refused
    assert m.record.isr == (N3,)


def test_isr_02_a_stale_leader_with_a_larger_isr_cannot_undo_a_shrink() -> None:
    rec = record(leader_epoch=5, partition_epoch=10)
    fenced = fence(rec, N1, min_insync=1)
    chosen = elect(fenced, {N2, N3}, min_insync=1).record
    assert (chosen.leader, chosen.leader_epoch) == (N2, 7)
    shrunk = alter_isr(chosen, proposal(chosen, (2, 3)), min_insync=1).record
    stale = alter_isr(shrunk, proposal(rec, (1, 2, 3)), min_insync=1)
    assert stale.refusal is Refusal.FENCED_LEADER_EPOCH
    assert stale.record.isr == (N2, N3)


def test_isr_03_a_fast_rejoin_must_truncate_before_it_is_counted() -> None:
    m = IsrModel(replicas=3, min_insync=1)
    in_sync_at_hwm_1(m)
    m.produce(1, 2), m.fetch(3, 2), m.sync(3)  # 3 alone copies two records of epoch 0
    m.crash(1), m.fence(1), m.fence(3), m.elect()
    assert (m.record.leader, m.record.isr) == (N2, (N2,))
    m.produce(2, 3), m.sync(2)
    new_leader = m.nodes[N2].leader
    assert new_leader is not None and new_leader.hwm == 5
    three = m.nodes[N3]
    assert three.log == [0, 0, 0]  # a divergent suffix at offsets 1..2
    # Rule 5 at the leader: caught up past the HWM, but before its divergence check.
    new_leader.follower_fetched(N3, Offset(5), m.now, past_epoch_start=False)
    assert new_leader.proposal(m.now) is None
    m.unfence(3), m.publish(3), m.fetch(3, 0)
    assert three.log == [0]  # truncated first, by the leader's log, never counted before
    m.tick(1)
    assert m.inflight == []
    m.fetch(3, 10), m.sync(3), m.fetch(3), m.tick(1), m.deliver()
    assert m.record.isr == (N2, N3)
    m.check()
    assert three.log == m.nodes[N2].log


def test_isr_04_min_insync_1_two_replicas_lost_then_back() -> None:
    m = IsrModel(replicas=3, min_insync=1)
    m.sync(1), m.crash(2), m.crash(3)
    m.tick(150), m.deliver()
    assert m.record.isr == (N1,) and m.record.elr == ()  # min.insync=1: no ELR
    m.produce(1, 5), m.sync(1)
    assert len(m.acked) == 6  # 1 acknowledges alone
    for n in (2, 3):
        m.restart(n), m.publish(n)
    m.publish(1)  # the leader learns of the restarts: it counts what they report from now
    for n in (2, 3):
        m.fetch(n, 10), m.sync(n), m.fetch(n)
    m.tick(1), m.deliver()
    assert m.record.isr == (N1, N2, N3)
    m.crash(1), m.fence(1), m.elect()
    assert m.record.leader == N2
    assert m.nodes[N2].log[: len(m.acked)] == m.acked
    m.check()


def test_isr_04_the_elr_holds_only_replicas_with_every_acknowledged_record() -> None:
    m = IsrModel(replicas=3, min_insync=2)
    in_sync_at_hwm_1(m)
    m.now += 150
    m.fetch(2), m.tick(0), m.deliver()  # 3 out: ISR {1, 2}
    assert (m.record.isr, m.record.elr) == ((N1, N2), ())
    m.produce(1, 2), m.sync(1), m.fetch(2, 5), m.sync(2), m.fetch(2)
    acked = len(m.acked)
    m.crash(2), m.tick(150), m.deliver()  # ISR {1} < 2: 2 to the ELR
    assert (m.record.isr, m.record.elr) == ((N1,), (N2,))
    m.produce(1, 3), m.sync(1)
    assert len(m.acked) == acked  # strict min ISR: the HWM stands, so the ELR holds it all
    m.crash(1), m.fence(1), m.restart(2)
    assert N2 not in m.record.elr  # rule 9
    m.check()


def test_isr_05_a_proposal_duplicated_across_a_controller_failover_applies_once() -> None:
    rec = record()
    shrink = proposal(rec, (1, 2))
    first = alter_isr(rec, shrink, min_insync=1)
    again = alter_isr(first.record, shrink, min_insync=1)  # the new controller sees it again
    assert first.accepted and again.refusal is Refusal.INVALID_UPDATE_VERSION
    assert again.record == first.record
    m = IsrModel(replicas=3, min_insync=1)
    m.sync(1), m.tick(150)
    m.resend(1), m.resend(1)
    assert len(m.inflight) == 3
    m.fail_over([True, False, True])
    epochs = []
    while m.inflight:
        m.deliver()
        epochs.append(m.record.partition_epoch)
    assert epochs == [1, 1]


def test_isr_06_unclean_election_off_stays_offline_on_names_the_loss() -> None:
    for unclean in (False, True):
        m = IsrModel(replicas=3, min_insync=1, unclean_allowed=unclean)
        m.sync(1), m.crash(2), m.crash(3), m.tick(150), m.deliver()
        m.produce(1, 4), m.sync(1)
        m.crash(1), m.fence(1), m.restart(2), m.elect()
        if unclean:
            assert (m.record.leader, m.losses) == (N2, [Loss(N2, 0, 5)])
        else:
            assert (m.record.leader, m.losses, len(m.acked)) == (NO_LEADER, [], 5)


def test_rule_11_a_forged_record_makes_no_follower_give_up_what_it_committed() -> None:
    m = IsrModel(replicas=3, min_insync=1)
    m.crash(3), m.restart(3, wiped=True), m.publish(1)  # 3 leaves the ISR, its disk empty
    m.produce(1, 2), m.sync(1), m.fetch(2, 5), m.sync(2), m.fetch(2)
    two = m.nodes[N2]
    assert (m.acked, two.log, two.hwm, m.forgeable()) == ([0, 0, 0], [0, 0, 0], 3, [N3])
    # A record written by hand names 3 leader, not saying the election was unclean.
    m.forge(3), m.publish(2)
    assert (m.record.leader, m.record.unclean_epoch, m.forged_epoch) == (N3, None, 1)
    m.fetch(2, 5)  # 3's log [1] conflicts at offset 0 with what 2 committed: refused
    forged_leader = m.nodes[N3].leader
    assert forged_leader is not None and forged_leader.followers[N2].match is None
    assert (two.log, two.hwm) == ([0, 0, 0], 3)
    m.check()
    with (
        patched(PartitionRecord, "may_give_up", gives_up_whatever_the_record),
        pytest.raises(Violation, match="truncates below its HWM 3 to 0"),
    ):
        m.fetch(2, 5)


def test_rule_11_a_walk_with_a_forged_record_runs_clean_and_catches_giving_up() -> None:
    model = random_walk(FORGED_WALK, steps=300)
    assert model.forged_epoch >= 0 and model.first_unclean_epoch == -1
    with (
        patched(PartitionRecord, "may_give_up", gives_up_whatever_the_record),
        pytest.raises(Violation, match="truncates below its HWM"),
    ):
        random_walk(FORGED_WALK, steps=300)


# ------------------------------------------------------------------ the model-based test --


def test_the_random_walk_keeps_every_invariant_over_many_seeds() -> None:
    kinds = set()
    for seed in range(400):
        model = random_walk(seed, steps=300)
        kinds.add((model.replicas, model.unclean_allowed, bool(model.losses)))
    assert {(3, False, False), (5, False, False), (3, True, True)} <= kinds


@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), steps=st.integers(50, 400))
def test_hypothesis_chooses_the_walks(seed: int, steps: int) -> None:
    model = random_walk(seed, steps)
    assert model.record.partition_epoch >= 0


# ------------------------------------------------------------------ mutants ---------------


ORIGINAL_REFUSAL = isr._refusal


def hwm_over_committed_isr_only(self: IsrLeader) -> frozenset[NodeId]:
    return frozenset(self.record.isr)


def no_partition_epoch_check(rec: PartitionRecord, prop: IsrProposal) -> Refusal | None:
    return ORIGINAL_REFUSAL(rec, replace(prop, partition_epoch=rec.partition_epoch))


def expansion_without_epoch_start(self: IsrLeader, state: Any) -> bool:
    return state.match is not None and state.match >= self.hwm


def any_answer_settles(self: IsrLeader, prop: IsrProposal, result: isr.AlterResult) -> None:
    self.committed(result.record)
    if result.refusal is not None:
        self.pending = None


def hwm_below_min_insync(self: IsrLeader, min_insync: int | None = None) -> bool:
    return not self.deposed


def gives_up_whatever_the_record(self: PartitionRecord, leader_epoch: Epoch) -> bool:
    return True


ORIGINAL_REGISTERED = isr.registered


def a_restart_keeps_the_isr(
    rec: PartitionRecord, node: NodeId, *, first: bool, clean: bool, min_insync: int
) -> PartitionRecord:
    del clean
    return ORIGINAL_REGISTERED(rec, node, first=first, clean=True, min_insync=min_insync)


MUTANTS = {
    "rule-2-hwm-over-committed-isr": (IsrLeader, "maximal_isr", hwm_over_committed_isr_only),
    "rule-3-no-partition-epoch-check": (isr, "_refusal", no_partition_epoch_check),
    "rule-5-no-epoch-start-check": (IsrLeader, "_may_join", expansion_without_epoch_start),
    "any-answer-settles-pending": (IsrLeader, "answered", any_answer_settles),
    "rule-8-no-strict-min-isr": (IsrLeader, "acks_all_allowed", hwm_below_min_insync),
    "rule-9-a-restart-keeps-the-isr": (isr, "registered", a_restart_keeps_the_isr),
    "rule-11-gives-up-without-unclean-election": (
        PartitionRecord,
        "may_give_up",
        gives_up_whatever_the_record,
    ),
}
FORGED_WALK = 28  # the gate's first walk that catches rule 11's mutant (`isr` seed 1)
SEEDS_TO_CATCH = 2000


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_random_walk_catches_each_mutant(name: str) -> None:
    target, attribute, weakened = MUTANTS[name]
    with patched(target, attribute, weakened), pytest.raises(Violation):
        for seed in range(SEEDS_TO_CATCH):
            random_walk(seed, steps=300)
