"""ISR mode's sans-IO heart (docs/isr.md, issue 18): the controller's partition record, its
pure transitions, and the leader's side (`IsrLeader`). The broker applies the transitions
as it applies metadata commands (server/metadata.py).

No IO, no clock, no randomness: the time (`now_ms`) and the live nodes are handed in.
Rule numbers are those of docs/isr.md.

Rules of this file:
- The record changes only through `alter_isr`, `fence`, `restarted`, `relinquish` (the
  two a registration picks from: `registered`), `elect_preferred`, `elect` and
  `reassigned` (KIP-455's replica list changes); every
  change bumps `partition_epoch` by one, a change of leader also `leader_epoch` (KIP-497).
- `alter_isr` applies a leader's proposal only from the current leader, at the current
  leader epoch and partition epoch, keeping the leader in an ISR within the replicas
  (rule 3; the checks and their order are Kafka's
  ReplicationControlManager.validateAlterPartitionData). Which replicas are caught up is
  the leader's call (rule 5), not the controller's.
- ELR (rule 8), as KIP-966 and Kafka's PartitionChangeBuilder.maybePopulateTargetElr: after
  any change, when |ISR| >= min.insync.replicas (at most the replication factor) the ELR
  is empty; otherwise ELR = (old ELR + old ISR) - new ISR - replicas that restarted. So a
  replica removed from an ISR that is (or becomes) smaller than min.insync.replicas joins
  the ELR, an ELR member that rejoins the ISR leaves it, and a restarted replica leaves both
  (rule 9). This is safe only with KIP-966's strict min ISR, which `IsrLeader` keeps: the
  HWM does not move while |committed ISR| < min.insync.replicas (Kafka's
  Partition.maybeIncrementLeaderHW, `isUnderMinIsr`), so every ELR member holds every
  record below the HWM.
- `fence` removes a fenced node from the ISR even when that empties it (Kafka with ELR
  enabled: "the ISR is allowed to be empty"; the node goes to the ELR if the ISR is then
  below min.insync.replicas) and, if it led, takes its leadership away (leader -1, leader
  epoch + 1), so its proposals are refused from then on. A fenced ELR member stays in the
  ELR (it holds the data; it is just not live).
- `elect` (rules 4, 8, 10): the first live replica, in assignment order, of the ISR; else
  the first live ELR member (its ISR becomes that one, as Kafka); else, only when unclean
  election is allowed, the first live replica, which then is the whole ISR and the ELR is
  cleared (Kafka clears the ELR on an unclean election), and the result says `unclean`;
  the record then carries `unclean_epoch`, its new leader epoch, so that replicas holding
  committed records the new leader lacks give them up, and say so (`GivenUp`).
  Kafka elects from the ELR only once the ISR is empty (dead ISR members are fenced first);
  here an ELR member may lead while dead ISR members are still listed, which is as safe
  (strict min ISR: it holds every committed record) and more available; those ISR members
  then go to the ELR by the rule above.
- Rule 9 without KIP-903's broker epochs in a proposal: the record counts each replica's
  restarts (`restarts`, bumped by `restarted`, which always makes a new partition epoch),
  so a proposal made on what a follower's previous incarnation reported is refused by
  rule 3, and the leader forgets those reports (`restarted_since`). tidelog counts only
  durable offsets, so this guards against a disk lost or replaced, or syncs that lied.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from tidelog.errors import check_range
from tidelog.types import Epoch, NodeId, Offset

NO_LEADER = NodeId(-1)


class Refusal(enum.Enum):
    """Why the controller refused a proposal: Kafka's AlterPartition error names."""

    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"  # an older leader epoch
    INVALID_REQUEST = "INVALID_REQUEST"  # not the leader, or an ISR that cannot be
    INVALID_UPDATE_VERSION = "INVALID_UPDATE_VERSION"  # an older partition epoch
    NOT_CONTROLLER = "NOT_CONTROLLER"  # epochs newer than this controller's record


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition as the controller keeps it in the metadata log. `isr` and `elr` are in
    assignment order (the order of `replicas`)."""

    replicas: tuple[NodeId, ...]
    leader: NodeId
    leader_epoch: Epoch
    partition_epoch: int
    isr: tuple[NodeId, ...]
    elr: tuple[NodeId, ...] = ()
    # The leader epoch of the last unclean election (rule 10), kept by every later change:
    # from then on a replica may give up records it had committed (`may_give_up`).
    unclean_epoch: Epoch | None = None
    # Per replica, in assignment order, how often it started again (`restarted`; empty:
    # never one), so a leader knows whose earlier reports to forget (rule 9).
    restarts: tuple[int, ...] = ()

    def restarts_of(self, node: NodeId) -> int:
        if not self.restarts or node not in self.replicas:
            return 0
        return self.restarts[self.replicas.index(node)]

    def may_give_up(self, leader_epoch: Epoch) -> bool:
        """Rule 10: whether a replica following the leader of `leader_epoch` may truncate
        below its own HWM, giving up records it had committed. Only when an unclean election
        has happened at or before that epoch: its leader's log is the truth, and records
        committed before it that the leader lacks are lost. Otherwise never (rule 11)."""
        return self.unclean_epoch is not None and leader_epoch >= self.unclean_epoch


@dataclass(frozen=True, slots=True)
class GivenUp:
    """Records [start_offset, end_offset) that a replica had committed and gave up to the
    leader `leader` of `leader_epoch`, after the unclean election of `unclean_epoch`
    (rule 10): the caller logs them, naming the partition."""

    start_offset: Offset
    end_offset: Offset
    leader: NodeId
    leader_epoch: Epoch
    unclean_epoch: Epoch


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """A leader's AlterPartition: the ISR it wants, and the record it saw."""

    leader: NodeId
    leader_epoch: Epoch
    partition_epoch: int
    isr: tuple[NodeId, ...]


