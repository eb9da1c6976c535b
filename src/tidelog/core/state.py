"""The state one replica holds in either mode, its role changes, and the HWM with the
produces that wait for it (core/replica.py).

`ReplicaState` is what the replica's parts share. Each part is a file that adds the
functions of one concern to the same object, as etcd-io/raft's files add to one `raft`
struct: requests.py (the client's produces and reads), follow.py (the follower's path),
replicate.py (the leader's pipeline); replica.py is the door that joins them. A part uses
only this state and its own functions; no part overrides another's; where the modes
differ, a part asks `self.mode` (core/roles.py).

Rules of this file:
- A role changes only through `_set_role`, along `ROLE_TRANSITIONS` (core/roles.py):
  `become_follower` from any role, `become_leader` from the role the mode leads from;
  quorum mode's candidacies (mode/quorum.py) go through `_set_role` too.
- A new leader starts its epoch with a control batch of that epoch (KIP-207), appended
  through the log as any batch, and fresh progress for every follower.
- A deposed leader answers every produce still waiting with NotLeader.
- The HWM only grows here (`_raise_hwm`), never past the log end, and a leader's only
  where the mode says it may (`Mode.hwm_candidate`); the two places it goes back are named
  where they are (a follower's reset, ISR mode's unclean recovery).
- A produce completes at once (acks=0), once the leader's copy is durable (acks=1) or
  once the HWM passes it (acks=all); a deadline bounds the wait, `pending_produces_max`
  the queue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from tidelog.core.config import NO_LIVENESS, Liveness, ReplicaConfig
from tidelog.core.log import ReplicaLog
from tidelog.core.membership import ReplicaKey, VoterSet, voters_batch
from tidelog.core.messages import HardState, LostCopy, Message, ProduceResult
from tidelog.core.producers import ProducerStates
from tidelog.core.roles import ROLE_TRANSITIONS, Mode, Role
from tidelog.core.storage import LogStorage, RepairFloor
from tidelog.core.tracker import Progress
from tidelog.errors import NotLeader, RequestTimedOut, TidelogError
from tidelog.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    build_control_batch,
    check_batch,
    leader_change_message,
    read_header,
)
from tidelog.types import NO_EPOCH, DirectoryId, Epoch, NodeId, Offset

REBUILD_CHUNK_BYTES = 4 << 20


ACKS_NONE: Final = 0
"""Answered at once, before anything is durable."""
ACKS_LEADER: Final = 1
"""Answered once the leader's own copy is durable."""
ACKS_ALL: Final = -1
"""Answered once the HWM passed the batch."""


@dataclass(slots=True)
class _PendingProduce:
    request_id: int
    base_offset: Offset
    next_offset: Offset
    acks: int
    deadline_tick: int
    retried: bool = False  # answered with the offsets of the batch it repeats


