"""ISR mode (docs/isr.md, issue 18): the decisions of `Mode` (core/roles.py) for a replica
led by whom the controller's committed `PartitionRecord` names, committing by the in-sync
replicas. The record, its transitions and the leader's side (`IsrLeader`) are core/isr.py's.

Everything else is shared with quorum mode (core/state.py, follow.py, replicate.py,
requests.py): the log, the epoch history and truncation by it (KIP-101/279), the follower's
path, the durable-before-ack round, the producer states and the `Ready` contract. What this
mode holds (the record, `isr_leader`) is read through `Replica.isr`.

Rules of this file (rule numbers are those of docs/isr.md):
1. Leadership comes only from a committed record (`on_partition_record`, rule 4): a
   replica never campaigns, votes or steps down by check-quorum; votes and TimeoutNow
   are refused at the door. A replica takes appends only from the leader the last record
   it holds names, in that record's leader epoch (a later epoch it has not been told of
   is refused; an earlier one is fenced, as in quorum mode).
2. The replica a record names leader first makes the leader epoch and its claim on it
   durable (the hard state: the epoch, and itself as `voted_for`), and only then leads:
   it appends the epoch's control batch and its epoch-history entry as a quorum leader
   does when elected. A replica leads an epoch only if it never claimed it before: one
   that restarted holding a claim on epoch E (it may have led E, and lost part of what
   it wrote in E) refuses to lead E again, and waits for the controller's next record
   (rule 9: a restarted replica is taken out of the ISR and of its leadership).
3. The leader's HWM is `IsrLeader`'s (rules 2, 8b): the minimum durable match over the
   maximal ISR, only while |committed ISR| >= min.insync.replicas. It is fed each
   follower's verified, durable match from its append answers (KAFKA-13141: never a
   rejected one; a follower that says it is repairing is forgotten), with "fetched past
   the epoch start" meaning the match is past the epoch's control batch, i.e. the
   follower holds a batch of this epoch and so, by the log matching property, the
   leader's log up to it (rule 5, KAFKA-7128). Unlike quorum mode, records of an earlier
   epoch may commit by this count (the controller elects only from the ISR and ELR, which
   hold them all), but reads still wait for the epoch start (rule 12).
4. ISR proposals (`IsrLeader.proposal`: shrink by replica.lag.time.max.ms, expand by
   rule 5) leave in `Ready.isr_proposals`; at most one is pending, and it is sent again
   every election timeout until answered (a proposal may be lost). Answers come back
   through `on_isr_answer`; the record they carry is taken as any committed record.
5. acks=all is refused with NotEnoughReplicas while |committed ISR| <
   min.insync.replicas (rule 7); an acks=all produce waiting when the committed ISR falls
   below it is answered with NotEnoughReplicasAfterAppend. min.insync.replicas is the
   topic's, 1 when unset (Kafka's default), not a majority.
6. Reads: only below min(HWM, log end); a new leader serves none until its HWM passes
   its epoch start (rule 12, `ClientRequests._serving_error`). There is no read lease: the
   leader serves while the last record it knows names it, as Kafka's does; a deposed
   leader not yet told may serve a stale read, never an uncommitted one.
7. Every record and answer is checked at the door (`_record_refusal`): one that cannot
   be right changes nothing and the reason is returned.
8. Unclean recovery (rule 10): a replica never truncates below its HWM (rule 11), except
   when the record it holds says an unclean election happened at or before the epoch of
   the leader it follows (`PartitionRecord.may_give_up`): then a batch of that leader
   that conflicts with one committed here is taken, the HWM drops to its base, and the
   records given up are named in `Ready.given_up` (`gives_up`). A follower whose HWM
   was not checked against a leader's log since the unclean election (a successful append
   reaching it) serves no reads: what it calls committed may be given up.
"""

from __future__ import annotations

from dataclasses import replace