@dataclass(frozen=True, slots=True)
class AlterResult:
    """The controller's answer: the record after (unchanged on a refusal), and why not."""

    record: PartitionRecord
    refusal: Refusal | None = None

    @property
    def accepted(self) -> bool:
        return self.refusal is None


@dataclass(frozen=True, slots=True)
class Election:
    """What `elect` decided. `leader` is NO_LEADER when nobody may lead (offline); an
    `unclean` leader may lack acknowledged records, and the caller must say which."""

    record: PartitionRecord
    leader: NodeId
    unclean: bool = False


def effective_min_insync(record: PartitionRecord, min_insync: int) -> int:
    """min.insync.replicas, at most the replication factor (Kafka's effectiveMinIsr)."""
    return min(min_insync, len(record.replicas))


def _ordered(record: PartitionRecord, members: Iterable[NodeId]) -> tuple[NodeId, ...]:
    wanted = set(members)
    return tuple(node for node in record.replicas if node in wanted)


def _changed(
    record: PartitionRecord,
    *,
    isr: Iterable[NodeId],
    min_insync: int,
    leader: NodeId | None = None,
    restarted: Collection[NodeId] = (),
    clear_elr: bool = False,
) -> PartitionRecord:
    """The record with a new ISR (and leader), its ELR by rule 8 and its epochs bumped; the
    same record when nothing changes."""
    new_isr = _ordered(record, isr)
    if clear_elr or len(new_isr) >= effective_min_insync(record, min_insync):
        elr: tuple[NodeId, ...] = ()
    else:
        elr = _ordered(
            record,
            (set(record.elr) | set(record.isr)) - set(new_isr) - set(restarted),
        )
    new_leader = record.leader if leader is None else leader
    if (new_isr, elr, new_leader) == (record.isr, record.elr, record.leader):
        return record
    return replace(
        record,
        leader=new_leader,
        leader_epoch=Epoch(record.leader_epoch + (new_leader != record.leader)),
        partition_epoch=record.partition_epoch + 1,
        isr=new_isr,
        elr=elr,
    )


