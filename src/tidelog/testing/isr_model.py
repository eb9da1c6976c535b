"""An abstract model of one ISR-mode partition, to check core/isr.py (docs/isr.md).

Each replica's log is a list of leader epochs, one per offset, with a durable prefix; the
controller is `core.isr`'s pure transitions over one `PartitionRecord`; the leader is an
`IsrLeader`. Every step is a method (the scenario tests call them by name); `random_walk`
picks them with a seeded `random.Random`. After every step `check` asserts the invariants
of docs/isr.md and raises `Violation` on the first broken one.

Rules of this file:
- A follower fetches only from the leader it knows, in the epoch both know (KIP-320). It
  truncates to the longest prefix it shares with the leader (what KIP-101/279's epoch
  comparison finds), then reports its durable log end, which is therefore validated
  (KAFKA-13141), with "fetched past the epoch start" = durable end >= the leader's epoch
  start offset (Kafka's isFollowerInSync), then copies some records and takes HWM =
  min(leader HWM, its log end) (KAFKA-14704). So a new leader's HWM may lag (KAFKA-7128).
- Rule 11: when that prefix is below its own HWM, the follower truncates only if the
  record it holds allows it (`PartitionRecord.may_give_up` for its leader's epoch, as
  core/mode/isr.py's `gives_up`); else it refuses the leader's log, changing and reporting
  nothing (core/follow.py's CONFLICTS_WITH_COMMITTED). The model checks that with its own
  knowledge: a follower truncates below its HWM only after an unclean election the model
  saw at or before its leader's epoch (`first_unclean_epoch`).
- A crash loses the non-durable tail; a restart re-registers the node (`registered`, rule
  9), on its disk or on an empty one (a disk replaced, or one whose syncs lied).
- Proposals travel through `inflight`: delivered (possibly more than once), late, or lost;
  a controller failover loses some of them. A leader may send its pending one again.
- The acknowledged prefix (`acked`) is the longest log prefix below any HWM a leader
  published; it is reset only by an unclean election, which records the offsets it lost.
- `forge`, rare (`random_walk` draws it from a generator of its own, so a walk without
  one runs as before): a record written by hand, or by a controller bug, names a live
  replica outside the ISR and ELR leader in a new leader epoch, without saying the
  election was unclean. What was acknowledged may then be lost (the forged leader lacks
  it, and its HWM is not the truth), so from the forge on the model checks no
  acknowledged prefix (as for a leader an unclean election deposed); what still holds is
  rule 11 on every follower, the epochs that never go back, and a leader's HWM within
  its durable log.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from tidelog.core import isr
from tidelog.core.isr import NO_LEADER, IsrConfig, IsrLeader, IsrProposal, PartitionRecord
from tidelog.types import Epoch, NodeId, Offset


class Violation(AssertionError):
    """An invariant of docs/isr.md broken by the model's run."""


@dataclass
class ModelNode:
    log: list[int]
    view: PartitionRecord
    durable: int = 0
    hwm: int = 0
    up: bool = True
    led_epoch: int = -1
    leader: IsrLeader | None = None


@dataclass(frozen=True)
class Loss:
    """Offsets [start, end) an unclean election gave up, and the leader it elected."""

    leader: NodeId
    start: int
    end: int


