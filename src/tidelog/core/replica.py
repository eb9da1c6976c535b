"""The replica of one partition: a sans-IO replication state machine (etcd-io/raft, h11).

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
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, replace
from typing import Protocol

from tidelog.core.log import ReplicaLog
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    FetchResult,
    HardState,
    LostCopy,
    Message,
    ProduceResult,
    Ready,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.producers import (
    ProducerEntry,
    ProducerStates,
    SequencedBatch,
    decode_entries,
    encode_entries,
)
from tidelog.core.quorum import VoteResult, committed_offset, majority, quorum_size, vote_result
from tidelog.core.storage import LogStorage, RepairFloor
from tidelog.core.tracker import Progress
from tidelog.errors import (
    ConfigError,
    CorruptBatch,
    FencedEpoch,
    LogDiverged,
    NotEnoughReplicas,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    RequestTimedOut,
    TidelogError,
    check_range,
)
from tidelog.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    BatchHeader,
    build_control_batch,
    check_batch,
    leader_change_message,
    read_header,
    stamp,
)
from tidelog.types import EPOCH_MAX, NO_EPOCH, Epoch, NodeId, Offset

ACKS_NONE = 0
ACKS_LEADER = 1
ACKS_ALL = -1
LEASE_MARGIN_TICKS = 2
REBUILD_CHUNK_BYTES = 4 << 20


class Rng(Protocol):
    """The randomness a replica is handed (random.Random fits)."""

    def randrange(self, start: int, stop: int, /) -> int: ...


class _Batch(enum.Enum):
    """A leader's batch as a follower finds it in its own log."""

    HELD = "held"  # this very batch is here (or deleted here, below the log start)
    NEW = "new"  # at our log end, or replacing a divergent uncommitted suffix
    CONFLICTS_WITH_COMMITTED = "conflicts"  # never cut: the append is refused


class Replication(enum.Enum):
    """How a partition commits (docs/isr.md): a majority quorum that elects its own leaders
    (this file), or Kafka's ISR, led by whom the controller's record names
    (`core.isr_replica.IsrReplica`)."""

    QUORUM = "quorum"
    ISR = "isr"


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


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

    @property
    def readable_end(self) -> Offset:
        """What a consumer may read up to: the HWM, within the log."""
        return Offset(min(self.hwm, self.log_end_offset))

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """The fixed settings of one replica. Raises ConfigError when they do not fit together."""

    node_id: NodeId
    replicas: tuple[NodeId, ...]
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    min_insync_replicas: int | None = None  # None: a majority of the replicas
    inflight_appends_max: int = 8
    append_bytes_max: int = 1 << 20
    produce_timeout_ticks: int = 60
    pending_produces_max: int = 10_000
    pre_vote: bool = True
    check_quorum: bool = True
    tick_ms: int = 1  # how much the clock handed to `tick(now_ms=)` moves per tick
    # ISR mode (docs/isr.md) needs `core.isr_replica.new_replica`; quorum mode ignores these.
    replication: Replication = Replication.QUORUM
    replica_lag_time_max_ms: int = 10_000

    def __post_init__(self) -> None:
        """ConfigError naming the first setting that does not fit (tidelog.errors)."""
        if self.node_id not in self.replicas:
            raise ConfigError(
                f"ReplicaConfig.node_id: {self.node_id} is not among the replicas {self.replicas}"
            )
        if len(set(self.replicas)) != len(self.replicas):
            raise ConfigError(f"ReplicaConfig.replicas: {self.replicas} name a node twice")
        check_range("ReplicaConfig.heartbeat_ticks", self.heartbeat_ticks, 1)
        if self.election_ticks - LEASE_MARGIN_TICKS <= self.heartbeat_ticks:
            raise ConfigError(
                f"ReplicaConfig.election_ticks: {self.election_ticks} must exceed "
                f"heartbeat_ticks {self.heartbeat_ticks} by the lease margin {LEASE_MARGIN_TICKS}"
            )
        check_range("ReplicaConfig.tick_ms", self.tick_ms, 1)
        if self.min_insync_replicas is not None:
            check_range(
                "ReplicaConfig.min_insync_replicas (min.insync.replicas)",
                self.min_insync_replicas,
                1,
                len(self.replicas),
            )
        check_range("ReplicaConfig.inflight_appends_max", self.inflight_appends_max, 1)
        check_range("ReplicaConfig.append_bytes_max", self.append_bytes_max, 1)
        check_range("ReplicaConfig.produce_timeout_ticks", self.produce_timeout_ticks, 1)
        check_range("ReplicaConfig.pending_produces_max", self.pending_produces_max, 1)
        check_range("ReplicaConfig.replica_lag_time_max_ms", self.replica_lag_time_max_ms, 1)

    @property
    def lease_ms(self) -> int:
        """How long a majority's answer keeps a leader's reads safe: an election timeout
        less a margin for the nodes' clocks ticking apart, in the clock's units."""
        return (self.election_ticks - LEASE_MARGIN_TICKS) * self.tick_ms

    @property
    def majority(self) -> int:
        return majority(len(self.replicas))

    @property
    def min_insync(self) -> int:
        return self.min_insync_replicas or self.majority

    @property
    def quorum_size(self) -> int:
        """How many durable copies commit an offset: a majority, at least min.insync."""
        return quorum_size(len(self.replicas), self.min_insync)