def alter_isr(record: PartitionRecord, proposal: IsrProposal, *, min_insync: int) -> AlterResult:
    """Rule 3: apply a leader's ISR change only if it is current, else refuse it and change
    nothing. A proposal that changes nothing is accepted as it stands."""
    refusal = _refusal(record, proposal)
    if refusal is not None:
        return AlterResult(record, refusal)
    return AlterResult(_changed(record, isr=proposal.isr, min_insync=min_insync))


def _refusal(record: PartitionRecord, proposal: IsrProposal) -> Refusal | None:
    if (
        proposal.leader_epoch > record.leader_epoch
        or proposal.partition_epoch > record.partition_epoch
    ):
        return Refusal.NOT_CONTROLLER
    if proposal.leader_epoch < record.leader_epoch:
        return Refusal.FENCED_LEADER_EPOCH
    if proposal.leader != record.leader:
        return Refusal.INVALID_REQUEST
    if proposal.partition_epoch < record.partition_epoch:
        return Refusal.INVALID_UPDATE_VERSION
    if (
        len(set(proposal.isr)) != len(proposal.isr)
        or not set(proposal.isr) <= set(record.replicas)
        or record.leader not in proposal.isr
    ):
        return Refusal.INVALID_REQUEST
    return None


def fence(record: PartitionRecord, node: NodeId, *, min_insync: int) -> PartitionRecord:
    """Rule 6 (KIP-841): a fenced node leaves the ISR at once (to the ELR by rule 8) and, if
    it led, its leadership (leader -1, leader epoch + 1); `elect` picks the next one."""
    leader = NO_LEADER if record.leader == node else None
    return _changed(record, isr=set(record.isr) - {node}, min_insync=min_insync, leader=leader)


def restarted(record: PartitionRecord, node: NodeId, *, min_insync: int) -> PartitionRecord:
    """Rule 9 (KIP-966's unclean shutdown): a node that registers again leaves the ISR, the
    ELR and any leadership; it returns only through rule 5. The record counts the restart
    (`restarts`) and so always takes a new partition epoch, even when the node was in
    none of them (KIP-903's broker epochs): a proposal made on what its previous
    incarnation reported is refused (rule 3), and the leader forgets those reports
    (`IsrLeader.committed`), so a node whose disk was lost is never admitted on what it
    held before."""
    if node not in record.replicas:
        return record
    leader = NO_LEADER if record.leader == node else None
    restarts = tuple(record.restarts_of(n) + (n == node) for n in record.replicas)
    without = replace(record, elr=tuple(n for n in record.elr if n != node), restarts=restarts)
    changed = _changed(
        without,
        isr=set(record.isr) - {node},
        min_insync=min_insync,
        leader=leader,
        restarted=(node,),
    )
    if changed is without:
        return replace(without, partition_epoch=record.partition_epoch + 1)
    return changed


def reassigned(
    record: PartitionRecord, replicas: tuple[NodeId, ...], *, min_insync: int
) -> PartitionRecord:
    """KIP-455, as Kafka's controller changes a partition's replica list (its
    PartitionChangeBuilder): a move's target and the replicas it removes, the target alone
    once the move is done, or the original replicas when it is cancelled. The ISR and the
    ELR keep only nodes of `replicas` (a node added joins the ISR only through the leader,
    rule 5), the restart counts follow their nodes, and a leader no longer among them (or
    no longer in the ISR) gives up its leadership for `elect` to pick the next (rule 4).
    Always a new partition epoch; the same record when `replicas` is its list already."""
    assert replicas and len(set(replicas)) == len(replicas)
    if replicas == record.replicas:
        return record
    isr = tuple(node for node in replicas if node in record.isr)
    moved = replace(
        record,
        replicas=replicas,
        isr=isr,
        elr=tuple(node for node in replicas if node in record.elr and node not in isr),
        restarts=tuple(record.restarts_of(node) for node in replicas) if record.restarts else (),
        partition_epoch=record.partition_epoch + 1,
    )
    if len(isr) >= effective_min_insync(moved, min_insync):
        moved = replace(moved, elr=())
    if record.leader != NO_LEADER and record.leader not in isr:
        return replace(moved, leader=NO_LEADER, leader_epoch=Epoch(record.leader_epoch + 1))
    return moved