@dataclass
class IsrModel:
    replicas: int = 3
    min_insync: int = 2
    unclean_allowed: bool = False
    lag_ms: int = 100
    now: int = 0
    record: PartitionRecord = field(init=False)
    nodes: dict[NodeId, ModelNode] = field(init=False)
    live: set[NodeId] = field(init=False)
    inflight: list[IsrProposal] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    client_hwm: int = 0
    client_epoch: int = -1  # KIP-320: a client fetches at the newest leader epoch it saw
    unclean_epoch: int = -1  # the leader epoch of the latest unclean election
    first_unclean_epoch: int = -1  # the leader epoch of the first one (rule 11's check)
    forged_epoch: int = -1  # the leader epoch of the first forged record (`forge`)
    losses: list[Loss] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        ids = tuple(NodeId(i) for i in range(1, self.replicas + 1))
        self.record = PartitionRecord(ids, ids[0], Epoch(0), 0, ids)
        self.nodes = {n: ModelNode([], self.record) for n in ids}
        self.live = set(ids)
        self.config = IsrConfig(self.min_insync, self.lag_ms)
        self._become_leader(ids[0])

    # ------------------------------------------------------------ the replicas ----------

    def produce(self, node: int, count: int = 1) -> None:
        """The leader appends `count` records of its epoch (not yet durable)."""
        n = self.nodes[NodeId(node)]
        if n.up and n.leader is not None and not n.leader.deposed:
            n.log.extend([n.leader.leader_epoch] * count)

    def sync(self, node: int) -> None:
        """A replica's fsync: its whole log is durable."""
        n = self.nodes[NodeId(node)]
        if not n.up:
            return
        n.durable = len(n.log)
        if n.leader is not None:
            n.leader.log_end(Offset(n.durable))
            self._observe(NodeId(node))

    def fetch(self, node: int, count: int = 1) -> None:
        """A follower fetches from the leader it knows: truncate, report, copy."""
        f = self.nodes[NodeId(node)]
        leader_id = f.view.leader
        if not f.up or leader_id in (NO_LEADER, node):
            return
        ln = self.nodes[leader_id]
        lead = ln.leader
        if not ln.up or lead is None or lead.deposed or lead.leader_epoch != f.view.leader_epoch:
            return
        shared = common_prefix(f.log, ln.log)
        if shared < f.hwm:
            if not f.view.may_give_up(lead.leader_epoch):
                return  # rule 11: a conflict with what it committed, refused
            self._gives_up(NodeId(node), shared, lead.leader_epoch)
        if shared < len(f.log):
            del f.log[shared:]
            f.durable = min(f.durable, shared)
        past = f.durable >= lead.epoch_start_offset
        lead.follower_fetched(NodeId(node), Offset(f.durable), self.now, past_epoch_start=past)
        self._observe(leader_id)
        f.log.extend(ln.log[len(f.log) : len(f.log) + count])
        f.hwm = min(lead.hwm, len(f.log))

    def tick(self, ms: int) -> None:
        """Time passes; every leader sends the ISR change it wants, if any."""
        self.now += ms
        for node_id, n in self.nodes.items():
            if n.up and n.leader is not None:
                proposal = n.leader.proposal(self.now)
                if proposal is not None:
                    self.inflight.append(proposal)
                self._observe(node_id)

    def resend(self, node: int) -> None:
        """A leader sends its pending proposal again (AlterPartitionManager's retry)."""
        n = self.nodes[NodeId(node)]
        if n.up and n.leader is not None and n.leader.pending is not None:
            self.inflight.append(n.leader.pending)

    def crash(self, node: int) -> None:
        n = self.nodes[NodeId(node)]
        if not n.up:
            return
        n.up = False
        del n.log[n.durable :]
        n.hwm = min(n.hwm, n.durable)
        n.leader = None

    def restart(self, node: int, *, wiped: bool = False) -> None:
        """The node comes back and registers again (rule 9 at the controller), on its disk
        or, `wiped`, on an empty one (a disk replaced, or one whose syncs lied)."""
        n = self.nodes[NodeId(node)]
        if n.up:
            return
        if wiped:
            n.log, n.durable, n.hwm, n.led_epoch = [], 0, 0, -1
        n.up = True
        self.live.add(NodeId(node))
        self._set_record(
            isr.registered(
                self.record, NodeId(node), first=False, clean=False, min_insync=self.min_insync
            )
        )

    def publish(self, node: int) -> None:
        """The node learns the committed record."""
        node_id = NodeId(node)
        n = self.nodes[node_id]
        if not n.up or self.record.partition_epoch <= n.view.partition_epoch:
            return
        n.view = self.record
        if n.leader is not None:
            n.leader.committed(self.record)
            if n.leader.deposed:
                n.leader = None
            else:
                self._observe(node_id)
        if self.record.leader == node_id and n.leader is None:
            self._become_leader(node_id)

    # ------------------------------------------------------------ the controller --------

    def deliver(self, index: int = 0, *, keep: bool = False, answer: bool = True) -> None:
        """The controller applies an in-flight proposal (kept for a later duplicate, or
        not); its answer reaches the proposer unless `answer` is False (lost)."""
        if not self.inflight:
            return
        index %= len(self.inflight)
        proposal = self.inflight[index] if keep else self.inflight.pop(index)
        before = self.record
        result = isr.alter_isr(before, proposal, min_insync=self.min_insync)
        for joined in set(result.record.isr) - set(before.isr):
            durable = self.nodes[joined].durable
            # After a forged record nothing acknowledged is the truth (`forge`).
            if durable < len(self.acked) and self.forged_epoch < 0:
                raise Violation(
                    f"{joined} joined the ISR with durable LEO {durable} < HWM {len(self.acked)}"
                )
        self._set_record(result.record)
        self.trace.append(f"  -> {result.refusal or 'accepted'} {self.record}")
        n = self.nodes[proposal.leader]
        if answer and n.up and n.leader is not None:
            n.leader.answered(proposal, result)
            if n.leader.deposed:
                n.leader = None
            else:
                self._observe(proposal.leader)

    def drop(self, index: int = 0) -> None:
        if self.inflight:
            self.inflight.pop(index % len(self.inflight))

    def fail_over(self, keep: list[bool]) -> None:
        """The metadata leader changes: each in-flight proposal reaches the new controller
        (True) or is lost."""
        self.inflight = [p for p, k in zip(self.inflight, keep, strict=False) if k]

    def fence(self, node: int) -> None:
        """The controller stops hearing from a node (it may still be up: a partition)."""
        node_id = NodeId(node)
        if node_id in self.live:
            self.live.discard(node_id)
            self._set_record(isr.fence(self.record, node_id, min_insync=self.min_insync))

    def unfence(self, node: int) -> None:
        if self.nodes[NodeId(node)].up:
            self.live.add(NodeId(node))

    def elect(self) -> None:
        """The controller elects when the leader is not live; the new leader hears at once."""
        if self.record.leader in self.live:
            return
        election = isr.elect(
            self.record,
            self.live,
            min_insync=self.min_insync,
            unclean_allowed=self.unclean_allowed,
        )
        if election.unclean:
            self.unclean_epoch = election.record.leader_epoch
            if self.first_unclean_epoch < 0:
                self.first_unclean_epoch = self.unclean_epoch
        if election.leader != NO_LEADER and self.forged_epoch < 0:
            leader = self.nodes[election.leader]
            kept = common_prefix(leader.log[: leader.durable], self.acked)
            if kept < len(self.acked):
                if not election.unclean:
                    raise Violation(
                        f"clean election of {election.leader} loses offsets "
                        f"{kept}..{len(self.acked)}"
                    )
                self.losses.append(Loss(election.leader, kept, len(self.acked)))
                del self.acked[kept:]
                self.client_hwm = min(self.client_hwm, kept)
        self._set_record(election.record)
        if election.leader != NO_LEADER:
            self.publish(election.leader)

    def forgeable(self) -> list[NodeId]:
        """The replicas a forged record may name leader: live, up, outside ISR and ELR."""
        r = self.record
        return [
            n
            for n in r.replicas
            if n in self.live and self.nodes[n].up and n not in r.isr and n not in r.elr
        ]

    def forge(self, node: int) -> None:
        """A record written by hand (or by a controller bug) names `node`, one of
        `forgeable`, leader in a new leader epoch and partition epoch, with the ISR and
        `node`, without saying the election was unclean; the leader hears at once. From
        then on nothing acknowledged is the truth (rule 11 still holds: see the file's
        rules)."""
        node_id = NodeId(node)
        if node_id not in self.forgeable():
            return
        r = self.record
        forged = replace(
            r,
            leader=node_id,
            leader_epoch=Epoch(r.leader_epoch + 1),
            partition_epoch=r.partition_epoch + 1,
            isr=tuple(n for n in r.replicas if n in r.isr or n == node_id),
        )
        if self.forged_epoch < 0:
            self.forged_epoch = forged.leader_epoch
        self._set_record(forged)
        self.trace.append(f"  -> forged {self.record}")
        self.publish(node)

    # ------------------------------------------------------------ invariants ------------

    def check(self) -> None:
        """docs/isr.md's invariants, after every step (the acknowledged prefix only until a
        forged record: `forge`)."""
        if self.forged_epoch >= 0:
            return
        for member in set(self.record.isr) | set(self.record.elr):
            n = self.nodes[member]
            held = n.log[: n.durable]
            if held[: len(self.acked)] != self.acked:
                raise Violation(
                    f"member {member} of ISR {self.record.isr} / ELR {self.record.elr} "
                    f"lacks acknowledged offsets: holds {held}, acknowledged {self.acked}"
                )

    def _set_record(self, new: PartitionRecord) -> None:
        if new.partition_epoch < self.record.partition_epoch or (
            new != self.record and new.partition_epoch == self.record.partition_epoch
        ):
            raise Violation(f"partition epoch went back or stood still: {self.record} -> {new}")
        if new.leader_epoch < self.record.leader_epoch:
            raise Violation(f"leader epoch went back: {self.record} -> {new}")
        self.record = new

    def _become_leader(self, node_id: NodeId) -> None:
        n = self.nodes[node_id]
        if not n.up or n.led_epoch == self.record.leader_epoch:
            return
        n.view = self.record
        n.led_epoch = self.record.leader_epoch
        start = len(n.log)
        n.log.append(self.record.leader_epoch)  # the epoch's control batch (KIP-207)
        n.leader = IsrLeader(
            node_id,
            self.record,
            self.config,
            epoch_start_offset=Offset(start),
            log_end=Offset(n.durable),
            hwm=Offset(n.hwm),
            now_ms=self.now,
        )

    def _gives_up(self, node_id: NodeId, shared: int, leader_epoch: int) -> None:
        """Rule 11 by the model's own knowledge: a follower truncating its log to `shared`,
        below its HWM, follows a leader elected at or after an unclean election."""
        if not 0 <= self.first_unclean_epoch <= leader_epoch:
            raise Violation(
                f"{node_id} truncates below its HWM {self.nodes[node_id].hwm} to {shared} "
                f"following the leader of epoch {leader_epoch}, with no unclean election "
                f"at or before it (first: {self.first_unclean_epoch})"
            )

    def _observe(self, node_id: NodeId) -> None:
        """A leader's HWM, as published to clients: it extends the acknowledged prefix."""
        n = self.nodes[node_id]
        lead = n.leader
        # A leader deposed by an unclean election acknowledged only what that election gave
        # up (and says so); its HWM says nothing any more.
        if lead is None or lead.deposed or lead.leader_epoch < self.unclean_epoch:
            return
        hwm = lead.hwm
        if hwm > n.durable:
            raise Violation(f"leader {node_id}: HWM {hwm} past its durable LEO {n.durable}")
        if self.forged_epoch >= 0:  # after a forged record no HWM is the truth (`forge`)
            n.hwm = hwm
            return
        prefix = n.log[:hwm]
        if prefix[: len(self.acked)] != self.acked[:hwm]:
            raise Violation(
                f"leader {node_id}'s log below its HWM {hwm} differs from the acknowledged "
                f"prefix: {prefix} vs {self.acked}"
            )
        if hwm > len(self.acked):
            self.acked = prefix
        n.hwm = hwm
        # KIP-207: served only from the epoch start; KIP-320: a client that saw a newer
        # leader epoch is refused by an older leader.
        if hwm >= lead.epoch_start_offset and lead.leader_epoch >= self.client_epoch:
            self.client_epoch = lead.leader_epoch
            if hwm < self.client_hwm:
                raise Violation(f"leader {node_id} serves HWM {hwm} < {self.client_hwm} seen")
            self.client_hwm = hwm


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading entries two logs share (what the log-matching check finds)."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


