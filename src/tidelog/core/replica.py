"""The replica of one partition: a sans-IO replication state machine (etcd-io/raft, h11).

This file is the replica's door: `step`, `tick`, `propose`, `ready`, `advance`, `status`
and the controller's inputs in ISR mode. One `Replica` class serves both modes. It joins
parts, one concern a file, each adding to the same state: core/state.py (the state, role
changes, the HWM and the produces waiting for it), requests.py (produces and reads),
follow.py (the follower's path), replicate.py (the leader's pipeline). And it holds one
`Mode` (core/roles.py) that decides where the modes differ: mode/quorum.py (elections,
pre-vote, the lease, check-quorum, transfer, Raft's Figure 8) or mode/isr.py (the
controller's record, `IsrLeader`; docs/isr.md). `config.replication` chooses it;
`replica.isr` is ISR mode's state, None in quorum mode. The rules below hold for the
whole replica; the parts cite them by number.

Rules of this file:
1. No IO, no clock, no randomness of its own: ticks, messages and client requests come in;
   a `Ready` comes out; the caller persists, sends, then calls `advance`.
2. The epoch and the vote are durable before anything that depends on them leaves: votes
   and append acknowledgements travel in `messages_after_persist` (ZOOKEEPER-4646), and a
   candidate counts its own vote only after `advance`.
3. The HWM (exclusive) is the largest offset below which `quorum_size` replicas hold the log
   durably, counting the leader's own copy only once it is durable (Jepsen NATS 2.12.1). It
   moves only to an offset inside the leader's own epoch (Raft Figure 8) and never back.
4. A follower finds divergence by epochs, never by its HWM (KIP-101/279); it truncates only
   where its log conflicts with the leader's, never below its HWM, and only then takes
   HWM = min(leader HWM, end of the prefix it verified) (KAFKA-14704).
5. Clients read only below min(HWM, log end offset). A new leader first appends a control
   batch of its epoch and serves no reads until its HWM passes it (KIP-207, Raft §8).
6. A message of an older epoch is answered with the current epoch and changes nothing
   (KIP-320). A leader that has not heard from a majority for an election timeout steps
   down (check-quorum); a replica that heard from a leader within one ignores votes and
   pre-votes (leader lease), so a healed node cannot depose a healthy leader.
7. A follower behind the leader's log start is reset to it; the reset names the epoch of
   the record before it, and a follower holding that record keeps its log: nothing it
   acknowledged is ever dropped, so a follower's match only grows, except when the follower
   says it is repairing (rule 8) or proves it lost records: it refuses a probe (sent after
   its match was taken) with a log ending below that match (its copy lost with a disk,
   scenario 26). Another answer ending below the match may have been overtaken by later
   ones: the leader asks again, at the match. A probing leader takes only the answer to
   its probe (requests carry a seq), and a reset that is lost is sent again as a reset
   (scenarios 19, 20). An emptied log still knows the epoch of its last record, for votes
   and consistency checks (scenario 22).
8. A replica whose storage set damaged records aside starts with a repair floor: how far
   its log reached before (it may have acknowledged all of it). Until its durable log is
   at least as up to date again, it grants votes and pre-votes only to candidates at or
   above the floor, never campaigns (so never leads), and marks its append answers
   `repairing`; a leader that hears so forgets the follower's match and everything it
   answered before, and does not count it as in sync (KIP-966, scenarios 14 and 16). Its
   HWM is what storage recovered, min(old HWM, log end): the one case where a replica's
   HWM goes back, across the restart that found the damage.
9. Every message is hostile until checked at the door (`step`): one addressed to another
   node, from a node that is no replica, with impossible offsets or epochs (an epoch past
   EPOCH_MAX, Kafka's int32), an append in an epoch this replica leads, or from a node
   other than the leader it knows in that epoch, an answer claiming more of the log than
   the leader holds, or a TimeoutNow from a node other than the leader it knows, cannot be
   right; it changes nothing and `step` returns why. No message can trip an assertion:
   assertions are for our own bugs.
10. A leader may hand its leadership to a replica (`transfer_leadership`, Raft thesis
   §3.10): it takes no produce from then on, brings the target's durable log up to its
   own, then sends it TimeoutNow, and from that moment serves no reads for the rest of its
   epoch (the target's campaign is marked `transfer`, and voters grant it inside their
   lease: the lease no longer protects this leader's reads). A transfer not done within an
   election timeout ends: before TimeoutNow left, the leader goes on leading; after, it
   steps down, since it holds no lease any more. Only the leader a replica knows in its
   epoch can make it campaign so, and a replica under repair never does (rule 8).
11. A copy of the log is its node and its storage's directory id (KIP-853's ReplicaKey,
   core/membership.py); append answers and votes carry it. Votes, matches, the lease and
   check-quorum count only the copies the voter set names (the set the log holds:
   `ReplicaConfig.first_voters`, then each VOTERS control batch where it is appended): a
   node back on an empty disk is a new copy, an observer that follows but never votes,
   campaigns or counts, and its leader forgets the old copy's matches at the new copy's
   first answer and, in quorum mode, replaces the old key by the new one, one change at a
   time (mode/quorum.py, scenarios 28-30).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from tidelog.core.config import LEASE_MARGIN_TICKS, NO_LIVENESS, Liveness, ReplicaConfig, Rng
from tidelog.core.follow import FollowerPath
from tidelog.core.isr import AlterResult, IsrProposal, PartitionRecord
from tidelog.core.membership import ReplicaKey, decode_voters, voters_in_batch
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    Message,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    WakeUp,
)
from tidelog.core.mode.isr import IsrMode
from tidelog.core.mode.quorum import QuorumMode
from tidelog.core.producers import decode_entries
from tidelog.core.quiesce import Quiescence
from tidelog.core.requests import ClientRequests
from tidelog.core.roles import Replication, Role
from tidelog.core.state import ACKS_ALL, ACKS_LEADER, ACKS_NONE
from tidelog.core.storage import LogStorage, RepairFloor
from tidelog.records import HEADER_SIZE, read_header
from tidelog.types import EPOCH_MAX, NO_DIRECTORY, NO_EPOCH, DirectoryId, Epoch, NodeId, Offset

__all__ = [
    "ACKS_ALL",
    "ACKS_LEADER",
    "ACKS_NONE",
    "LEASE_MARGIN_TICKS",
    "NO_LIVENESS",
    "FollowerStatus",
    "Liveness",
    "Replica",
    "ReplicaConfig",
    "ReplicaStatus",
    "Replication",
    "Rng",
    "Role",
]


def _voters_can_be(msg: AppendRequest) -> bool:
    """A reset carries one readable voter set, any other append none, and every VOTERS
    batch it carries can be read (rule 9): each replica must read the same sets."""
    if len(msg.voters) != (1 if msg.reset else 0):
        return False
    try:
        if msg.reset:
            decode_voters(msg.voters[0])
        for batch in msg.batches:
            if len(batch) >= HEADER_SIZE and read_header(batch).is_control:
                voters_in_batch(batch)
    except (ValueError, struct.error):
        return False
    return True


@dataclass(frozen=True, slots=True)
class FollowerStatus:
    """One follower as its leader sees it: the copy that answers (None before any answer),
    whether that copy votes, how far its log is verified durable (None: not known), and
    the leader's clock (`tick(now_ms=)`) when it sent the latest request that copy
    answered (None: none in this term)."""

    node: NodeId
    directory: DirectoryId | None
    voter: bool
    match_offset: Offset | None
    contact_ms: int | None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """A replica as everything outside the core sees it (`Replica.status()`): a value that
    does not change under the reader."""

    node_id: NodeId
    replicas: tuple[NodeId, ...]  # every replica of the partition, this one included
    role: Role
    epoch: Epoch
    leader_id: NodeId | None
    hwm: Offset
    log_start_offset: Offset
    log_end_offset: Offset
    durable_end_offset: Offset
    in_sync_replicas: tuple[NodeId, ...]  # as the leader sees them; () on a follower
    epoch_start_offset: Offset  # where the leader's own epoch begins (its first offset)
    # Set while damage set aside is not made good again (rule 8): how far the log reached.
    repair_floor: RepairFloor | None
    # This copy's directory id, and the voter set the log holds (rule 11: KIP-853).
    directory_id: DirectoryId = NO_DIRECTORY
    voters: tuple[ReplicaKey, ...] = ()
    voters_committed: bool = True  # whether the HWM passed the batch that made `voters`
    # The settings changed since it was made: the voter target (core/config.py's
    # `voter_target`; `replicas` above are its members), min.insync.replicas, the throttle.
    target: tuple[NodeId, ...] = ()
    min_insync_replicas: int | None = None
    throttle_bytes_per_s: int | None = None
    quiesced: bool = False  # asleep (core/quiesce.py): no ticks needed
    # A leader's view of each follower (DescribeQuorum's ReplicaState); () on a follower.
    followers: tuple[FollowerStatus, ...] = ()

    @property
    def readable_end(self) -> Offset:
        """What a consumer may read up to: the HWM, within the log."""
        return Offset(min(self.hwm, self.log_end_offset))

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER


class Replica(ClientRequests, FollowerPath, Quiescence):
    """One partition's replica, in the mode `config.replication` names. Drive it with
    `step`, `tick`, `propose` (and, in ISR mode, `on_partition_record`, `on_isr_answer`;
    with quiescence, `on_node_change`); drain `ready`, then `advance`. A `quiesced`
    replica needs no ticks (core/quiesce.py)."""

    def __init__(
        self,
        config: ReplicaConfig,
        storage: LogStorage,
        rng: Rng,
        liveness: Liveness = NO_LIVENESS,
    ) -> None:
        super().__init__(config, storage, liveness)
        self._isr: IsrMode | None = None
        if config.replication is Replication.ISR:
            self._isr = IsrMode(self)
            self.mode = self._isr
        else:
            self.mode = QuorumMode(self, rng)

    # ================================================================== inputs ==========
    def tick(self, *, now_ms: int | None = None, wall_clock_ms: int | None = None) -> None:
        """One unit of logical time passes.

        `now_ms` is a monotonic clock (it dates the read lease); `wall_clock_ms` is the time
        of day, used only as the timestamp of the control batches the replica writes."""
        assert not self.ready_outstanding
        if now_ms is not None:
            self.now_ms = now_ms
        if wall_clock_ms is not None:
            self.wall_clock_ms = wall_clock_ms
        if self.quiesced:
            return  # asleep: time does not count (core/quiesce.py)
        self.tick_count += 1
        if self.role is Role.LEADER:
            self.refill_throttle()
        self.mode.tick(now_ms)

    def campaign(self) -> None:
        """Start an election now, as if the election timer fired (etcd-io/raft's MsgHup).
        A replica under repair never does (rule 8), nor one in ISR mode (the controller
        elects), nor a quiesced one (core/quiesce.py rule 3)."""
        assert not self.ready_outstanding
        if not self.quiesced:
            self.mode.campaign()

    def propose(self, request_id: int, batch: bytes, *, acks: int) -> None:
        """A produce (core/requests.py); it wakes a quiesced leader first."""
        self.wake()
        super().propose(request_id, batch, acks=acks)

    def delete_records(self, offset: Offset) -> Offset:
        """DeleteRecords (core/requests.py); it wakes a quiesced leader first."""
        self.wake()
        return super().delete_records(offset)

    def set_min_insync_replicas(self, value: int | None) -> str | None:
        """The topic's min.insync.replicas changed (AlterConfigs): acks=all produces and the
        quorum that commits follow it from now on; the HWM never goes back (a larger quorum
        only waits longer, and the quorum is never below a majority). None when taken, else
        why not."""
        assert not self.ready_outstanding
        self.wake()
        try:
            self.config = replace(self.config, min_insync_replicas=value)
        except ValueError as error:
            return str(error)
        if self.role is Role.LEADER and self._maybe_advance_hwm():
            self._complete_produces()
        self.mode.on_config_changed()
        return None

    def set_members(self, members: tuple[NodeId, ...], target: tuple[NodeId, ...]) -> str | None:
        """The partition's replica set changed (KIP-455, `ReplicaConfig.members` and
        `target`): a leader replicates to the new members from now on, and in quorum mode
        moves its voter set toward the target, one change at a time. None when taken, else
        why not."""
        assert not self.ready_outstanding
        self.wake()
        try:
            self.config = replace(self.config, members=members, target=target)
        except ValueError as error:
            return str(error)
        self.sync_progress()
        self.mode.on_config_changed()
        return None

    def set_throttle(self, bytes_per_s: int | None) -> str | None:
        """The replication throttle changed (Kafka's leader.replication.throttled.rate):
        the copies that do not vote get at most this many bytes a second from now on
        (None: no throttle). None when taken, else why not."""
        assert not self.ready_outstanding
        self.wake()
        try:
            self.config = replace(self.config, throttle_bytes_per_s=bytes_per_s)
        except ValueError as error:
            return str(error)
        return None

    def transfer_leadership(self, target: NodeId) -> str | None:
        """Hand leadership to `target`, another replica (rule 10). None when the transfer
        began (or goes on already); else why it cannot, for the caller to answer with."""
        assert not self.ready_outstanding
        self.wake()
        return self.mode.transfer_leadership(target)

    def step(self, msg: Message) -> str | None:
        """Take one message from a peer. A message that cannot be right (rule 9) changes
        nothing: the reason is returned, for the caller to log; None when it was taken."""
        assert not self.ready_outstanding
        refusal = self._refusal(msg)
        if refusal is None:
            refusal = self.mode.refusal(msg)
        if refusal is not None:
            return refusal
        if self.quiesced and self.role is Role.LEADER:
            if not self.is_idle_answer(msg):
                self.wake()  # core/quiesce.py rule 2
            elif isinstance(msg, AppendResponse):
                self.take_quiesce_answer(msg)
        self.on_leader_standing(msg)
        if msg.epoch > self.epoch and not self._on_higher_epoch(msg):
            return None
        if msg.epoch < self.epoch:
            self._on_lower_epoch(msg)
            return None
        if isinstance(msg, AppendRequest):
            self.on_append_request(msg)
        elif isinstance(msg, AppendResponse):
            self.on_append_response(msg)
        elif not isinstance(msg, WakeUp):  # it woke a quiesced leader above: nothing more
            self.mode.step_election(msg)
        return None

    def _refusal(self, msg: Message) -> str | None:
        """Why `msg` cannot be right, or None (rule 9: checked at the door, never asserted)."""
        if msg.recipient != self.id:
            return f"addressed to node {msg.recipient}, not this node {self.id}"
        if msg.sender not in self.peers:
            return f"from node {msg.sender}, no replica of this partition"
        if not 0 <= msg.epoch <= EPOCH_MAX:
            return f"from node {msg.sender} in epoch {msg.epoch}"
        if isinstance(msg, AppendRequest):
            if min(msg.prev_offset, msg.hwm, msg.log_start_offset) < 0 or msg.prev_epoch < NO_EPOCH:
                return f"an append from node {msg.sender} with impossible offsets or epochs"
            if msg.producers and not msg.reset:
                return f"a producer snapshot from node {msg.sender} on an append that is no reset"
            if msg.reset and decode_entries(msg.producers, below=msg.prev_offset) is None:
                return f"a reset from node {msg.sender} with a producer snapshot that cannot be"
            if msg.epoch == self.epoch and self.role is Role.LEADER:
                return f"an append from node {msg.sender} in epoch {msg.epoch}, which we lead"
            if msg.epoch == self.epoch and self.leader_id not in (None, msg.sender):
                return (
                    f"an append from node {msg.sender} in epoch {msg.epoch}, "
                    f"led by node {self.leader_id}"
                )
            if not _voters_can_be(msg):
                return f"an append from node {msg.sender} with a voter set that cannot be"
        elif isinstance(msg, AppendResponse):
            if min(msg.prev_offset, msg.match_offset) < 0 or msg.hint_epoch < NO_EPOCH:
                return f"an answer from node {msg.sender} with impossible offsets or epochs"
            leading = msg.epoch == self.epoch and self.role is Role.LEADER
            if leading and msg.success and msg.match_offset > self.log.log_end_offset:
                return f"an answer from node {msg.sender} holding more than the log we lead"
        elif isinstance(msg, VoteRequest) and min(msg.log_end_offset, msg.last_epoch + 1) < 0:
            return f"a vote request from node {msg.sender} with an impossible log"
        elif (
            isinstance(msg, TimeoutNow) and msg.epoch == self.epoch and self.leader_id != msg.sender
        ):
            return f"a TimeoutNow from node {msg.sender}, not the leader of epoch {msg.epoch}"
        return None

    def _on_higher_epoch(self, msg: Message) -> bool:
        """A message from a later epoch. Returns False when it is to be dropped."""
        if isinstance(msg, VoteRequest | VoteResponse):
            return self.mode.on_higher_epoch_vote(msg)
        if isinstance(msg, WakeUp):
            return False  # from one that may not campaign: no epoch to move to
        # Only a leader sends appends and TimeoutNow: the sender leads that epoch.
        leader = msg.sender if isinstance(msg, AppendRequest | TimeoutNow) else None
        self.become_follower(msg.epoch, leader)
        return True

    # ================================================================== ISR mode ========
    @property
    def isr(self) -> IsrMode | None:
        """ISR mode's state (the controller's `record`, `isr_leader`, `hwm_checked()`);
        None in quorum mode."""
        return self._isr

    def on_partition_record(self, record: PartitionRecord) -> str | None:
        """A committed record of this partition (ISR mode, docs/isr.md rule 4). None when
        taken (or already known); else why not, for the caller to log (nothing changed)."""
        assert not self.ready_outstanding
        if self._isr is None:
            return "quorum mode: the replicas elect their leader, not the controller"
        self.wake()
        return self._isr.on_partition_record(record)

    def on_isr_answer(self, proposal: IsrProposal, result: AlterResult) -> str | None:
        """The controller's answer to one of our ISR proposals, its record committed."""
        assert not self.ready_outstanding
        if self._isr is None:
            return "quorum mode: no ISR proposals"
        self.wake()
        return self._isr.on_isr_answer(proposal, result)

    def partition_record(self) -> PartitionRecord | None:
        """The latest committed record this replica took (None in quorum mode)."""
        return None if self._isr is None else self._isr.record

    def declines_leadership(self) -> bool:
        """Whether the record it holds names it leader of an epoch it will not lead
        (mode/isr.py rule 2); never in quorum mode."""
        return self._isr is not None and self._isr.declines_leadership()

    # ================================================================== status ==========
    def status(self) -> ReplicaStatus:
        """Role, epoch, leader, watermarks and in-sync replicas, as one frozen value."""
        leading = self.role is Role.LEADER
        return ReplicaStatus(
            node_id=self.id,
            replicas=self.config.assigned,
            role=self.role,
            epoch=self.epoch,
            leader_id=self.leader_id,
            hwm=self.hwm,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            durable_end_offset=self.log.durable_end_offset,
            in_sync_replicas=self.in_sync_replicas() if leading else (),
            epoch_start_offset=self.epoch_start_offset,
            repair_floor=self.repair_floor,
            directory_id=self.key.directory,
            voters=tuple(self.voters),
            voters_committed=not self.log.voters.uncommitted(self.hwm),
            target=self.config.voter_target,
            min_insync_replicas=self.config.min_insync_replicas,
            throttle_bytes_per_s=self.config.throttle_bytes_per_s,
            quiesced=self.quiesced,
            followers=self._follower_statuses() if leading else (),
        )

    def _follower_statuses(self) -> tuple[FollowerStatus, ...]:
        return tuple(
            FollowerStatus(
                node=peer,
                directory=progress.directory,
                voter=self.counts(peer, progress.directory),
                match_offset=progress.match_offset,
                contact_ms=progress.contact_sent_ms
                if progress.contact_sent_ms >= self.leader_since_ms
                else None,
            )
            for peer, progress in sorted(self.progress.items())
        )

    # ================================================================== output ==========
    def has_ready(self) -> bool:
        return bool(
            self.msgs
            or self.msgs_after_persist
            or self.completions
            or self.lost_copies
            or self.log.has_unpersisted
            or self.hwm != self.hwm_in_ready
            or self.repair_floor_to_clear
            or self.epoch != self.persisted_hard_state.epoch
            or self.voted_for != self.persisted_hard_state.voted_for
            or (self.role is Role.LEADER and self._appends_due())
            or self.mode.has_output()
        )

    def ready(self) -> Ready:
        """Everything to persist and send since the last `Ready` (see `Ready` for the order)."""
        assert not self.ready_outstanding
        if self.role is Role.LEADER:
            self._send_appends()
        hard_state = self._hard_state()
        reset_to, truncate_to, batches, log_start = self.log.take_unpersisted()
        new_start = log_start if log_start is not None else reset_to
        ready = Ready(
            hard_state=hard_state if hard_state != self.persisted_hard_state else None,
            reset_to=reset_to,
            reset_prev_epoch=self.log.reset_prev_epoch,
            reset_voters=self.log.reset_voters if reset_to is not None else None,
            producers=() if new_start is None else self.producers.snapshot(new_start),
            truncate_to=truncate_to,
            batches=batches,
            hwm=self.hwm if self.hwm != self.hwm_in_ready else None,
            log_start_offset=log_start,
            repair_floor_cleared=self.repair_floor_to_clear,
            messages=tuple(self.msgs),
            messages_after_persist=tuple(self.msgs_after_persist),
            completions=tuple(self.completions),
            lost_copies=tuple(self.lost_copies),
        )
        self.msgs.clear()
        self.msgs_after_persist.clear()
        self.completions.clear()
        self.lost_copies.clear()
        self.hwm_in_ready = self.hwm
        self.repair_floor_to_clear = False
        self.ready_log_end_offset = self.log.log_end_offset
        self.ready_outstanding = True
        return self.mode.take_output(ready)

    def advance(self, ready: Ready) -> None:
        """The caller persisted `ready` and sent its messages."""
        assert self.ready_outstanding
        self.ready_outstanding = False
        self.log.durable_end_offset = self.ready_log_end_offset
        self._maybe_finish_repair()
        if ready.hard_state is not None:
            self.persisted_hard_state = ready.hard_state
        if self.role is Role.LEADER:
            self._maybe_advance_hwm()
            self._complete_produces()
        self.mode.after_advance()