@dataclass(slots=True)
class _PendingProduce:
    request_id: int
    base_offset: Offset
    next_offset: Offset
    acks: int
    deadline_tick: int
    retried: bool = False  # answered with the offsets of the batch it repeats


class Replica:
    """One partition's replica. Drive it with `step`, `tick`, `propose`; drain `ready`."""

    def __init__(self, config: ReplicaConfig, storage: LogStorage, rng: Rng) -> None:
        state = storage.load()
        self.config = config
        self.id = config.node_id
        self.peers = tuple(node for node in config.replicas if node != config.node_id)
        self.rng = rng
        self.log = ReplicaLog(storage, state)
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
        self.wall_clock_ms = 0
        self.tick_count = 0
        self.election_elapsed = 0
        self.election_timeout = self._random_election_timeout()
        # A restarted replica may have acked a leader just before it went down: it grants
        # no vote for one election timeout, so that leader's read lease stays sound. A new
        # replica (epoch 0) never acked anyone and holds no such lease.
        restarted = state.hard_state.epoch > 0
        self.leader_contact_elapsed = 0 if restarted else config.election_ticks
        self.heartbeat_elapsed = 0
        self.votes: dict[NodeId, bool] = {}
        self.progress: dict[NodeId, Progress] = {}
        self.pending: deque[_PendingProduce] = deque()
        self.msgs: list[Message] = []
        self.msgs_after_persist: list[Message] = []
        self.completions: list[ProduceResult] = []
        self.lost_copies: list[LostCopy] = []  # followers that proved they lost records
        self.ready_outstanding = False
        self.ready_log_end_offset = self.log.log_end_offset
        self.append_seq = 0
        # A leadership transfer in progress (rule 10): its target, the ticks it has taken,
        # and whether TimeoutNow has left (then this leader serves no more reads).
        self.transfer_target: NodeId | None = None
        self.transfer_elapsed = 0
        self.timeout_now_sent = False
        self._maybe_finish_repair()

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
        self.tick_count += 1
        self.leader_contact_elapsed += 1
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now, as if the election timer fired (etcd-io/raft's MsgHup).
        A replica under repair never does (rule 8)."""
        assert not self.ready_outstanding
        if self.role is Role.LEADER:
            return
        if self.repair_floor is not None:
            self._reset_election_timer()
            return
        if self.config.pre_vote:
            self.become_pre_candidate()
        else:
            self.become_candidate()

    def set_min_insync_replicas(self, value: int | None) -> str | None:
        """The topic's min.insync.replicas changed (AlterConfigs): acks=all produces and the
        quorum that commits follow it from now on; the HWM never goes back (a larger quorum
        only waits longer, and the quorum is never below a majority). None when taken, else
        why not."""
        assert not self.ready_outstanding
        try:
            self.config = replace(self.config, min_insync_replicas=value)
        except ValueError as error:
            return str(error)
        if self.role is Role.LEADER and self._maybe_advance_hwm():
            self._complete_produces()
        return None

    def transfer_leadership(self, target: NodeId) -> str | None:
        """Hand leadership to `target`, another replica (rule 10). None when the transfer
        began (or goes on already); else why it cannot, for the caller to answer with."""
        assert not self.ready_outstanding
        if self.role is not Role.LEADER:
            return "not the leader"
        if target not in self.peers:
            return f"node {target} is no other replica of this partition"
        if self.transfer_target is not None:
            return None if self.transfer_target == target else "a transfer is under way"
        self.transfer_target = target
        self.transfer_elapsed = 0
        self._maybe_send_timeout_now()
        return None

    def step(self, msg: Message) -> str | None:
        """Take one message from a peer. A message that cannot be right (rule 9) changes
        nothing: the reason is returned, for the caller to log; None when it was taken."""
        assert not self.ready_outstanding
        refusal = self._refusal(msg)
        if refusal is not None:
            return refusal
        if msg.epoch > self.epoch and not self._on_higher_epoch(msg):
            return None
        if msg.epoch < self.epoch:
            self._on_lower_epoch(msg)
            return None
        if isinstance(msg, AppendRequest):
            self.on_append_request(msg)
        elif isinstance(msg, AppendResponse):
            self.on_append_response(msg)
        elif isinstance(msg, VoteRequest):
            self.on_vote_request(msg)
        elif isinstance(msg, VoteResponse):
            self.on_vote_response(msg)
        else:
            self.on_timeout_now(msg)
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

    def propose(self, request_id: int, batch: bytes, *, acks: int) -> None:
        """A producer's record batch. Its completion comes out in a later `Ready`."""
        assert not self.ready_outstanding
        assert acks in (ACKS_NONE, ACKS_LEADER, ACKS_ALL)
        error = self._produce_error(acks)
        header: BatchHeader | None = None
        if error is None:
            try:
                header = check_batch(batch)
            except CorruptBatch as corrupt:
                error = corrupt
        if error is not None or header is None:
            self.completions.append(ProduceResult(request_id, None, None, error))
            return
        earlier = self.producers.check(header)
        if isinstance(earlier, TidelogError):
            self.completions.append(ProduceResult(request_id, None, None, earlier))
            return
        if isinstance(earlier, SequencedBatch):
            # A retried batch: answer with the offsets it got the first time (scenario 17).
            self._await_produce(
                request_id, earlier.base_offset, earlier.next_offset, acks, retried=True
            )
            return
        base = self.log.log_end_offset
        stamped = stamp(batch, base_offset=base, epoch=self.epoch)
        header = header._replace(base_offset=base, epoch=self.epoch)
        self.log.append(stamped, header)
        self.producers.on_append(header)
        self._await_produce(request_id, base, header.next_offset, acks)

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

    # ================================================================== reads ===========
    def fetch(
        self,
        offset: Offset,
        *,
        max_bytes: int,
        last_fetched_epoch: Epoch | None = None,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> FetchResult:
        """Committed batches from `offset` on: only below min(HWM, log end offset).

        `current_leader_epoch` is the epoch the reader believes current (KIP-320): an older
        one is fenced; `last_fetched_epoch` is the epoch of the last record it read.
        """
        bounds = self.fetch_bounds(
            offset,
            last_fetched_epoch=last_fetched_epoch,
            current_leader_epoch=current_leader_epoch,
            now_ms=now_ms,
        )
        if bounds.error is not None:
            return bounds
        batches = self.log.read(offset, end_offset=bounds.hwm, max_bytes=max_bytes)
        return FetchResult(tuple(batches), bounds.hwm, bounds.log_start_offset)

    def fetch_bounds(
        self,
        offset: Offset,
        *,
        last_fetched_epoch: Epoch | None = None,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> FetchResult:
        """What `fetch` checks, without reading: its error, or the end of what it may
        read (`hwm`, the min of HWM and log end offset). A caller that reads the stored
        batches itself (the broker, from its files) reads only below that end."""
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        error = self._fencing_error(current_leader_epoch) or self._read_error(
            offset, last_fetched_epoch, now_ms
        )
        return FetchResult((), readable_end, self.log.log_start_offset, error)

    def end_offset_for_epoch(
        self,
        leader_epoch: Epoch,
        *,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> tuple[Epoch, Offset]:
        """OffsetForLeaderEpoch for a client (KIP-320): the largest epoch <= `leader_epoch`
        this log holds and the offset where it ends, never past what clients may read;
        (NO_EPOCH, -1) when the log holds no epoch that old. Raises what a fetch would
        (a fenced or unknown current epoch, not serving)."""
        error = self._fencing_error(current_leader_epoch) or self._serving_error(now_ms)
        if error is not None:
            raise error
        epoch, end = self.log.end_offset_for_epoch(leader_epoch)
        if epoch == NO_EPOCH:
            return NO_EPOCH, Offset(-1)
        return epoch, Offset(min(end, self.hwm, self.log.log_end_offset))

    def latest_offset(self, *, now_ms: int | None = None) -> Offset:
        """The "latest" offset clients may see (the HWM); raises while it is not known.

        `now_ms` is the caller's clock now (default: the time of the last tick)."""
        error = self._serving_error(now_ms)
        if error is not None:
            raise error
        return Offset(min(self.hwm, self.log.log_end_offset))

    def delete_records(self, offset: Offset) -> Offset:
        """DeleteRecords on the leader: move the log start to `offset`, which must not pass
        the HWM (retention never deletes uncommitted records). Followers follow with the
        next append. Returns the new log start (Kafka's low watermark)."""
        assert not self.ready_outstanding
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        if offset > readable_end:
            raise OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
        # Only what is durable here: a log start beyond our own synced log would outlive
        # a crash that takes the records below it.
        offset = Offset(min(offset, self.log.durable_end_offset))
        if offset > self.log.log_start_offset:
            self.log.advance_start(offset)
        return self.log.log_start_offset

    def note_log_start(self, offset: Offset) -> None:
        """Storage already deleted everything below `offset` (its retention by time or
        size, never past the HWM): the log starts there now."""
        assert not self.ready_outstanding
        assert offset <= self.hwm
        if offset > self.log.log_start_offset:
            self.log.advance_start(offset)
            self.log.start_moved_to = None  # storage did it: nothing to carry out

    def producer_snapshot(self, log_start: Offset) -> tuple[ProducerEntry, ...]:
        """What storage saves with a log start it moves itself (retention): the idempotent
        producers' snapshot there (core/producers.py)."""
        return self.producers.snapshot(log_start)

    def has_read_lease(self, now_ms: int | None = None) -> bool:
        """A majority answered a request we sent less than `lease_ms` ago (Raft §8).

        Those voters grant no vote for an election timeout after hearing from us, so no
        other leader can exist yet: reads cannot be stale (Jepsen etcd 0.4.1). The lease is
        measured on the caller's clock now, not in ticks: a leader whose ticks ran late
        (a pause, a stall) must not believe its lease lasted longer than it did."""
        if self.timeout_now_sent:
            return False  # a transfer's target may be elected inside the lease (rule 10)
        if not self.config.check_quorum:
            return True
        now = self.now_ms if now_ms is None else now_ms
        since = now - self.config.lease_ms
        recent = sum(1 for p in self.progress.values() if p.contact_sent_ms > since)
        return 1 + recent >= self.config.majority

    def status(self) -> ReplicaStatus:
        """Role, epoch, leader, watermarks and in-sync replicas, as one frozen value."""
        leading = self.role is Role.LEADER
        return ReplicaStatus(
            node_id=self.id,
            replicas=self.config.replicas,
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
        )

    def high_watermark(self) -> Offset:
        """`status().hwm` alone, without building the whole status (a round's hot path)."""
        return self.hwm

    def read_committed(self, start_offset: Offset, *, max_bytes: int) -> list[bytes]:
        """Whole committed batches from the one holding `start_offset` (below the HWM), up
        to `max_bytes` but at least one when one qualifies: a state machine's input."""
        end = Offset(min(self.hwm, self.log.log_end_offset))
        if start_offset >= end:
            return []
        return self.log.read(start_offset, end_offset=end, max_bytes=max_bytes)

    def in_sync_replicas(self) -> tuple[NodeId, ...]:
        """Live in-sync replicas: the leader and the followers that acked within an election
        timeout and are not repairing (rule 8)."""
        recent = self.tick_count - self.config.election_ticks
        followers = (peer for peer, progress in self.progress.items() if progress.in_sync(recent))
        return (self.id, *followers)

    def in_sync_count(self) -> int:
        return len(self.in_sync_replicas())

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
        return ready

    def advance(self, ready: Ready) -> None:
        """The caller persisted `ready` and sent its messages."""
        assert self.ready_outstanding
        self.ready_outstanding = False
        self.log.durable_end_offset = self.ready_log_end_offset
        self._maybe_finish_repair()
        if ready.hard_state is not None:
            self.persisted_hard_state = ready.hard_state
        if self.role is Role.CANDIDATE and self.persisted_hard_state == self._hard_state():
            # The candidate's vote for itself is durable now: count it (rule 2).
            self.votes[self.id] = True
            self._maybe_finish_election(pre_vote=False)
        if self.role is Role.LEADER:
            self._maybe_advance_hwm()
            self._complete_produces()

    # ================================================================== epochs ==========
    def _on_higher_epoch(self, msg: Message) -> bool:
        """A message from a later epoch. Returns False when it is to be dropped."""
        if isinstance(msg, VoteRequest):
            if msg.pre_vote:
                return True  # a pre-vote changes nothing here
            if self._in_lease() and not msg.transfer:
                return False  # a healthy leader exists: ignore the vote (leader lease)
            self.become_follower(msg.epoch, None)
            return True
        if isinstance(msg, VoteResponse) and msg.pre_vote and msg.granted:
            return True  # a granted pre-vote carries the epoch we would campaign in
        # Only a leader sends appends and TimeoutNow: the sender leads that epoch.
        leader = msg.sender if isinstance(msg, AppendRequest | TimeoutNow) else None
        self.become_follower(msg.epoch, leader)
        return True

    def _on_lower_epoch(self, msg: Message) -> None:
        """A message from an older epoch changes nothing; tell its sender the epoch."""
        if isinstance(msg, AppendRequest):
            self.msgs.append(
                AppendResponse(
                    self.id,
                    msg.sender,
                    self.epoch,
                    False,
                    msg.prev_offset,
                    self.log.log_end_offset,
                    self.log.last_epoch,
                    msg.sent_ms,
                    msg.seq,
                    self.repair_floor is not None,
                )
            )
        elif isinstance(msg, VoteRequest):
            self.msgs.append(VoteResponse(self.id, msg.sender, self.epoch, False, msg.pre_vote))

    def _hard_state(self) -> HardState:
        return HardState(self.epoch, self.voted_for)

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

    def _in_lease(self) -> bool:
        return self.config.check_quorum and self.leader_contact_elapsed < self.config.election_ticks

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

    def _random_election_timeout(self) -> int:
        ticks = self.config.election_ticks
        return ticks + self.rng.randrange(0, ticks)

    # ================================================================== roles ===========
    def become_follower(self, epoch: Epoch, leader: NodeId | None) -> None:
        assert epoch >= self.epoch
        if epoch > self.epoch:
            self.epoch = epoch
            self.voted_for = None
        was_leader = self.role is Role.LEADER
        self.role = Role.FOLLOWER
        self.transfer_target = None
        self.timeout_now_sent = False
        if leader != self.leader_id:
            self.follower_synced = False
        self.leader_id = leader
        self.progress.clear()
        self.votes.clear()
        self._reset_election_timer()
        if was_leader:
            self._fail_pending(NotLeader(leader))

    def become_pre_candidate(self) -> None:
        self.role = Role.PRE_CANDIDATE
        self.leader_id = None
        self.follower_synced = False
        self.votes = {self.id: True}
        self._reset_election_timer()
        self._request_votes(Epoch(self.epoch + 1), pre_vote=True)
        self._maybe_finish_election(pre_vote=True)

    def become_candidate(self, *, transfer: bool = False) -> None:
        self.epoch = Epoch(self.epoch + 1)
        self.voted_for = self.id
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.follower_synced = False
        self.votes = {}  # our own vote counts once it is durable (advance)
        self._reset_election_timer()
        self._request_votes(self.epoch, pre_vote=False, transfer=transfer)

    def become_leader(self) -> None:
        """Start an epoch: record it in the epoch history with a control batch (KIP-207)."""
        assert self.role is Role.CANDIDATE
        granting = tuple(sorted(node for node, granted in self.votes.items() if granted))
        self._begin_epoch(granting)

    def _begin_epoch(self, granting: tuple[NodeId, ...]) -> None:
        """Lead this epoch from our log end: fresh progress for every follower, and a
        control batch of the epoch naming `granting` (the voters that elected us, or the
        ISR that the controller's record names) as its first batch (KIP-207)."""
        self.role = Role.LEADER
        self.leader_id = self.id
        self.leader_contact_elapsed = 0
        self.heartbeat_elapsed = 0
        self.election_elapsed = 0
        end = self.log.log_end_offset
        self.progress = {peer: Progress(next_offset=end) for peer in self.peers}
        self.epoch_start_offset = end
        control = build_control_batch(
            base_offset=end,
            epoch=self.epoch,
            control_type=CONTROL_TYPE_LEADER_CHANGE,
            timestamp_ms=self.wall_clock_ms,
            value=leader_change_message(self.id, self.config.replicas, granting),
        )
        self.log.append(control, check_batch(control))

    def _reset_election_timer(self) -> None:
        self.election_elapsed = 0
        self.election_timeout = self._random_election_timeout()

    # ================================================================== elections =======
    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.election_elapsed >= self.election_timeout:
            self.campaign()

    def _request_votes(self, epoch: Epoch, *, pre_vote: bool, transfer: bool = False) -> None:
        last_epoch, end = self.log.last_epoch, self.log.log_end_offset
        for peer in self.peers:
            self.msgs.append(VoteRequest(self.id, peer, epoch, last_epoch, end, pre_vote, transfer))

    def on_vote_request(self, msg: VoteRequest) -> None:
        # Under repair, also as if we still held the log we lost (rule 8, KIP-966).
        up_to_date = (msg.last_epoch, msg.log_end_offset) >= (
            self.log.last_epoch,
            self.log.log_end_offset,
        ) and (
            self.repair_floor is None
            or self.repair_floor.reached_by(msg.last_epoch, msg.log_end_offset)
        )
        if msg.pre_vote:
            granted = msg.epoch > self.epoch and up_to_date and not self._in_lease()
            epoch = msg.epoch if granted else self.epoch
            self.msgs.append(VoteResponse(self.id, msg.sender, epoch, granted, True))
            return
        free = self.voted_for in (None, msg.sender) and self.role is not Role.LEADER
        # The lease holds in our own epoch too: a refused pre-vote may have moved us to
        # the candidate's epoch while a leader we heard from moments ago still serves.
        # A transfer's campaign was asked for by the leader, which gave its lease up.
        promised = self._in_lease() and self.voted_for != msg.sender and not msg.transfer
        granted = free and up_to_date and not promised
        if granted:
            self.voted_for = msg.sender
            self._reset_election_timer()
        # The vote must be durable before the candidate hears of it (rule 2).
        self.msgs_after_persist.append(
            VoteResponse(self.id, msg.sender, self.epoch, granted, False)
        )

    def on_vote_response(self, msg: VoteResponse) -> None:
        if msg.pre_vote and self.role is Role.PRE_CANDIDATE:
            # A grant names the epoch we would campaign in; a refusal names the voter's.
            if msg.epoch == self.epoch + (1 if msg.granted else 0):
                self.votes[msg.sender] = msg.granted
                self._maybe_finish_election(pre_vote=True)
        elif not msg.pre_vote and self.role is Role.CANDIDATE:
            self.votes[msg.sender] = msg.granted
            self._maybe_finish_election(pre_vote=False)

    def _maybe_finish_election(self, *, pre_vote: bool) -> None:
        result = vote_result(self.votes, len(self.config.replicas))
        if result is VoteResult.WON:
            if pre_vote:
                self.become_candidate()
            else:
                self.become_leader()
        elif result is VoteResult.LOST:
            self.become_follower(self.epoch, None)

    def on_timeout_now(self, msg: TimeoutNow) -> None:
        """Our leader hands us its leadership (rule 10; `_refusal` checked it is our
        leader): campaign now, without a pre-vote, unless we are under repair (rule 8)."""
        if self.role is Role.FOLLOWER and self.repair_floor is None:
            self.become_candidate(transfer=True)

    # ================================================================== follower ========
    def on_append_request(self, msg: AppendRequest) -> None:
        if self.role is not Role.FOLLOWER or self.leader_id != msg.sender:
            self.become_follower(msg.epoch, msg.sender)
        self.election_elapsed = 0
        self.leader_contact_elapsed = 0
        try:
            headers = [check_batch(batch) for batch in msg.batches]
        except CorruptBatch:
            return  # damaged in flight: drop it; the leader resends (pair assertion)
        if msg.reset:
            self._reset_to_leader_start(msg)
            return
        if not self._prefix_matches(msg.prev_offset, msg.prev_epoch):
            hint_offset, hint_epoch = self._divergence_hint(msg.prev_offset, msg.prev_epoch)
            self._answer(msg, False, hint_offset, hint_epoch)
            return
        end = self._append_from_leader(msg.prev_offset, msg.batches, headers)
        if end is None:
            return  # it cannot be right (it would cut committed records): no answer
        self.follower_synced = True
        # Truncation is done; only now take the leader's HWM, bounded by the verified
        # prefix (KAFKA-14704).
        self._raise_hwm(Offset(min(msg.hwm, end)))
        self._follow_log_start(msg.log_start_offset)
        self._answer(msg, True, end, NO_EPOCH)

    def _answer(self, msg: AppendRequest, success: bool, offset: Offset, epoch: Epoch) -> None:
        """Answer an append once our log is durable (rule 2), echoing its time and seq."""
        self.msgs_after_persist.append(
            AppendResponse(
                self.id,
                msg.sender,
                self.epoch,
                success,
                msg.prev_offset,
                offset,
                epoch,
                msg.sent_ms,
                msg.seq,
                self.repair_floor is not None,
            )
        )

    def _reset_to_leader_start(self, msg: AppendRequest) -> None:
        """The leader no longer holds what we lack: its log begins at `start` now.

        Everything below `start` is committed. We keep our log when its prefix below
        `start` is the leader's: when our HWM reaches `start`, or when our record at
        start - 1 is of the leader's epoch there (the log matching property); records we
        acknowledged in this epoch are always kept so (scenario 19). Otherwise nothing we
        hold from start - 1 on is the leader's: we drop it all and start empty at `start`,
        remembering the epoch of the record before it (scenario 19, Raft's snapshot)."""
        start = msg.prev_offset
        entries = decode_entries(msg.producers, below=start) or ()  # checked at the door
        committed_here = start <= max(self.hwm, self.log.log_start_offset)
        if not committed_here and not (
            start <= self.log.log_end_offset
            and self.log.epoch_at(Offset(start - 1)) == msg.prev_epoch
        ):
            self.log.reset(start, msg.prev_epoch)
            # What the deleted records told of the idempotent producers (scenario 24).
            self.producers = ProducerStates()
            self.producers.restore(entries)
            self.hwm = start
        self.follower_synced = True
        self._raise_hwm(start)
        self._follow_log_start(msg.log_start_offset)
        self._answer(msg, True, start, NO_EPOCH)

    def _follow_log_start(self, leader_log_start: Offset) -> None:
        """Records the leader deleted (DeleteRecords, retention) go here too, within our HWM."""
        target = Offset(min(leader_log_start, self.hwm, self.log.durable_end_offset))
        if target > self.log.log_start_offset:
            self.log.advance_start(target)

    def _prefix_matches(self, prev_offset: Offset, prev_epoch: Epoch) -> bool:
        """The consistency check: our record at prev_offset - 1 is of prev_epoch.

        Below our HWM the record is committed, so every later leader holds it at the same
        offset: it is checked where we still know its epoch, else trusted (it may be
        deleted here, and the leader may have deleted its epoch too)."""
        if prev_offset > self.log.log_end_offset:
            return False
        if prev_offset <= 0:
            return True
        ours = self.log.epoch_at(Offset(prev_offset - 1))
        if prev_offset <= max(self.log.log_start_offset, self.hwm) and ours == NO_EPOCH:
            return True
        return ours == prev_epoch

    def _divergence_hint(self, prev_offset: Offset, prev_epoch: Epoch) -> tuple[Offset, Epoch]:
        """Where our log may last agree with the leader's: the end of our largest epoch
        <= prev_epoch, bounded by prev_offset and our log end (KIP-279)."""
        _, epoch_end = self.log.end_offset_for_epoch(prev_epoch)
        offset = Offset(min(prev_offset, self.log.log_end_offset, epoch_end))
        epoch = self.log.epoch_at(Offset(offset - 1)) if offset > 0 else NO_EPOCH
        return offset, epoch

    def _append_from_leader(
        self, prev_offset: Offset, batches: tuple[bytes, ...], headers: list[BatchHeader]
    ) -> Offset | None:
        """Append the leader's batches after the verified prefix; cut only on conflict.

        Returns the end of the prefix now known to match the leader's log, or None when the
        append cannot be taken as it is (a batch conflicting with a committed one here, or
        batches that do not follow each other): a follower never cuts committed records
        (rule 4), so it refuses the append and changes nothing.
        """
        first_new: int | None = None
        end = prev_offset
        for index, header in enumerate(headers):
            if header.base_offset != end:
                return None
            end = header.next_offset
            if first_new is None:
                taken = self._compare_batch(header)
                if taken is _Batch.CONFLICTS_WITH_COMMITTED:
                    return None
                if taken is _Batch.NEW:
                    first_new = index
        if first_new is not None:
            base = headers[first_new].base_offset
            if base < self.log.log_end_offset:  # a divergent, uncommitted suffix
                self.log.truncate(base)
                self.producers.truncate(base)
            for batch, header in zip(batches[first_new:], headers[first_new:], strict=True):
                self.log.append(batch, header)
                self.producers.on_append(header)
        return end

    def _compare_batch(self, header: BatchHeader) -> _Batch:
        """The leader's batch against our log (the log matching property: the same offset
        and epoch mean the same batch and the same log before it)."""
        log = self.log
        if header.next_offset <= log.log_start_offset:
            return _Batch.HELD  # wholly below our log start: committed and deleted here
        if header.base_offset >= log.log_end_offset:
            return _Batch.NEW
        # The log start may lie inside this batch: ask its epoch at a record we have.
        held = Offset(max(header.base_offset, log.log_start_offset))
        if held < log.log_end_offset and log.epoch_at(held) == header.epoch:
            return _Batch.HELD
        if header.base_offset < max(self.hwm, log.log_start_offset):
            return _Batch.CONFLICTS_WITH_COMMITTED
        return _Batch.NEW

    def _raise_hwm(self, hwm: Offset) -> None:
        if hwm > self.hwm:
            assert hwm <= self.log.log_end_offset
            self.hwm = hwm

    # ================================================================== leader ==========
    def _tick_leader(self) -> None:
        if self.transfer_target is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.config.election_ticks:
                if self.timeout_now_sent:  # no lease any more (rule 10): step down
                    self.become_follower(self.epoch, None)
                    return
                self.transfer_target = None  # the target did not catch up: lead on
        self.heartbeat_elapsed += 1
        if self.heartbeat_elapsed >= self.config.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._heartbeat()
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_ticks:
            self.election_elapsed = 0
            if not self._check_quorum():
                return
        self._expire_produces()

    def _check_quorum(self) -> bool:
        """Step down unless a majority was heard from in the last election timeout."""
        active = 1 + sum(1 for progress in self.progress.values() if progress.recent_active)
        for progress in self.progress.values():
            progress.recent_active = False
        if self.config.check_quorum and active < self.config.majority:
            self.become_follower(self.epoch, None)
            return False
        self.leader_contact_elapsed = 0
        return True

    def _heartbeat(self) -> None:
        """Tell every follower the HWM; resend a lost probe; restart a stalled pipeline."""
        for peer, progress in self.progress.items():
            if progress.probing:
                progress.probe_sent = False  # resent, as it was (a reset as a reset)
                continue
            assert progress.match_offset is not None
            if (
                progress.match_offset == progress.match_at_heartbeat
                and progress.match_offset < progress.next_offset
            ):
                progress.next_offset = progress.match_offset
                progress.inflight.clear()
            progress.match_at_heartbeat = progress.match_offset
            start = self.log.log_start_offset
            if progress.match_offset < start and progress.match_offset < self.log.base_of_batch_at(
                start
            ):
                # What it lacks is gone here (not even in the batch holding the log start,
                # which we still send): `_send_appends` resets it.
                progress.probe(progress.match_offset)
                continue
            self._send_append(peer, progress.match_offset, ())

    def _appends_due(self) -> bool:
        end = self.log.log_end_offset
        for progress in self.progress.values():
            if progress.probing and not progress.probe_sent:
                return True
            if (
                not progress.probing
                and progress.next_offset < end
                and len(progress.inflight) < self.config.inflight_appends_max
            ):
                return True
        return False

    def _send_appends(self) -> None:
        """Send each follower what it lacks, within its window of in-flight appends."""
        end = self.log.log_end_offset
        start = self.log.log_start_offset
        # The first batch we can still send. It differs from the log start only when the
        # start lies inside a batch, and matters only for a follower behind the start:
        # look it up (a storage read) only then.
        behind = any(p.next_offset < start for p in self.progress.values())
        floor = self.log.base_of_batch_at(start) if behind else start
        for peer, progress in self.progress.items():
            if progress.next_offset < floor and not progress.probing:
                progress.probe(progress.next_offset)  # reset it (below)
            if progress.probing:
                if not progress.probe_sent:
                    # What it lacks is gone here: reset it to the first batch we hold. A
                    # reset stays a reset until it is answered (scenario 20).
                    progress.resetting = progress.resetting or progress.next_offset < floor
                    if progress.resetting:
                        progress.next_offset = floor
                    key = (progress.next_offset, progress.resetting)
                    producers = self.producers.snapshot(key[0]) if key[1] else ()
                    seq = self._send_append(
                        peer, key[0], (), reset=key[1], producers=encode_entries(producers)
                    )
                    progress.sent_probe(key, seq)
                continue
            while (
                progress.next_offset < end
                and len(progress.inflight) < self.config.inflight_appends_max
            ):
                batches = self.log.read(
                    Offset(max(progress.next_offset, start)),
                    end_offset=end,
                    max_bytes=self.config.append_bytes_max,
                )
                assert batches, "a follower behind the log end has something to read"
                # Checked when appended (and by the disk log when read back); the follower
                # checks them again on receipt (pair assertion): no CRC pass here.
                prev = read_header(batches[0]).base_offset
                self._send_append(peer, prev, tuple(batches))
                progress.next_offset = read_header(batches[-1]).next_offset
                progress.inflight.append(progress.next_offset)

    def _send_append(
        self,
        peer: NodeId,
        prev_offset: Offset,
        batches: tuple[bytes, ...],
        *,
        reset: bool = False,
        producers: tuple[bytes, ...] = (),
    ) -> int:
        """Send one append (or probe, heartbeat, reset); returns its seq."""
        prev_epoch = self.log.epoch_at(Offset(prev_offset - 1)) if prev_offset > 0 else NO_EPOCH
        self.append_seq += 1
        self.msgs.append(
            AppendRequest(
                self.id,
                peer,
                self.epoch,
                prev_offset,
                prev_epoch,
                batches,
                self.hwm,
                self.now_ms,
                self.log.log_start_offset,
                reset,
                self.append_seq,
                producers,
            )
        )
        return self.append_seq

    def on_append_response(self, msg: AppendResponse) -> None:
        if self.role is not Role.LEADER:
            return
        progress = self.progress[msg.sender]
        progress.recent_active = True
        progress.contact_sent_ms = max(progress.contact_sent_ms, msg.request_sent_ms)
        if msg.seq < progress.seq_min:
            return  # sent before the follower said it lost records: nothing it says counts
        if msg.repairing and (not progress.repairing or self._lost_again(progress, msg)):
            self._on_follower_repairing(progress, msg.match_offset)
            return
        progress.repairing = msg.repairing
        if progress.probing and not progress.answers_probe(msg.seq):
            return  # answers the probe only (any copy of it): anything older may predate a reset
        if msg.success:
            self._on_append_accepted(progress, msg.match_offset)
        else:
            self._on_append_rejected(progress, msg)

    @staticmethod
    def _lost_again(progress: Progress, msg: AppendResponse) -> bool:
        """A repairing follower's answer to our probe says its log is shorter than what it
        acknowledged: it set damaged records aside again (rule 8)."""
        return (
            progress.probing
            and progress.answers_probe(msg.seq)
            and progress.match_offset is not None
            and msg.match_offset < progress.match_offset
        )

    def _on_follower_repairing(self, progress: Progress, follower_end: Offset) -> None:
        """The follower lost records it acknowledged (rule 8): forget its match and every
        answer to a request sent so far, and probe it again from where it says its log
        ends (or may last agree with ours)."""
        next_offset = Offset(min(follower_end, self.log.log_end_offset))
        progress.lost_records(next_offset, seq_min=self.append_seq + 1)

    def _on_append_accepted(self, progress: Progress, match: Offset) -> None:
        progress.accept(match, self.tick_count)
        if self._maybe_advance_hwm():
            self._complete_produces()
        self._maybe_send_timeout_now()

    def _maybe_send_timeout_now(self) -> None:
        """The transfer's target durably holds our whole log: it may campaign (rule 10).
        From now on we serve no reads (`has_read_lease`)."""
        target = self.transfer_target
        if target is None or self.timeout_now_sent:
            return
        progress = self.progress[target]
        if progress.repairing or progress.match_offset != self.log.log_end_offset:
            return
        self.timeout_now_sent = True
        self.msgs.append(TimeoutNow(self.id, target, self.epoch))

    def _on_append_rejected(self, progress: Progress, msg: AppendResponse) -> None:
        match = progress.match_offset
        if not progress.probing and msg.prev_offset < (match or 0):
            return  # stale: that prefix is verified already
        if match is not None and msg.match_offset < match and not msg.repairing:
            # Its log ended below what it acknowledged (rule 7). An answer to our probe
            # (to a copy sent since the probe began, after that match was taken: taking
            # one ends a probe) proves it lost records: forget its match and probe it
            # from where its log ends. Any other may have been overtaken by later
            # answers: ask at the match.
            if progress.probing and progress.probe_key is not None:
                self.lost_copies.append(LostCopy(msg.sender, match, msg.match_offset))
                progress.forget_match(msg.match_offset, seq_min=self.append_seq + 1)
            else:
                progress.probe(match)
            return
        _, epoch_end = self.log.end_offset_for_epoch(msg.hint_epoch)
        next_offset = min(msg.match_offset, epoch_end, self.log.log_end_offset)
        # Each rejection moves the probe back, down to a reset at worst: no probe loops.
        progress.probe(Offset(max(0, min(next_offset, msg.prev_offset - 1))))

    def _maybe_advance_hwm(self) -> bool:
        """Move the HWM to what quorum_size durable copies hold (rule 3)."""
        matches = [self.log.durable_end_offset]
        matches += [p.match_offset for p in self.progress.values() if p.match_offset is not None]
        candidate = committed_offset(matches, self.config.quorum_size)
        if candidate is None or candidate <= self.hwm:
            return False
        # Raft Figure 8: count replicas only for an offset of our own epoch.
        if candidate <= self.epoch_start_offset:
            return False
        self._raise_hwm(candidate)
        return True

    # ================================================================== clients =========
    def _produce_error(self, acks: int) -> TidelogError | None:
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if self.transfer_target is not None:
            return NotLeader(self.transfer_target)  # handing over (rule 10)
        if len(self.pending) >= self.config.pending_produces_max:
            return RequestTimedOut("too many produce requests waiting for the HWM")
        if acks == ACKS_ALL:
            in_sync = self.in_sync_count()
            if in_sync < self.config.min_insync:
                return NotEnoughReplicas(in_sync, self.config.min_insync)
        return None

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

    def _expire_produces(self) -> None:
        while self.pending and self.pending[0].deadline_tick <= self.tick_count:
            head = self.pending.popleft()
            error = RequestTimedOut(f"offset {head.base_offset} not committed in time")
            self.completions.append(ProduceResult(head.request_id, None, None, error))

    def _fail_pending(self, error: TidelogError) -> None:
        while self.pending:
            head = self.pending.popleft()
            self.completions.append(ProduceResult(head.request_id, None, None, error))

    def _serving_error(self, now_ms: int | None) -> TidelogError | None:
        """Why this replica cannot serve reads now, or None."""
        if self.role is Role.LEADER:
            if self.hwm <= self.epoch_start_offset:
                return OffsetNotAvailable("the new leader's HWM has not reached its epoch")
            if not self.has_read_lease(now_ms):
                return NotLeader(None)
            return None
        if self.role is Role.FOLLOWER and self.follower_synced:
            return None
        return NotLeader(self.leader_id)

    def _fencing_error(self, current_leader_epoch: Epoch | None) -> TidelogError | None:
        if current_leader_epoch is None or current_leader_epoch == self.epoch:
            return None
        if current_leader_epoch < self.epoch:
            return FencedEpoch(current_leader_epoch, self.epoch)
        return OffsetNotAvailable(f"epoch {current_leader_epoch} is not known here yet")

    def _read_error(
        self, offset: Offset, last_fetched_epoch: Epoch | None, now_ms: int | None
    ) -> TidelogError | None:
        error = self._serving_error(now_ms)
        if error is not None:
            return error
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        if offset < self.log.log_start_offset:
            return OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
        if offset > readable_end:
            if self.role is Role.FOLLOWER:
                return OffsetNotAvailable(f"offset {offset} is above this follower's HWM")
            if offset > self.log.log_end_offset:
                return OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
            return None  # between HWM and log end: nothing committed to give yet
        if last_fetched_epoch is not None and offset > 0:
            epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
            # Our epoch history may begin after the reader's position (records deleted, or
            # a reset): nothing there to judge by.
            unknown = epoch == NO_EPOCH and offset <= end
            if not unknown and (epoch != last_fetched_epoch or end < offset):
                return LogDiverged(epoch, end)
        return None