def restarted_since(before: PartitionRecord, after: PartitionRecord) -> frozenset[NodeId]:
    """The replicas that started again (`restarted`) between two records of a partition."""
    return frozenset(n for n in after.replicas if after.restarts_of(n) != before.restarts_of(n))


def elect(
    record: PartitionRecord,
    live: Collection[NodeId],
    *,
    min_insync: int,
    unclean_allowed: bool = False,
) -> Election:
    """Rules 4, 8, 10: a leader for a partition whose leader is not live. A live leader is
    kept (nothing changes); with no candidate the partition stays offline."""
    if record.leader in live:
        return Election(record, record.leader)
    for node in record.replicas:
        if node in record.isr and node in live:
            return Election(
                _changed(record, isr=record.isr, min_insync=min_insync, leader=node), node
            )
    for node in record.replicas:
        if node in record.elr and node in live:
            new = _changed(record, isr=(node,), min_insync=min_insync, leader=node)
            return Election(new, node)
    if unclean_allowed:
        for node in record.replicas:
            if node in live:
                new = _changed(
                    record, isr=(node,), min_insync=min_insync, leader=node, clear_elr=True
                )
                return Election(replace(new, unclean_epoch=new.leader_epoch), node, unclean=True)
    offline = _changed(record, isr=record.isr, min_insync=min_insync, leader=NO_LEADER)
    return Election(offline, NO_LEADER)


def relinquish(record: PartitionRecord, node: NodeId) -> PartitionRecord:
    """A node that stopped cleanly and starts again gives up its leadership (leader -1, a
    new leader epoch): it never leads an epoch it claimed before a restart. It stays in
    the ISR: it synced and closed every log, so it holds all it acknowledged."""
    if record.leader != node:
        return record
    return _led_by(record, NO_LEADER)


def registered(
    record: PartitionRecord, node: NodeId, *, first: bool, clean: bool, min_insync: int
) -> PartitionRecord:
    """Rule 9 at a node's registration. Its first registration ever changes nothing: until
    it commits, the node's replicas take no record (they neither lead nor follow), so the
    node holds nothing anyone counted, and it stays what the topic's creation made it (an
    empty replica of the ISR, or of the ELR if it was fenced since). A registration after
    a clean stop gives up its leaderships (`relinquish`); after any other stop (a crash, a
    disk lost or replaced) the node leaves the ISR and the ELR (`restarted`)."""
    if first:
        return record
    if clean:
        return relinquish(record, node)
    return restarted(record, node, min_insync=min_insync)


def elect_preferred(record: PartitionRecord, live: Collection[NodeId]) -> PartitionRecord:
    """Kafka's preferred-replica election: the first replica leads, in a new leader epoch,
    when it is in the ISR and live; else nothing changes."""
    preferred = record.replicas[0]
    if preferred == record.leader or preferred not in record.isr or preferred not in live:
        return record
    return _led_by(record, preferred)


def _led_by(record: PartitionRecord, leader: NodeId) -> PartitionRecord:
    """The record with `leader` (or NO_LEADER) in a new leader epoch, ISR and ELR kept."""
    return replace(
        record,
        leader=leader,
        leader_epoch=Epoch(record.leader_epoch + 1),
        partition_epoch=record.partition_epoch + 1,
    )


# ------------------------------------------------------------------ the leader's side ------


@dataclass(frozen=True, slots=True)
class IsrConfig:
    """A topic's ISR settings, as Kafka names them."""

    min_insync: int = 1
    replica_lag_time_max_ms: int = 10_000

    def __post_init__(self) -> None:
        """ConfigError naming the first setting out of range (tidelog.errors)."""
        check_range("IsrConfig.min_insync", self.min_insync, 1)
        check_range("IsrConfig.replica_lag_time_max_ms", self.replica_lag_time_max_ms, 1)