FORGE_SHARE: Final = 0.2
"""The share of walks in which a record is forged (`IsrModel.forge`), once, at the first
step from a drawn one on where a replica may be named."""


def random_walk(seed: int, steps: int = 300) -> IsrModel:
    """A seeded run of the model, checked after every step; raises `Violation` (with the
    seed and step in its message) on the first broken invariant. The forge is drawn from a
    generator of its own: a walk without one takes the steps it took before forges were."""
    rng = random.Random(seed)
    forge_rng = random.Random(f"forge {seed}")
    forge_from = forge_rng.randrange(max(steps, 1)) if forge_rng.random() < FORGE_SHARE else None
    replicas = rng.choice((3, 3, 5))
    model = IsrModel(
        replicas=replicas,
        min_insync=rng.randint(1, (replicas + 1) // 2),
        unclean_allowed=rng.random() < 0.25,
    )
    ids = list(range(1, replicas + 1))
    actions: list[tuple[int, Callable[[], None]]] = [
        (6, lambda: model.produce(rng.choice(ids), rng.randint(1, 3))),
        (6, lambda: model.sync(rng.choice(ids))),
        (12, lambda: model.fetch(rng.choice(ids), rng.randint(0, 4))),
        (5, lambda: model.tick(rng.randint(0, 3 * model.lag_ms // 2))),
        (1, lambda: model.resend(rng.choice(ids))),
        (
            5,
            lambda: model.deliver(
                rng.randrange(8), keep=rng.random() < 0.2, answer=rng.random() < 0.8
            ),
        ),
        (1, lambda: model.drop(rng.randrange(8))),
        (1, lambda: model.fail_over([rng.random() < 0.5 for _ in model.inflight])),
        (5, lambda: model.publish(rng.choice(ids))),
        (1, lambda: model.crash(rng.choice(ids))),
        (2, lambda: model.restart(rng.choice(ids), wiped=rng.random() < 0.25)),
        (1, lambda: model.fence(rng.choice(ids))),
        (2, lambda: model.unfence(rng.choice(ids))),
        (3, model.elect),
    ]
    weights = [w for w, _ in actions]
    for step in range(steps):
        _, action = rng.choices(actions, weights)[0]
        try:
            if forge_from is not None and step >= forge_from and model.forgeable():
                model.forge(forge_rng.choice(model.forgeable()))
                model.check()
                forge_from = None
            action()
            model.check()
        except Violation as broken:
            raise Violation(f"seed {seed} step {step}: {broken}") from None
    return model