class ReplicaState:
    """What a replica holds in either mode: its log, epoch, role, watermarks, followers'
    progress, produce queue and output; and its role changes. See core/replica.py."""

    mode: Mode  # set by `Replica`, once the state exists

    def __init__(
        self, config: ReplicaConfig, storage: LogStorage, liveness: Liveness = NO_LIVENESS
    ) -> None:
        state = storage.load()
        self.config = config
        self.liveness = liveness
        self.id = config.node_id
        self.log = ReplicaLog(storage, state, config.first_voters)
        self._peers: tuple[NodeId, ...] = ()
        self._peers_of: tuple[ReplicaConfig, VoterSet] | None = None
        # This copy of the log (KIP-853): it votes, campaigns and counts only while its key
        # is in the voter set its log holds (`log.voters`, core/membership.py).
        self.key = ReplicaKey(self.id, state.directory_id)
        self.producers = ProducerStates()
        self.producers.restore(state.producers)  # the snapshot at the log start, then
        self._rebuild_producer_states()  # the log above it
        self.epoch = state.hard_state.epoch
        self.voted_for = state.hard_state.voted_for
        self.persisted_hard_state = state.hard_state
        self.hwm = state.hwm
        self.hwm_in_ready = state.hwm
        self.repair_floor: RepairFloor | None = state.repair_floor
        self.repair_floor_to_clear = False
        self.role = Role.FOLLOWER
        self.leader_id: NodeId | None = None
        self.follower_synced = False  # verified against the current leader in this epoch
        self.epoch_start_offset = Offset(0)  # where the leader's own epoch begins
        self.now_ms = 0
        self.leader_since_ms = 0  # the clock when this replica last became leader
        self.wall_clock_ms = 0
        self.tick_count = 0
        self.heartbeat_elapsed = 0
        self.progress: dict[NodeId, Progress] = {}
        self.pending: deque[_PendingProduce] = deque()
        self.msgs: list[Message] = []
        self.msgs_after_persist: list[Message] = []
        self.completions: list[ProduceResult] = []
        self.lost_copies: list[LostCopy] = []  # followers that proved they lost records
        self.ready_outstanding = False
        self.ready_log_end_offset = self.log.log_end_offset
        self.append_seq = 0
        self.throttle_credit = 0.0  # bytes the leader may still send to throttled copies
        # Quiescence (core/quiesce.py): whether this replica sleeps; a leader's first
        # quiesce append; the liveness session a follower quiesced in.
        self.quiesced = False
        self.quiesce_seq = 1 << 62
        self.quiesce_session: int | None = None
        self.woken_seq = 0  # a leader's first request after it last woke
        self.quiesce_pings = 0  # the leader's node heartbeats a follower took when it slept
        self.quiesce_append_seq = -1  # and the seq of the quiesce append it slept on
        self.leader_seq = -1  # the latest request a follower took from its leader's term
        self._maybe_finish_repair()

    # ================================================================== roles ===========
    def _set_role(self, role: Role) -> None:
        """The one place a role changes (rules of this file)."""
        assert role in ROLE_TRANSITIONS[self.role], f"{self.role.value} -> {role.value}"
        self.role = role
        self.quiesced = False  # a new role is awake (core/quiesce.py)

    def become_follower(self, epoch: Epoch, leader: NodeId | None) -> None:
        assert epoch >= self.epoch
        if epoch > self.epoch or leader != self.leader_id:
            self.leader_seq = -1  # another term's requests: their seqs are not comparable
        if epoch > self.epoch:
            self.epoch = epoch
            self.voted_for = None
        was_leader = self.role is Role.LEADER
        self._set_role(Role.FOLLOWER)
        if leader != self.leader_id:
            self.follower_synced = False
        self.leader_id = leader
        self.progress.clear()
        self.mode.on_become_follower()
        if was_leader:
            self._fail_pending(NotLeader(leader))

    def become_leader(self, granting: tuple[NodeId, ...]) -> None:
        """Lead this epoch from our log end: fresh progress for every follower, and a
        control batch of the epoch naming `granting` (the voters that elected us, or the
        ISR that the controller's record names) as its first batch (KIP-207)."""
        assert self.role is self.mode.leads_from
        self._set_role(Role.LEADER)
        self.leader_id = self.id
        self.leader_since_ms = self.now_ms
        self.heartbeat_elapsed = 0
        end = self.log.log_end_offset
        self.progress = {peer: Progress(next_offset=end) for peer in self.peers}
        self.epoch_start_offset = end
        control = build_control_batch(
            base_offset=end,
            epoch=self.epoch,
            control_type=CONTROL_TYPE_LEADER_CHANGE,
            timestamp_ms=self.wall_clock_ms,
            value=leader_change_message(self.id, self.config.assigned, granting),
        )
        self.log.append(control, check_batch(control))

    def _fail_pending(self, error: TidelogError) -> None:
        while self.pending:
            head = self.pending.popleft()
            self.completions.append(ProduceResult(head.request_id, None, None, error))

    # ================================================================== the HWM and its waiters
    def _await_produce(
        self, request_id: int, base: Offset, end: Offset, acks: int, *, retried: bool = False
    ) -> None:
        """Complete a produce now (acks=0) or once its batch is durable or committed."""
        if acks == ACKS_NONE:
            self.completions.append(ProduceResult(request_id, base, end, None, retried))
            return
        deadline = self.tick_count + self.config.produce_timeout_ticks
        self.pending.append(_PendingProduce(request_id, base, end, acks, deadline, retried))
        self._complete_produces()

    def _queue_full_error(self) -> TidelogError | None:
        if len(self.pending) >= self.config.pending_produces_max:
            return RequestTimedOut("too many produce requests waiting for the HWM")
        return None

    def _maybe_advance_hwm(self) -> bool:
        """Move the HWM to where the mode says it may (rule 3), never back."""
        candidate = self.mode.hwm_candidate()
        if candidate is None or candidate <= self.hwm:
            return False
        self._raise_hwm(candidate)
        return True

    def _complete_produces(self) -> None:
        durable = self.log.durable_end_offset
        while self.pending:
            head = self.pending[0]
            done = self.hwm if head.acks == ACKS_ALL else durable
            if head.next_offset > done:
                return
            self.pending.popleft()
            self.completions.append(
                ProduceResult(
                    head.request_id, head.base_offset, head.next_offset, None, head.retried
                )
            )

    def _fail_acks_all(self, error: TidelogError) -> None:
        """Answer every acks=all produce waiting with `error`; the others wait on."""
        kept: deque[_PendingProduce] = deque()
        for pending in self.pending:
            if pending.acks == ACKS_ALL:
                self.completions.append(ProduceResult(pending.request_id, None, None, error))
            else:
                kept.append(pending)
        self.pending = kept

    def _expire_produces(self) -> None:
        while self.pending and self.pending[0].deadline_tick <= self.tick_count:
            head = self.pending.popleft()
            error = RequestTimedOut(f"offset {head.base_offset} not committed in time")
            self.completions.append(ProduceResult(head.request_id, None, None, error))

    # ================================================================== shared steps ====
    def _hard_state(self) -> HardState:
        return HardState(self.epoch, self.voted_for)

    def _raise_hwm(self, hwm: Offset) -> None:
        if hwm > self.hwm:
            assert hwm <= self.log.log_end_offset
            self.hwm = hwm

    def _maybe_finish_repair(self) -> None:
        """The durable log is at least as up to date as the repair floor: the repair is
        over (rule 8), and the next Ready tells storage to forget the floor."""
        floor = self.repair_floor
        durable = self.log.durable_end_offset
        if floor is None:
            return
        last_epoch = self.log.epoch_at(Offset(durable - 1)) if durable > 0 else NO_EPOCH
        if floor.reached_by(last_epoch, durable):
            self.repair_floor = None
            self.repair_floor_to_clear = True

    def _rebuild_producer_states(self) -> None:
        """Replay the batch headers of the log into the producer states (on start)."""
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        while offset < end:
            batches = self.log.read(offset, end_offset=end, max_bytes=REBUILD_CHUNK_BYTES)
            if not batches:
                return
            for batch in batches:
                header = read_header(batch)
                self.producers.on_append(header)
                offset = header.next_offset

    # ================================================================== membership =====
    @property
    def peers(self) -> tuple[NodeId, ...]:
        """The other nodes of the partition: its members (`config.assigned`), then the
        voters of its log that are none (a voter leaving stays a peer until a set drops it)."""
        config, voters = self.config, self.voters
        held = self._peers_of
        if held is None or held[0] is not config or held[1] is not voters:
            members = [node for node in config.assigned if node != self.id]
            leaving = sorted(voters.nodes - set(members) - {self.id})
            self._peers = (*members, *leaving)
            self._peers_of = (config, voters)
        return self._peers

    def sync_progress(self) -> None:
        """A leader follows its peers: a new one is probed from our log end, one that left
        is forgotten."""
        if self.role is not Role.LEADER:
            return
        peers = self.peers
        for peer in peers:
            if peer not in self.progress:
                self.progress[peer] = Progress(next_offset=self.log.log_end_offset)
        for peer in [peer for peer in self.progress if peer not in peers]:
            del self.progress[peer]

    @property
    def voters(self) -> VoterSet:
        """The voter set in effect: the last one our log holds (membership rule 4)."""
        return self.log.voters.current

    def is_voter(self) -> bool:
        """Whether this copy votes (else it is an observer: membership rule 6)."""
        return self.voters.voter_key(self.id, self.key.directory) is not None

    def may_stand(self) -> bool:
        """Whether this copy may campaign: it votes in the last voter set of its log, or in
        the one before while the change that removed it is not committed (Raft thesis
        §4.1: a voter removed by a change not yet committed may be needed to commit it)."""
        if self.is_voter():
            return True
        history = self.log.voters
        return (
            history.uncommitted(self.hwm)
            and history.committed(self.hwm).voter_key(self.id, self.key.directory) is not None
        )

    def counts(self, node: NodeId, directory: DirectoryId | None) -> bool:
        """Whether the copy `directory` of `node` is a voter: only a voter's answers, votes
        and matches count (membership rule 6)."""
        return directory is not None and self.voters.voter_key(node, directory) is not None

    def append_voters(self, voters: VoterSet) -> None:
        """Append a VOTERS control batch of our epoch: `voters` is in effect from here on
        (membership rule 4). The caller checked `membership.change_refusal`."""
        control = voters_batch(
            voters,
            base_offset=self.log.log_end_offset,
            epoch=self.epoch,
            timestamp_ms=self.wall_clock_ms,
        )
        self.log.append(control, check_batch(control))
        self.sync_progress()

    def counted_progress(self) -> list[Progress]:
        """The leader's progress of the followers whose copies vote."""
        return [p for peer, p in self.progress.items() if self.counts(peer, p.directory)]

    def in_sync_replicas(self) -> tuple[NodeId, ...]:
        """The in-sync replicas as the leader sees them (the mode decides: live ones in
        quorum mode, the committed ISR in ISR mode)."""
        return self.mode.in_sync_replicas()

    def in_sync_count(self) -> int:
        return len(self.in_sync_replicas())