@dataclass(slots=True)
class _Follower:
    match: Offset | None = None  # durable, validated log end, as last reported
    past_epoch_start: bool = False
    last_caught_up_ms: int = 0
    last_fetch_ms: int | None = None
    leader_leo_at_last_fetch: int = 0


class IsrLeader:
    """The leader of one partition in ISR mode: state in, decisions out (rules 2, 5, 6, 7).

    Inputs: the committed record (`committed`), the controller's answers (`answered`), the
    leader's own durable log end (`log_end`), each follower's durable match as it reports
    it (`follower_fetched`), and the time (`proposal`). Outputs: `hwm`, the next ISR
    proposal, `acks_all_allowed`. It never acts on a proposal it merely sent, except that
    the HWM counts the maximal ISR (rule 2).
    """

    def __init__(
        self,
        node: NodeId,
        record: PartitionRecord,
        config: IsrConfig,
        *,
        epoch_start_offset: Offset,
        log_end: Offset,
        hwm: Offset,
        now_ms: int,
    ) -> None:
        self.node = node
        self.config = config
        self.record = record
        self.leader_epoch = record.leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.leo = log_end
        self.hwm = min(hwm, log_end)
        self.pending: IsrProposal | None = None
        self.deposed = record.leader != node
        # Kafka's resetReplicaState takes an ISR member as caught up when leadership starts;
        # every follower is dated so here, so that one that joins before it ever reached
        # the log end is not taken out at once as lagging since the clock's zero.
        self.followers = {
            n: _Follower(last_caught_up_ms=now_ms) for n in record.replicas if n != node
        }

    # ------------------------------------------------------------ inputs --------------------

    def committed(self, record: PartitionRecord) -> frozenset[NodeId]:
        """A committed record, as the metadata log delivers it. A newer one clears the pending
        proposal (whatever became of it, it is settled) and what the followers that started
        again since reported (`restarted_since`: one may have lost its disk; it joins only
        on what it reports from now on, rule 9), and returns those followers; one naming
        another leader or leader epoch deposes this leader for good."""
        if record.partition_epoch <= self.record.partition_epoch:
            return frozenset()
        restarted = restarted_since(self.record, record)
        self.record = record
        # KIP-455: a replica added is a follower to track (out of the ISR until rule 5
        # admits it); one removed is forgotten.
        for node in record.replicas:
            if node != self.node and node not in self.followers:
                self.followers[node] = _Follower()
        for node in [node for node in self.followers if node not in record.replicas]:
            del self.followers[node]
        # A proposal applies only at exactly the partition epoch it names: now never.
        self.pending = None
        for node in restarted:
            if (state := self.followers.get(node)) is not None:
                state.match = None
                state.past_epoch_start = False
        if record.leader != self.node or record.leader_epoch != self.leader_epoch:
            self.deposed = True
        self._advance_hwm()
        return restarted

    def answered(self, proposal: IsrProposal, result: AlterResult) -> None:
        """The controller's answer to `proposal`. It settles the pending proposal only if it
        answers that one (an answer to an older duplicate says nothing of it), and only if
        it can never be applied later: accepted, or refused by a controller whose record is
        past its epochs (a NOT_CONTROLLER answer comes from a controller that is behind, and
        the current one may still apply a copy of the proposal)."""
        self.committed(result.record)
        if proposal == self.pending and result.refusal is not Refusal.NOT_CONTROLLER:
            self.pending = None
            self._advance_hwm()

    def clock_started(self, now_ms: int) -> None:
        """The leader's clock was read for the first time, at `now_ms`: what was dated
        before it (by a clock that read 0) is dated from now instead."""
        for state in self.followers.values():
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
            if state.last_fetch_ms is not None:
                state.last_fetch_ms = max(state.last_fetch_ms, now_ms)

    def log_end(self, durable_leo: Offset) -> None:
        """The leader's own durable log end offset."""
        self.leo = max(self.leo, durable_leo)
        self._advance_hwm()

    def follower_fetched(
        self, node: NodeId, durable_match: Offset, now_ms: int, *, past_epoch_start: bool
    ) -> None:
        """A follower's validated fetch (KAFKA-13141: never a diverged one): its durable log
        end, and whether it fetched past the start of this leader's epoch (rule 5). Caught up
        (rule 6) is Kafka's: at the leader's log end now, or at the log end the leader had at
        the follower's previous fetch (then caught up as of that fetch)."""
        state = self.followers.get(node)
        if state is None:
            return
        if durable_match >= self.leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif state.last_fetch_ms is not None and durable_match >= state.leader_leo_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.match = durable_match
        state.past_epoch_start = past_epoch_start
        state.last_fetch_ms = now_ms
        state.leader_leo_at_last_fetch = self.leo
        self._advance_hwm()

    def follower_lost(self, node: NodeId) -> None:
        """A follower said it lost records it had reported (its storage set damage aside):
        its match is unknown until it reports again, so it joins no ISR and, while it is a
        member, the HWM waits (rule 2) until rule 6 takes it out."""
        state = self.followers.get(node)
        if state is not None:
            state.match = None
            state.past_epoch_start = False

    # ------------------------------------------------------------ outputs -------------------

    def maximal_isr(self) -> frozenset[NodeId]:
        """Rule 2: the committed ISR and the pending proposal's, together."""
        pending = self.pending.isr if self.pending is not None else ()
        return frozenset(self.record.isr) | frozenset(pending)

    def acks_all_allowed(self, min_insync: int | None = None) -> bool:
        """Rule 7: acks=all only with |committed ISR| >= min.insync.replicas (default: the
        topic's, as configured)."""
        wanted = self.config.min_insync if min_insync is None else min_insync
        return not self.deposed and len(self.record.isr) >= effective_min_insync(
            self.record, wanted
        )

    def proposal(self, now_ms: int) -> IsrProposal | None:
        """The next ISR change to send, if any; at most one is pending at a time. Shrink
        (rule 6): a member not caught up for replica_lag_time_max_ms. Expand (rule 5): a
        follower whose durable match reached the HWM and that fetched past the epoch start,
        and that fetched within replica_lag_time_max_ms."""
        if self.deposed or self.pending is not None:
            return None
        lag_max = self.config.replica_lag_time_max_ms
        isr = set(self.record.isr)
        for node, state in self.followers.items():
            if node in isr and now_ms - state.last_caught_up_ms > lag_max:
                isr.discard(node)
            elif (
                node not in isr
                and self._may_join(state)
                and state.last_fetch_ms is not None
                and now_ms - state.last_fetch_ms <= lag_max
            ):
                # Only a follower that still fetches: one that stopped at the HWM (strict
                # min ISR holds the HWM still) would flap in and out by rule 6.
                isr.add(node)
        isr.add(self.node)
        new = _ordered(self.record, isr)
        if new == self.record.isr:
            return None
        self.pending = IsrProposal(self.node, self.leader_epoch, self.record.partition_epoch, new)
        self._advance_hwm()
        return self.pending

    # ------------------------------------------------------------ the rules -----------------

    def _may_join(self, state: _Follower) -> bool:
        return state.match is not None and state.past_epoch_start and state.match >= self.hwm

    def _advance_hwm(self) -> None:
        """Rule 2: min durable log end over the maximal ISR, never past the leader's own
        durable log end, never back; not while the committed ISR is below min.insync.replicas
        (KIP-966's strict min ISR), nor once deposed."""
        if self.deposed or not self.acks_all_allowed():
            return
        candidate = self.leo
        for node in self.maximal_isr():
            if node == self.node:
                continue
            match = self.followers[node].match
            if match is None:
                return
            candidate = min(candidate, match)
        self.hwm = max(self.hwm, candidate)
