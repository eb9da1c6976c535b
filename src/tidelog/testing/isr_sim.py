"""ISR mode in the randomized simulator (docs/isr.md): the controller, its faulty links to
the replicas, and the invariants ISR mode adds to the checker's.

`SimController` plays the controller of one partition: it holds the committed
`PartitionRecord` and changes it only through core/isr.py's transitions (`alter_isr`,
`fence`, `restarted`, `elect`). It is sans-IO like the core: the simulator hands it the
real time (`now`, in microticks), and it draws from its own `random.Random`.

Rules of this file:
- Every exchange with the controller crosses a faulty link: a replica's heartbeat (its
  incarnation, Kafka's broker epoch), its ISR proposals (`Ready.isr_proposals`), the
  controller's answers (`Replica.on_isr_answer`) and its records
  (`Replica.on_partition_record`). Each copy is dropped, delayed, duplicated, delivered
  late or once more that late, at the rates the cluster's network has (so the liveness
  phase's heal heals these links too); a link may also be cut on its own.
- A heartbeat is answered with the current record (as a broker's metadata fetch would
  bring it), so a lost record is only late. A node silent for `session_timeout` is fenced
  (`fence`, KIP-841). The record exists before any node registered (a topic created on a
  fresh cluster): a node's first heartbeat is its first registration (`registered`,
  which changes nothing); one from a new incarnation, a node that restarted, marks it
  `restarted` (rule 9) first. A heartbeat from an older incarnation, delivered late, says
  nothing. Records and answers reach only the incarnation the controller registered, as
  a broker hands its replicas no record before its registration is applied (a copy sent
  to an earlier incarnation is dropped on arrival).
- Whenever the record names no leader, or a fenced one, the controller elects (`elect`)
  among the nodes not fenced. A share of the seeds, in memory and on disk (`draw_unclean`,
  from a generator of its own, so the other seeds run as before), sets
  unclean.leader.election.enable: with no ISR or ELR member live, any live node may be
  elected (rule 10), and a crash may take the last good copy. Those seeds run no
  DeleteRecords and no retention: after an unclean election a follower whose log starts
  past the new leader's log end keeps its HWM, and one reset to the leader's log start
  keeps its own epoch there and refuses every append after it (core findings, not yet
  fixed). The other seeds never allow one.
- `IsrChecks.on_unclean_election` tells the checker (checker.py): the history is cut where
  the new leader's durable log departs from it, at the election and again once it leads
  its epoch (`check_unclean_leader`); what was acknowledged at or past the cut is lost
  (counted: `unclean`, `lost`), and so is a write acknowledged by a leader the election
  deposed, not yet told (sim.py's `Workload.lost_ack`). Every replica is suspect until
  its HWM was checked against a leader of that epoch or later; the records a replica
  gives up (`Ready.given_up`) name its own record's leader, epoch and unclean epoch, and
  only a suspect one gives up, never below the cut.
- A failover makes the controller unavailable for a while: proposals in flight to it are
  lost or kept (each at random), so one is applied once or never (a copy applied later is
  refused by its partition epoch, rule 3); while it fails over, a proposal is dropped or
  answered NOT_CONTROLLER with an older record (a controller that is behind). The new one
  starts every session afresh. The record, committed in the metadata log, survives.
- `IsrChecks` holds ISR mode's invariants over the controller's committed record. In
  memory a down node's disk may be replaced (`wipe_allowed`: while another member of the
  committed ISR and ELR, not itself wiped, holds every acknowledged record); until the
  controller registers the node's new incarnation it is no member for the checks, and once
  a leader's record counts that restart, the leader counts for it only what it holds
  (`check_told_matches`, rule 9).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, AlterResult, IsrProposal, PartitionRecord, Refusal
from tidelog.core.replica import Replica, Role
from tidelog.records import read_header
from tidelog.testing.checker import READ_BYTES_MAX, Checker, batch_identity
from tidelog.testing.cluster import Cluster
from tidelog.types import Epoch, NodeId, Offset

CONTROLLER = NodeId(0)
HEARTBEAT_TICKS = 2  # a node heartbeats every this many ticks of its own clock
HISTORY_MAX = 32  # records a controller that is behind may still hold
FAILOVER_TICKS = (5, 40)
STALE_ANSWER_SHARE = 0.3
CUT_RATE_SHARE = 0.5  # of the partition rate: a node's link to the controller is cut


@dataclass(frozen=True, slots=True)
class IsrSettings:
    """What an ISR-mode seed draws beside the quorum settings."""

    min_insync: int
    replica_lag_time_max_ms: int
    session_timeout: int  # microticks without a heartbeat before a node is fenced
    failover_rate: float  # per microtick, in the safety phase
    # unclean.leader.election.enable (rule 10): drawn from a generator of its own
    # (`draw_unclean`), so the seeds that do not draw it run as before it existed
    unclean: bool = False

    @classmethod
    def draw(cls, rng: random.Random, replicas: int, micros_per_tick: int) -> IsrSettings:
        return cls(
            min_insync=rng.randint(1, replicas),
            replica_lag_time_max_ms=rng.choice((3, 10, 30)) * micros_per_tick,
            session_timeout=rng.choice((8, 20, 40)) * micros_per_tick,
            failover_rate=rng.choice((0.0, 0.0005, 0.002)),
        )


UNCLEAN_SEEDS_SHARE: Final = 0.3
"""Of the ISR seeds, how many allow unclean elections (`draw_unclean`)."""


def draw_unclean(seed: int) -> bool:
    """Whether a seed allows unclean elections, from a generator of its own."""
    return random.Random(f"unclean election {seed}").random() < UNCLEAN_SEEDS_SHARE


@dataclass(frozen=True, slots=True)
class Heartbeat:
    node: NodeId
    incarnation: int


@dataclass(frozen=True, slots=True)
class Proposed:
    node: NodeId
    proposal: IsrProposal


@dataclass(frozen=True, slots=True)
class RecordSent:
    node: NodeId
    record: PartitionRecord
    incarnation: int


@dataclass(frozen=True, slots=True)
class Answered:
    node: NodeId
    proposal: IsrProposal
    result: AlterResult
    incarnation: int


ToController = Heartbeat | Proposed
ToNode = RecordSent | Answered


@dataclass(slots=True)
class _Letter:
    deliver_at: int
    seq: int
    item: ToController | ToNode


@dataclass
class SimController:
    """The controller and its links (see the module's docstring)."""

    cluster: Cluster
    settings: IsrSettings
    rng: random.Random
    record: PartitionRecord = field(init=False)
    history: list[PartitionRecord] = field(default_factory=list)
    last_heard: dict[NodeId, int] = field(default_factory=dict)
    incarnations: dict[NodeId, int | None] = field(default_factory=dict)  # None: unregistered
    fenced: set[NodeId] = field(default_factory=set)
    cut: set[NodeId] = field(default_factory=set)  # nodes whose link to it is cut
    failover_until: int = 0
    failover_rate: float = 0.0
    in_flight: list[_Letter] = field(default_factory=list)
    seq: int = 0
    link_clear: dict[tuple[NodeId, NodeId], int] = field(default_factory=dict)
    on_record: list[Callable[[PartitionRecord], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ids = self.cluster.ids
        self.record = PartitionRecord(ids, ids[0], Epoch(1), 0, ids)
        self.failover_rate = self.settings.failover_rate
        for node in self.cluster.nodes:
            self.last_heard[node] = 0
            self.incarnations[node] = None
        self.cluster.on_ready.append(self.on_ready)
        self.cluster.crash_allowed = self.may_crash

    @property
    def min_insync(self) -> int:
        return self.settings.min_insync

    def note(self, text: str) -> None:
        self.cluster.note(f"controller: {text}")

    # ------------------------------------------------------------ the record ------------
    def change(self, record: PartitionRecord, why: str) -> None:
        """Commit a new record and publish it to every replica."""
        if record == self.record:
            return
        assert record.partition_epoch > self.record.partition_epoch
        self.history = [*self.history[-HISTORY_MAX + 1 :], self.record]
        self.record = record
        leader = "-" if record.leader == NO_LEADER else str(record.leader)
        self.note(
            f"{why}: pe{record.partition_epoch} leader={leader} e{record.leader_epoch} "
            f"isr={record.isr} elr={record.elr}"
        )
        for listener in self.on_record:
            listener(record)
        for node in self.cluster.ids:
            self.send_record(node)

    def send_record(self, node: NodeId) -> None:
        """The current record, to the node's registered incarnation (none: not yet)."""
        incarnation = self.incarnations[node]
        if incarnation is not None:
            self.send(RecordSent(node, self.record, incarnation))

    def maybe_elect(self) -> None:
        record = self.record
        if record.leader != NO_LEADER and record.leader not in self.fenced:
            return
        live = [node for node in self.cluster.ids if node not in self.fenced]
        election = isr.elect(
            record, live, min_insync=self.min_insync, unclean_allowed=self.settings.unclean
        )
        unclean = " (unclean)" if election.unclean else ""
        self.change(election.record, f"elect {election.leader}{unclean}")

    @property
    def available(self) -> bool:
        return self.cluster.now >= self.failover_until

    # ------------------------------------------------------------ inputs ----------------
    def tick(self, *, faults: bool) -> None:
        """Once per microtick: failovers, deliveries, session timeouts, elections."""
        now = self.cluster.now
        if faults and self.failover_rate and self.rng.random() < self.failover_rate:
            self.fail_over()
        if not self.available:
            self.deliver_due(now)
            return
        if self.failover_until and now == self.failover_until:
            self.note("a new controller takes over")
            for node in self.last_heard:
                self.last_heard[node] = now  # a new controller starts every session afresh
        self.deliver_due(now)
        for node in self.cluster.ids:
            if (
                node not in self.fenced
                and now - self.last_heard[node] > self.settings.session_timeout
            ):
                self.fenced.add(node)
                self.note(f"session of {node} expired")
                self.change(
                    isr.fence(self.record, node, min_insync=self.min_insync), f"fence {node}"
                )
        self.maybe_elect()

    def fail_over(self) -> None:
        low, high = FAILOVER_TICKS
        self.failover_until = self.cluster.now + self.rng.randint(low, high) * 10
        self.note(f"fails over until t={self.failover_until}")
        kept = []
        for letter in self.in_flight:
            if isinstance(letter.item, Proposed) and self.rng.random() < 0.5:
                self.note(f"proposal from {letter.item.node} lost in the failover")
                continue
            kept.append(letter)
        self.in_flight = kept

    def on_heartbeat(self, beat: Heartbeat) -> None:
        node = beat.node
        known = self.incarnations[node]
        if known is not None and beat.incarnation < known:
            return  # from before a restart, delivered late
        self.last_heard[node] = self.cluster.now
        if known is None or beat.incarnation > known:
            self.incarnations[node] = beat.incarnation
            first = known is None
            record = isr.registered(
                self.record, node, first=first, clean=False, min_insync=self.min_insync
            )
            self.change(record, f"{node} registered" if first else f"{node} restarted")
        if node in self.fenced:
            self.fenced.discard(node)
            self.note(f"unfence {node}")
        self.maybe_elect()
        self.send_record(node)

    def on_proposal(self, proposed: Proposed) -> None:
        proposal = proposed.proposal
        if not self.available:
            older = [r for r in self.history if r.partition_epoch < proposal.partition_epoch]
            if older and self.rng.random() < STALE_ANSWER_SHARE:
                stale = AlterResult(self.rng.choice(older), Refusal.NOT_CONTROLLER)
                self.answer(proposed.node, proposal, stale)
            return
        result = isr.alter_isr(self.record, proposal, min_insync=self.min_insync)
        self.change(result.record, f"alter from {proposed.node} ({result.refusal})")
        self.answer(proposed.node, proposal, result)

    def answer(self, node: NodeId, proposal: IsrProposal, result: AlterResult) -> None:
        """To the incarnation the controller registered (a node proposes only once its
        replica took a record, so it registered)."""
        incarnation = self.incarnations[node]
        if incarnation is not None:
            self.send(Answered(node, proposal, result, incarnation))

    def on_ready(self, node: NodeId, ready: object) -> None:
        for proposal in getattr(ready, "isr_proposals", ()):
            self.send(Proposed(node, proposal))

    def heartbeat(self, node: NodeId) -> None:
        """A node's heartbeat leaves (the simulator calls it on the node's ticks)."""
        sim_node = self.cluster.nodes[node]
        if sim_node.replica is not None and not self.cluster.is_paused(node):
            self.send(Heartbeat(node, sim_node.incarnation))

    # ------------------------------------------------------------ the links -------------
    def send(self, item: ToController | ToNode) -> None:
        cluster = self.cluster
        if item.node in self.cut or self.rng.random() < cluster.drop_rate:
            return
        copies = 2 if self.rng.random() < cluster.duplicate_rate else 1
        for _ in range(copies):
            long = cluster.long_delay_rate and self.rng.random() < cluster.long_delay_rate
            self.schedule(item, cluster.long_delay_range if long else cluster.delay_range)
        if cluster.replay_rate and self.rng.random() < cluster.replay_rate:
            self.schedule(item, cluster.long_delay_range)

    def schedule(self, item: ToController | ToNode, delay_range: tuple[int, int]) -> None:
        deliver_at = self.cluster.now + self.rng.randint(*delay_range)
        if self.cluster.in_order:
            to_controller = isinstance(item, Heartbeat | Proposed)
            link = (item.node, CONTROLLER) if to_controller else (CONTROLLER, item.node)
            deliver_at = max(deliver_at, self.link_clear.get(link, 0))
            self.link_clear[link] = deliver_at
        self.seq += 1
        self.in_flight.append(_Letter(deliver_at, self.seq, item))

    def deliver_due(self, now: int) -> None:
        due = sorted(
            (letter for letter in self.in_flight if letter.deliver_at <= now),
            key=lambda letter: (letter.deliver_at, letter.seq),
        )
        if not due:
            return
        self.in_flight = [letter for letter in self.in_flight if letter.deliver_at > now]
        for letter in due:
            self.deliver(letter.item)

    def deliver(self, item: ToController | ToNode) -> None:
        if (
            isinstance(item, RecordSent | Answered)
            and item.incarnation != self.cluster.nodes[item.node].incarnation
        ):
            return  # sent to an earlier incarnation of the node
        if isinstance(item, Heartbeat):
            if self.available:
                self.on_heartbeat(item)
        elif isinstance(item, Proposed):
            self.on_proposal(item)
        elif isinstance(item, RecordSent):
            record = item.record
            self.to_replica(item.node, lambda replica: replica.on_partition_record(record))
        else:
            answered = item
            self.to_replica(
                item.node, lambda replica: replica.on_isr_answer(answered.proposal, answered.result)
            )

    def to_replica(self, node: NodeId, action: Callable[[Replica], str | None]) -> None:
        def run(replica: Replica) -> None:
            assert replica.isr is not None
            refusal = action(replica)
            if refusal is not None:
                self.cluster.note(f"{node} refused: {refusal}")

        self.cluster.input(node, run)

    # ------------------------------------------------------------ faults ----------------
    def may_crash(self, node: NodeId) -> bool:
        """A fault may crash `node` unless it is the last good copy: the only member of the
        committed ISR and ELR that is up in the incarnation the controller knows (a
        restarted one leaves both, rule 9). Crashing it would leave the partition offline
        for good, unclean election being off; disk errors still may. With it on, any node
        may crash (an unclean election follows)."""
        if self.settings.unclean:
            return True
        good = [
            member
            for member in self.record.replicas
            if (member in self.record.isr or member in self.record.elr)
            and self.cluster.nodes[member].replica is not None
            and self.cluster.nodes[member].incarnation == self.incarnations[member]
        ]
        return good != [node]

    def cut_link(self) -> None:
        node = self.rng.choice(self.cluster.ids)
        self.cut.add(node)
        self.note(f"link to {node} cut")

    def heal(self, *, for_good: bool = False) -> None:
        if self.cut:
            self.note("links healed")
        self.cut.clear()
        if for_good:
            self.failover_rate = 0.0


class Wiped(NamedTuple):
    """A node's disk replaced: its incarnation then (until the controller registers a later
    one, which takes it out of the ISR and the ELR, it holds nothing) and its restarts in
    the committed record then (a leader whose record counts more has been told, rule 9,
    and counts it only on new answers)."""

    incarnation: int
    restarts: int


@dataclass
class IsrChecks:
    """ISR mode's invariants (docs/isr.md), over the controller's committed record:
    - every acknowledged acks=all record is in the durable log of every member of the
      committed ISR and ELR, at its offset (unless deleted there since, below its log
      start), at every step: its durable log end at every step, the batches themselves
      whenever the record changes and every `PAIRS_EVERY_TICKS`;
    - the partition epoch and the leader epoch never go back;
    - what a client saw of a leader's HWM never goes back for that client (`Workload`);
    - with unclean elections (rule 10), only what each one's cut loses may be lost, and
      what a replica gives up names its record (`on_ready`)."""

    cluster: Cluster
    controller: SimController
    checker: Checker
    last_record: PartitionRecord | None = None
    acked_end: int = 0
    # node -> when its disk was last replaced (`Wiped`)
    wiped: dict[NodeId, Wiped] = field(default_factory=dict)
    # Unclean elections (rule 10): those of the history's cut to a cut offset; the epoch
    # whose leader's log cut it again once it led; who hears of each cut.
    cut_epoch: Epoch | None = None
    on_cut: list[Callable[[int], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.controller.on_record.append(self.on_record)
        self.cluster.on_ready.append(self.on_ready)

    def on_acked(self, base_offset: int, batch: bytes) -> None:
        self.acked_end = max(self.acked_end, read_header(batch).next_offset)

    # ------------------------------------------------------------ unclean elections ---
    def on_unclean_election(self, record: PartitionRecord) -> None:
        """Rule 10: every replica is suspect, and the history is cut where the new
        leader's durable log departs from it (`Checker.cut`); again once it leads
        (`check_unclean_leader`), should its log have changed meanwhile."""
        epoch = record.unclean_epoch
        assert epoch is not None
        self.cluster.stops["unclean"] += 1
        self.checker.on_unclean_election(epoch, self.cluster.ids)
        self.cut(self.departure(record.leader), f"unclean election of {record.leader}")

    def check_unclean_leader(self) -> None:
        """Once the leader of the last unclean election leads its epoch, its log is the
        truth: the history is cut where that log departs from it."""
        record = self.controller.record
        epoch = record.unclean_epoch
        if epoch is None or self.cut_epoch == epoch or record.leader == NO_LEADER:
            return
        replica = self.cluster.nodes[record.leader].replica
        if replica is None or replica.role is not Role.LEADER or replica.epoch != epoch:
            return
        self.cut_epoch = epoch
        self.cut(self.departure(record.leader), f"{record.leader} leads e{epoch}")

    def cut(self, cut: int, why: str) -> None:
        end = self.checker.committed_end
        if cut >= end:
            return
        lost = self.checker.cut(cut)
        self.cluster.stops["lost"] += lost
        self.acked_end = min(self.acked_end, cut)
        self.cluster.note(f"checker: {why}: committed offsets {cut}..{end - 1} lost ({lost} acked)")
        for listener in self.on_cut:
            listener(cut)

    def departure(self, node: NodeId) -> int:
        """Where `node`'s durable log departs from the committed history (or ends)."""
        end, start = self.durable_bounds(node)
        held: dict[int, bytes] = {
            read_header(batch).base_offset: batch_identity(batch)
            for batch in self.durable_batches(node, start, end)
        }
        history = self.checker.history
        cut = 0
        while cut < self.checker.committed_end:
            known = history.get(cut)
            if known is None or (cut >= start and held.get(cut) != known.identity):
                break
            cut = known.next_offset
        return cut

    def on_ready(self, node: NodeId, ready: object) -> None:
        """Committed records given up (rule 10) name the replica's own record: the leader
        it follows, its epoch, the last unclean epoch (which allows it); only a suspect
        replica gives up, never below the cut (`Checker.on_given_up`)."""
        for given in getattr(ready, "given_up", ()):
            replica = self.cluster.nodes[node].replica
            mode = None if replica is None else replica.isr
            record = None if mode is None else mode.record
            self.checker.on_given_up(node, given.start_offset, given.end_offset)
            if (
                replica is None
                or record is None
                or given.start_offset >= given.end_offset
                or (given.leader, given.leader_epoch) != (record.leader, replica.epoch)
                or given.unclean_epoch != record.unclean_epoch
                or not record.may_give_up(given.leader_epoch)
            ):
                self.checker.fail(f"node {node} names what it gave up wrongly: {given}")

    def on_record(self, record: PartitionRecord) -> None:
        last = self.last_record
        if last is not None and (
            record.partition_epoch <= last.partition_epoch
            or record.leader_epoch < last.leader_epoch
        ):
            self.checker.fail(f"controller: record went back from {last} to {record}")
        self.last_record = record
        if record.unclean_epoch is not None and (
            last is None or last.unclean_epoch != record.unclean_epoch
        ):
            self.on_unclean_election(record)
        self.check_batches()

    def members(self) -> list[NodeId]:
        """The committed ISR and ELR, but a node whose disk was replaced before the
        controller registered it again (the record still names it: KIP-966's window)."""
        record = self.controller.record
        return [
            n
            for n in record.replicas
            if (n in record.isr or n in record.elr) and not self.wiped_unregistered(n)
        ]

    def wiped_unregistered(self, node: NodeId) -> bool:
        wiped = self.wiped.get(node)
        registered = self.controller.incarnations[node]
        return wiped is not None and (registered is None or registered <= wiped.incarnation)

    def wipe_allowed(self, node: NodeId) -> bool:
        """A down node's disk may be replaced while another member of the committed ISR
        and ELR still holds every acknowledged record on its own disk (up or down)."""
        return any(other != node for other in self.members())

    def on_wipe(self, node: NodeId) -> None:
        incarnation = self.cluster.nodes[node].incarnation
        self.wiped[node] = Wiped(incarnation, self.controller.record.restarts_of(node))

    def check_told_matches(self) -> None:
        """Rule 9: a leader whose record says a follower started again after its disk was
        replaced counts for it only what it holds: no match its previous incarnation
        reported (the checker's `check_matches` excuses those until the leader is told),
        while the follower follows it in its epoch (a follower of a later leader may have
        truncated what this one, deposed, still counts)."""
        live = dict(self.cluster.live_replicas())
        for node, replica in live.items():
            mode = replica.isr
            if replica.role is not Role.LEADER or mode is None or mode.record is None:
                continue
            for peer, progress in replica.progress.items():
                match = progress.match_offset
                wiped = self.wiped.get(peer)
                wiped_at = None if wiped is None else wiped.restarts
                follower = live.get(peer)
                if match is None or wiped_at is None or follower is None:
                    continue
                if mode.record.restarts_of(peer) <= wiped_at:
                    continue  # not told yet
                if follower.leader_id != node or follower.epoch != replica.epoch:
                    continue
                end = follower.log.durable_end_offset
                if match > end:
                    self.checker.fail(
                        f"leader {node} (e{replica.epoch}) counts node {peer}'s match {match} "
                        f"after its record said {peer} started again on a replaced disk; "
                        f"{peer} holds durably up to {end}"
                    )

    def check_ends(self) -> None:
        """Every member holds durably at least up to the last acknowledged record."""
        for node in self.members():
            end, _ = self.durable_bounds(node)
            if end < self.acked_end:
                self.checker.fail(
                    f"node {node}, in ISR/ELR {self.controller.record.isr}/"
                    f"{self.controller.record.elr}, holds durably up to {end}, below the "
                    f"acknowledged {self.acked_end}"
                )

    def check_batches(self) -> None:
        for node in self.members():
            end, start = self.durable_bounds(node)
            batches = self.durable_batches(node, start, end)
            present: dict[int, bytes] = {
                read_header(b).base_offset: batch_identity(b) for b in batches
            }
            for identity, offset in self.checker.acked.items():
                if offset >= start and present.get(offset) != identity:
                    self.checker.fail(
                        f"node {node}, in ISR/ELR of pe{self.controller.record.partition_epoch}, "
                        f"lacks the acknowledged write at {offset} in its durable log"
                    )
                    return

    def durable_bounds(self, node: NodeId) -> tuple[int, int]:
        """(durable log end, log start) of a node, up or down."""
        sim_node = self.cluster.nodes[node]
        replica = sim_node.replica
        if replica is not None:
            return replica.log.durable_end_offset, replica.log.log_start_offset
        state = sim_node.storage.load()
        return state.log_end_offset, state.log_start_offset

    def durable_batches(self, node: NodeId, start: int, end: int) -> list[bytes]:
        sim_node = self.cluster.nodes[node]
        source = sim_node.replica.log if sim_node.replica is not None else sim_node.storage
        return source.read(Offset(start), end_offset=Offset(end), max_bytes=READ_BYTES_MAX)