from tidelog.core.isr import (
    NO_LEADER,
    AlterResult,
    GivenUp,
    IsrConfig,
    IsrLeader,
    IsrProposal,
    PartitionRecord,
    effective_min_insync,
)
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.quiesce import Quiescence
from tidelog.core.roles import ElectionMessage, Role
from tidelog.core.state import ACKS_ALL
from tidelog.errors import NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeader, TidelogError
from tidelog.records import BatchHeader
from tidelog.types import EPOCH_MAX, Epoch, NodeId, Offset


class IsrMode:
    """The ISR decisions of one replica, and what it holds of the controller's record.
    The replica hands it every committed record of its partition (`on_partition_record`)
    and the controller's answers (`on_isr_answer`)."""

    leads_from = Role.FOLLOWER

    def __init__(self, replica: Quiescence) -> None:
        self.r = replica
        self.record: PartitionRecord | None = None  # the latest committed record known
        self.isr_leader: IsrLeader | None = None  # while leading
        self.appointed: Epoch | None = None  # named leader; waiting for the claim's sync
        self.isr_outbox: list[IsrProposal] = []
        self.proposal_sent_tick = 0
        self.woken = False  # a quiesced leader woke: its next tick dates its followers
        self.leader_silent_ticks = 0  # a follower's ticks without its leader's appends
        # Rule 8 of this file: the leader epoch in which our HWM was last found within a
        # leader's log, and the committed records given up since the last Ready.
        self.hwm_checked_epoch: Epoch | None = None
        self.given_up: list[GivenUp] = []
        self.clock_read = False  # `now_ms` reads 0 until a tick hands in the clock

    # ================================================================== the controller ==
    def on_partition_record(self, record: PartitionRecord) -> str | None:
        """A committed record of this partition (rule 4). None when taken (or already
        known); else why it cannot be right, for the caller to log (nothing changed)."""
        refusal = self._record_refusal(record)
        if refusal is not None:
            return refusal
        if self.record is not None and record.partition_epoch <= self.record.partition_epoch:
            return None  # a copy, or older than what we hold
        self.record = record
        if record.leader == self.r.id:
            refusal = self._on_named_leader(record)
        else:
            self._follow(record)
        self._maybe_propose()
        return refusal

    def on_isr_answer(self, proposal: IsrProposal, result: AlterResult) -> str | None:
        """The controller's answer to one of our proposals, its record committed. None
        when taken; else why its record cannot be right (nothing changed)."""
        refusal = self.on_partition_record(result.record)
        if refusal is not None:
            return refusal
        if self.isr_leader is not None:
            self.isr_leader.answered(proposal, result)
            self._on_isr_changed()
            self._maybe_propose()
        return None

    def declines_leadership(self) -> bool:
        """Whether the record it holds names it leader of an epoch it will not lead (it
        claimed that epoch before it started again: rule 2 of this file), so the
        controller must take it out of the ISR and elect another (rule 9)."""
        record = self.record
        r = self.r
        return (
            record is not None
            and record.leader == r.id
            and record.leader_epoch == r.epoch
            and r.role is not Role.LEADER
            and self.appointed is None
        )

    def hwm_checked(self) -> bool:
        """False while our HWM may cover records an unclean election gave up: not checked
        against a leader's log since (rule 8 of this file)."""
        unclean = None if self.record is None else self.record.unclean_epoch
        checked = self.hwm_checked_epoch
        return unclean is None or (checked is not None and checked >= unclean)

    # ================================================================== inputs ==========
    def tick(self, now_ms: int | None) -> None:
        """A leader named before the clock was first handed in dated its followers by a
        clock reading 0: they are dated from the clock's first reading, or every one of
        them would look lagging since the clock's zero (rule 6). No election timer: the
        controller elects (rule 4)."""
        if now_ms is not None and (self.woken or not self.clock_read):
            self.clock_read = True
            self.woken = False
            if self.isr_leader is not None:
                self.isr_leader.clock_started(now_ms)
        if self.r.role is Role.LEADER:
            self._tick_leader()
        else:
            self.leader_silent_ticks += 1
            if self.leader_silent_ticks >= self.r.config.election_ticks:
                self.leader_silent_ticks = 0
                self.r.wake_peers()  # a restarted follower's quiesced leader (core/quiesce.py)

    def campaign(self) -> None:
        """Never: in ISR mode the controller elects (rule 4)."""

    def transfer_leadership(self, target: NodeId) -> str | None:
        del target
        return f"ISR mode: the controller chooses the leader, not node {self.r.id}"

    def refusal(self, msg: Message) -> str | None:
        """ISR mode's door, after the shared one (rule 1 of this file)."""
        if isinstance(msg, VoteRequest | VoteResponse | TimeoutNow):
            return f"ISR mode holds no elections: {type(msg).__name__} from node {msg.sender}"
        record = self.record
        named = record is not None and (msg.sender, msg.epoch) == (
            record.leader,
            record.leader_epoch,
        )
        if isinstance(msg, AppendRequest) and msg.epoch >= self.r.epoch and not named:
            return (
                f"an append from node {msg.sender} in epoch {msg.epoch}, which no record "
                "here names leader of"
            )
        return None

    def on_higher_epoch_vote(self, msg: VoteRequest | VoteResponse) -> bool:
        raise AssertionError(f"refused at the door: {msg}")

    def step_election(self, msg: ElectionMessage) -> None:
        raise AssertionError(f"refused at the door: {msg}")

    def on_leader_contact(self) -> None:
        """No election timer, no lease: only how long a follower went without its
        leader's appends (a quiesced leader is asked to wake after an election timeout)."""
        self.leader_silent_ticks = 0

    def on_leader_lost(
        self, *, first: bool, lease_over: bool = True, designated: NodeId | None = None
    ) -> None:
        del first, lease_over, designated  # the controller elects: it fences a dead node

    def may_quiesce(self) -> bool:
        """A leader quiesces with no ISR proposal waiting for the controller's answer, and
        (core/quiesce.py rule 1) every member caught up: the whole ISR. Not while node
        liveness says an ISR member is dead: awake, it shrinks the ISR in time."""
        r = self.r
        leader = self.isr_leader
        return (
            leader is not None
            and leader.pending is None
            and all(r.liveness.is_live(node) for node in leader.record.isr if node != r.id)
        )

    def on_wake(self) -> None:
        """Asleep, it did not watch its followers: the first tick after waking dates each
        one's last catch-up from then (as `clock_started`), so that no follower leaves
        the ISR for the time the partition slept; one that does not answer leaves it a
        replica.lag.time.max.ms later."""
        self.woken = True

    # ================================================================== the door ========
    def _record_refusal(self, record: PartitionRecord) -> str | None:
        """Why a committed record cannot be right here, or None (rule 7 of this file)."""
        config = self.r.config
        if set(record.replicas) != set(config.assigned) or len(record.replicas) != len(
            config.assigned
        ):
            return f"a record naming replicas {record.replicas}, not {config.assigned}"
        if record.leader != NO_LEADER and record.leader not in record.replicas:
            return f"a record naming leader {record.leader}, no replica"
        if not set(record.isr) | set(record.elr) <= set(record.replicas):
            return f"a record with ISR {record.isr} and ELR {record.elr} beyond the replicas"
        if not 0 <= record.leader_epoch <= EPOCH_MAX or record.partition_epoch < 0:
            return f"a record with leader epoch {record.leader_epoch}"
        if record.restarts and (
            len(record.restarts) != len(record.replicas) or min(record.restarts) < 0
        ):
            return f"a record counting restarts {record.restarts} of replicas {record.replicas}"
        unclean = record.unclean_epoch
        if unclean is not None and not 0 <= unclean <= record.leader_epoch:
            return f"a record with an unclean election in epoch {unclean}"
        known = self.record
        if known is not None and record.partition_epoch <= known.partition_epoch:
            return None  # a copy or an old one: ignored
        if record.leader_epoch < self.r.epoch:
            return f"a record of leader epoch {record.leader_epoch}, older than {self.r.epoch}"
        return None

    # ================================================================== roles ===========
    def _on_named_leader(self, record: PartitionRecord) -> str | None:
        """The record names us leader (rule 2 of this file)."""
        r = self.r
        epoch = record.leader_epoch
        if r.role is Role.LEADER and r.epoch == epoch:
            assert self.isr_leader is not None
            # An ISR change in our epoch; a follower that started again since is counted
            # only on its answers from now on (rule 9).
            for node in self.isr_leader.committed(record):
                if (progress := r.progress.get(node)) is not None:
                    progress.forget_match(progress.next_offset, seq_min=r.append_seq + 1)
            self._on_isr_changed()
            return None
        if self.appointed == epoch:
            return None  # still making the claim durable; it leads with the latest record
        if epoch == r.epoch and r.voted_for is not None:
            r.become_follower(epoch, None)
            return f"node {r.id} claimed leader epoch {epoch} before: it leads only a later one"
        r.become_follower(epoch, None)
        r.voted_for = r.id  # the claim, durable before we lead (`after_advance`)
        self.appointed = epoch
        self._maybe_take_leadership()
        return None

    def _follow(self, record: PartitionRecord) -> None:
        """The record names another leader, or none (offline)."""
        r = self.r
        leader = None if record.leader == NO_LEADER else record.leader
        changed = r.role is Role.LEADER or r.leader_id != leader
        if record.leader_epoch > r.epoch or changed or self.appointed is not None:
            r.become_follower(record.leader_epoch, leader)

    def on_become_follower(self) -> None:
        self.isr_leader = None
        self.appointed = None
        self.isr_outbox.clear()

    def _maybe_take_leadership(self) -> None:
        """Lead the epoch we were named for, once our claim on it is durable."""
        r = self.r
        record = self.record
        if self.appointed is None or record is None or self.appointed != r.epoch:
            return
        if r.persisted_hard_state != r._hard_state():
            return
        assert record.leader == r.id and record.leader_epoch == r.epoch
        self.appointed = None
        self.hwm_checked_epoch = r.epoch  # our log is the truth of this epoch
        r.become_leader(record.isr)
        self.isr_leader = IsrLeader(
            r.id,
            record,
            self._isr_config(),
            epoch_start_offset=r.epoch_start_offset,
            log_end=r.log.durable_end_offset,
            hwm=r.hwm,
            now_ms=r.now_ms,
        )
        self.proposal_sent_tick = r.tick_count

    def _isr_config(self) -> IsrConfig:
        config = self.r.config
        return IsrConfig(
            min_insync=config.min_insync_replicas or 1,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
        )

    def _tick_leader(self) -> None:
        """Heartbeats, produce deadlines and ISR proposals; no check-quorum."""
        r = self.r
        r.heartbeat_elapsed += 1
        if r.heartbeat_elapsed >= r.config.heartbeat_ticks:
            r.heartbeat_elapsed = 0
            if r.maybe_quiesce():
                return  # the quiesce appends are this heartbeat (core/quiesce.py)
            r._heartbeat()
        r._expire_produces()
        self._maybe_propose()

    # ================================================================== the leader ======
    def on_append_answered(self, msg: AppendResponse) -> None:
        r = self.r
        leader = self.isr_leader
        if r.role is not Role.LEADER or leader is None:
            return
        progress = r.progress[msg.sender]
        match = progress.match_offset
        leader.log_end(r.log.durable_end_offset)
        if match is None or progress.repairing:
            leader.follower_lost(msg.sender)
        elif msg.success:
            leader.follower_fetched(
                msg.sender, match, r.now_ms, past_epoch_start=match > r.epoch_start_offset
            )
        if r._maybe_advance_hwm():
            r._complete_produces()
        self._maybe_propose()

    def hwm_candidate(self) -> Offset | None:
        """The HWM is IsrLeader's (rule 3 of this file), fed our own durable log end."""
        leader = self.isr_leader
        if leader is None:
            return None
        leader.log_end(self.r.log.durable_end_offset)
        return leader.hwm

    def _on_isr_changed(self) -> None:
        """A committed record or an answer moved the ISR: the HWM may move, and acks=all
        produces waiting below min.insync.replicas are answered with an error (rule 7)."""
        leader = self.isr_leader
        assert leader is not None
        if self.r._maybe_advance_hwm():
            self.r._complete_produces()
        if not leader.acks_all_allowed():
            isr, required = self._isr_counts()
            self.r._fail_acks_all(NotEnoughReplicasAfterAppend(isr, required))

    def _isr_counts(self) -> tuple[int, int]:
        """(|committed ISR|, the min.insync.replicas it needs)."""
        leader = self.isr_leader
        assert leader is not None
        return len(leader.record.isr), effective_min_insync(leader.record, leader.config.min_insync)

    def _maybe_propose(self) -> None:
        """Queue the next ISR proposal, or the pending one again once an election timeout
        passed without an answer (rule 4 of this file)."""
        r = self.r
        leader = self.isr_leader
        if r.role is not Role.LEADER or leader is None:
            return
        proposal = leader.proposal(r.now_ms)
        resend_due = r.tick_count - self.proposal_sent_tick >= r.config.election_ticks
        if proposal is None and leader.pending is not None and resend_due:
            proposal = leader.pending
        if proposal is not None:
            self.isr_outbox.append(proposal)
            self.proposal_sent_tick = r.tick_count

    def produce_error(self, acks: int) -> TidelogError | None:
        r = self.r
        if r.role is not Role.LEADER or self.isr_leader is None:
            return NotLeader(r.leader_id)
        full = r._queue_full_error()
        if full is not None:
            return full
        if acks == ACKS_ALL and not self.isr_leader.acks_all_allowed():
            return NotEnoughReplicas(*self._isr_counts())
        return None

    def has_read_lease(self, now_ms: int | None) -> bool:
        """No lease in ISR mode (rule 6 of this file): the leader serves while it leads."""
        del now_ms
        return self.r.role is Role.LEADER

    def in_sync_replicas(self) -> tuple[NodeId, ...]:
        """The committed ISR, as the leader holds it; () on a follower."""
        if self.isr_leader is None:
            return ()
        return self.isr_leader.record.isr

    def on_config_changed(self) -> None:
        if self.isr_leader is not None:
            self.isr_leader.config = self._isr_config()
            self._on_isr_changed()

    # ================================================================== unclean recovery
    def serving_error(self) -> TidelogError | None:
        r = self.r
        if r.role is Role.FOLLOWER and not self.hwm_checked():
            return NotLeader(r.leader_id)
        return None

    def gives_up(self, header: BatchHeader) -> bool:
        """A leader's batch conflicting with a committed one here is taken, giving up what
        we committed from its base on, when an unclean election allows it (rule 8 of this
        file)."""
        r = self.r
        record = self.record
        if not (
            record is not None
            and record.may_give_up(r.epoch)
            and r.role is Role.FOLLOWER
            and r.leader_id == record.leader
            and header.base_offset >= r.log.log_start_offset
        ):
            return False
        unclean = record.unclean_epoch
        assert unclean is not None
        self.given_up.append(GivenUp(header.base_offset, r.hwm, record.leader, r.epoch, unclean))
        r.hwm = header.base_offset  # back, below what we committed (rule 10)
        # Storage lowers its saved HWM there first (`Ready.given_up`): the HWM this replica
        # reaches again in the same round is saved anew, even if it is the old one.
        r.hwm_in_ready = Offset(min(r.hwm_in_ready, header.base_offset))
        return True

    def on_follower_appended(self, end: Offset) -> None:
        if end >= self.r.hwm:
            self.hwm_checked_epoch = self.r.epoch  # all we call committed is the leader's

    # ================================================================== output ==========
    def has_output(self) -> bool:
        return bool(self.isr_outbox or self.given_up)

    def take_output(self, ready: Ready) -> Ready:
        if self.isr_outbox:
            proposals = tuple(self.isr_outbox)
            self.isr_outbox.clear()
            ready = replace(ready, isr_proposals=proposals)
        if self.given_up:
            ready = replace(ready, given_up=tuple(self.given_up))
            self.given_up.clear()
        return ready

    def after_advance(self) -> None:
        self._maybe_take_leadership()
