"""An abstract model of one Raft log whose voters change (KIP-853), to check core/membership.py.

Five nodes, some voters, the others observers. Each holds a log of entries (the epoch of the
leader that wrote it and the voter set it carries, if any), a durable prefix, a HWM saved
with that prefix, its epoch and its vote, and a `VoterSetHistory` kept from its log by
appends and truncations. The rules of membership are core/membership.py's own: `VoterSet`,
`VoterSetHistory`, `change_refusal`, `ReplicaKey`. Every step is a method (a test may call
them by name); `random_walk` picks them with a seeded `random.Random`. After every step
`check` asserts the invariants below and raises `Violation` on the first broken one.

Rules of this file (Raft §5, Ongaro's thesis §4, KIP-853, KAFKA-16580):
- Messages are direct reads of state between nodes that are up and on one side of the
  network's partition, as in isr_model.py; a lost message is a step not taken (a campaign
  reaches the nodes the walk names, a fetch round the nodes it draws).
- A node campaigns only when its key is in its current voter set (`voters_in_effect`,
  membership rule 4: the last set its log holds). Any node up may grant, once per epoch,
  durably, to a candidate whose (last epoch, log end) is at least its own; the candidate
  counts the grants of its own current set's keys (`VoterSet.is_quorum`).
- A leader writes an entry of its epoch at once (the epoch's start, Kafka's LeaderChange
  record). A follower takes a leader's suffix after the log-matching check: it truncates
  what conflicts, which must lie above its HWM, takes HWM = min(the leader's HWM, its log
  end), may sync both, and reports its durable log end: the leader's match for its key.
- The leader's HWM moves to an offset its current voter set holds durably by a majority
  (its own durable log end counts under its own key), and only past its epoch's first entry
  (Raft's Figure 8). A leader whose committed change removed it resigns (KIP-853).
- A leader proposes a change (add an observer its matches show caught up, remove a voter,
  or the two steps of a replaced disk: remove its old key, then add its new one) through
  `change_refusal`; the walk also proposes changes of two voters at once, which the rules
  refuse.
- A sync makes the whole log durable and saves the HWM with it (`hwm_durable`, tidelog's
  storage); a crash loses the tail that is not durable and goes back to the saved HWM. In
  a walk without `hwm_durable` (KRaft's HWM) a restarted node knows no HWM until a leader
  that knows its own tells it, and the check of voter sets above the HWM skips it.
- A restart on an empty disk is a new member (KIP-853): a new directory id, so a new key;
  nothing of the old copy survives, not its epoch nor its vote; its history starts with
  the partition's first voter set, in which its new key is not. Its old key stays a voter
  until a change removes it, and its old acknowledgements count for nothing it holds now.
  A walk loses one copy at a time, only from voter sets of 3 or more (`may_lose`), so a
  majority of copies always survives and a failure means a bug.
- `random_walk` draws the weight of each step per walk (swarm testing) and cuts one or two
  nodes off, often a leader among them (Jepsen's partition nemeses).

Invariants (`check`, and where a step decides): one leader per epoch; an elected leader
holds every committed entry, and no committed entry is ever truncated or changed; every
node holds at most one voter set between its HWM and its log end; consecutive committed
voter sets differ by at most one voter; a node's epoch and saved HWM never go back, nor its
HWM while it is up (a restart on an empty disk starts a new member); a leader is a voter
of the last set its log holds, is elected by a majority of that set's keys, and advances
its HWM on such a majority, the set read from the log and counted without `VoterSet`'s
help; each node's history is the one its log implies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from tidelog.core import membership
from tidelog.core.membership import ReplicaKey, VoterSet, VoterSetHistory
from tidelog.testing.isr_model import common_prefix
from tidelog.types import DirectoryId, NodeId, Offset

NODES: Final = 5
"""How many nodes the model runs; voters and observers among them."""

VOTER_COUNTS: Final = (1, 2, 3, 4, 4, 5)
"""How many of the nodes a walk starts with as voters (drawn from this tuple)."""

CHANGES: Final = ("add", "add", "remove", "replace", "replace", "two")
"""The kinds of change a walk proposes (`MembershipModel.propose`), drawn from this tuple."""

CAMPAIGN_BESIDE_A_LEADER: Final = 0.05
"""The share of campaigns a walk starts while the candidate hears a leader (else it waits
for none)."""

REACH: Final = (0.5, 0.8, 1.0)
"""The chance that a campaign's request reaches a given node (else it is lost); each walk
draws one of these."""

EMPTY_DISK_SHARE: Final = 0.4
"""The share of a walk's restarts that come back on an empty disk (a new member)."""

HWM_DURABLE_SHARE: Final = 0.5
"""The share of walks whose nodes save their HWM with their log (tidelog's storage); in the
others a restarted node knows no HWM until a leader that knows its own tells it (KRaft's)."""

FETCH_SHARE: Final = (0.2, 0.5, 0.9)
"""The chance that a node fetches from the leader in a fetch round; each walk draws one."""

FETCH_SYNC_SHARE: Final = (0.2, 0.6, 0.9)
"""The share of fetches after which the follower syncs before it answers; each walk draws
one."""

STEP_WEIGHTS: Final = {
    "campaign": 3,
    "append": 6,
    "replicate": 8,
    "sync": 6,
    "advance": 6,
    "propose": 4,
    "crash": 0.3,
    "restart": 1,
    "partition": 2,
    "heal": 1,
    "new_disk": 0.5,
}
"""How often `random_walk` takes each step, relative to the others."""

SWARM_FACTORS: Final = (0.1, 0.5, 1.0, 2.0, 8.0)
"""What a walk multiplies each step's weight by, drawn once per step kind and walk (swarm
testing, Groce et al. 2012: each walk leans on some steps and starves others)."""


class Violation(AssertionError):
    """An invariant of the membership rules broken by the model's run; `trace` holds the
    model's elections, changes and new disks up to it (`random_walk` fills it in)."""

    trace: tuple[str, ...] = ()


class Entry(NamedTuple):
    """One record: the epoch of the leader that wrote it, a serial number unique in the run
    (two leaders' records never look alike), and the voter set it carries, if any."""

    epoch: int
    serial: int
    voters: VoterSet | None


@dataclass
class Leadership:
    """What a leader holds in memory for its epoch: where the epoch starts in its log and
    the durable log end each key last reported (its match)."""

    epoch: int
    epoch_start: int
    matches: dict[ReplicaKey, int] = field(default_factory=dict)


@dataclass
class ModelNode:
    """One node's copy: `log[:durable]` and `saved_hwm` survive a crash, as do `epoch`
    and `voted_for`; `incarnation` counts its empty disks, `boot` its crashes."""

    key: ReplicaKey
    history: VoterSetHistory
    log: list[Entry] = field(default_factory=list)
    durable: int = 0
    hwm: int = 0
    saved_hwm: int = 0
    hwm_known: bool = True
    epoch: int = 0
    voted_for: ReplicaKey | None = None
    up: bool = True
    leading: Leadership | None = None
    incarnation: int = 0
    boot: int = 0


@dataclass(frozen=True)
class Seen:
    """What `check` saw of a node last, to see that nothing went back."""

    incarnation: int
    boot: int
    epoch: int
    hwm: int
    saved_hwm: int


@dataclass
class MembershipModel:
    """Five nodes of one partition, the first `voter_count` of them its first voters; what
    the checker keeps: the committed entries, the leader of each epoch, what it saw."""

    voter_count: int = 3
    hwm_durable: bool = True
    nodes: dict[NodeId, ModelNode] = field(init=False)
    first_voters: VoterSet = field(init=False)
    first_keys: frozenset[ReplicaKey] = field(init=False)
    committed: list[Entry] = field(default_factory=list)
    leaders: dict[int, ReplicaKey] = field(default_factory=dict)
    changes: int = 0
    serial: int = 0
    disks: int = 0
    cut_off: frozenset[NodeId] = frozenset()
    seen: dict[NodeId, Seen] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert 1 <= self.voter_count <= NODES
        keys = [ReplicaKey(NodeId(node), self._new_directory()) for node in range(1, NODES + 1)]
        self.first_keys = frozenset(keys)
        self.first_voters = VoterSet.of(keys[: self.voter_count])
        self.nodes = {
            key.node: ModelNode(key, VoterSetHistory.starting_with(self.first_voters))
            for key in keys
        }

    # ------------------------------------------------------------ questions -------------

    def voters_in_effect(self, n: ModelNode) -> VoterSet:
        """The voter set a node acts on: the last its log holds (membership rule 4)."""
        return n.history.current

    def leaders_up(self) -> list[int]:
        """The nodes up that believe they lead (a deposed one may not know it yet)."""
        return [node for node, n in sorted(self.nodes.items()) if n.up and n.leading]

    def connected(self, a: int, b: int) -> bool:
        """Whether messages pass between two nodes (not across a network partition)."""
        return (NodeId(a) in self.cut_off) == (NodeId(b) in self.cut_off)

    def candidates_up(self) -> list[int]:
        """The nodes up that may campaign: their key is in their current voter set."""
        return [
            node
            for node, n in sorted(self.nodes.items())
            if n.up and n.key in self.voters_in_effect(n)
        ]

    def may_lose(self, node: int) -> bool:
        """Whether a walk may put `node` on an empty disk and keep a majority of copies in
        every voter set: no other copy is lost yet, and any set naming it has 3 voters."""
        key = self.nodes[NodeId(node)].key
        return not self.ghosts() and all(
            len(voters) >= 3
            for voters in (self.voters_in_effect(n) for n in self.nodes.values())
            if key in voters
        )

    def ghosts(self) -> list[ReplicaKey]:
        """Voter keys, in any node's current set, of a copy its node no longer holds."""
        return sorted(
            {
                key
                for n in self.nodes.values()
                for key in self.voters_in_effect(n)
                if self.nodes[key.node].key != key
            }
        )

    # ------------------------------------------------------------ the steps -------------

    def campaign(self, node: int, reach: Sequence[int]) -> None:
        """A voter starts an election in its next epoch; the nodes in `reach` hear it."""
        c = self.nodes[NodeId(node)]
        voters = self.voters_in_effect(c)
        if not c.up or c.key not in voters:  # an observer never campaigns
            return
        epoch = c.epoch + 1
        self._adopt_epoch(c, epoch)
        c.voted_for = c.key
        grants = {c.key}
        newer = epoch
        for other in sorted(set(reach) - {node}):
            v = self.nodes[NodeId(other)]
            if not v.up or not self.connected(node, other):
                continue
            if v.epoch > epoch:
                newer = max(newer, v.epoch)
                continue
            self._adopt_epoch(v, epoch)
            if v.voted_for is None and _up_to_date(c.log, v.log):
                v.voted_for = c.key  # durable: one vote per epoch (Raft §5.2)
                grants.add(v.key)
        if newer > epoch:  # an answer names a newer epoch: the candidate takes it (§5.1)
            self._adopt_epoch(c, newer)
        elif voters.is_quorum(grants):
            self._become_leader(c, grants)

    def append(self, node: int, count: int = 1) -> None:
        """The leader appends `count` records of its epoch (not yet durable)."""
        n = self.nodes[NodeId(node)]
        if n.up and n.leading is not None:
            n.log.extend(self._entry(n.epoch, None) for _ in range(count))

    def replicate(self, node: int, leader: int, count: int = 1, *, sync: bool = False) -> None:
        """`node` fetches from `leader`: at most `count` entries after the log-matching
        check and the leader's HWM, an fsync of both if `sync`, then its durable log end
        reported."""
        f, ld = self.nodes[NodeId(node)], self.nodes[NodeId(leader)]
        lead = ld.leading
        if f is ld or not f.up or not ld.up or lead is None or not self.connected(node, leader):
            return
        if ld.epoch < f.epoch:  # a deposed leader hears of the newer epoch
            self._adopt_epoch(ld, f.epoch)
            return
        self._adopt_epoch(f, ld.epoch)
        if f.leading is not None:
            raise Violation(f"{f.key} and {ld.key} both lead epoch {ld.epoch}")
        shared = common_prefix(f.log, ld.log)
        if shared < f.hwm:
            raise Violation(
                f"{f.key} would truncate committed offsets {shared}..{f.hwm} to follow "
                f"{ld.key} of epoch {ld.epoch}"
            )
        if shared < len(f.log):
            del f.log[shared:]
            f.durable = min(f.durable, shared)
            f.history.truncate(Offset(shared))
        for entry in ld.log[len(f.log) : len(f.log) + count]:
            if entry.voters is not None:
                f.history.append(Offset(len(f.log)), entry.voters)
            f.log.append(entry)
        if ld.hwm_known:
            self._raise_hwm(f, min(ld.hwm, len(f.log)))
        f.hwm_known = ld.hwm_known  # a leader that knows no HWM tells none
        if sync:
            self.sync(node)  # the records and the HWM of one fetch are saved together
        lead.matches[f.key] = f.durable
        self._check_history(f)

    def sync(self, node: int) -> None:
        """An fsync: the whole log is durable, and the HWM is saved with it (when the
        walk's nodes save it: `hwm_durable`)."""
        n = self.nodes[NodeId(node)]
        if n.up:
            n.durable = len(n.log)
            if self.hwm_durable:
                n.saved_hwm = n.hwm

    def advance(self, node: int) -> None:
        """The leader moves its HWM to the highest offset a majority of its current voter
        set holds durably, if that is past its epoch's first entry (Figure 8)."""
        n = self.nodes[NodeId(node)]
        lead = n.leading
        if not n.up or lead is None:
            return
        voters = self.voters_in_effect(n)
        acks = dict(lead.matches)
        acks[n.key] = n.durable  # the leader acknowledges its own durable log like a follower
        floor = max(n.hwm, lead.epoch_start)
        for offset in sorted(set(acks.values()), reverse=True):
            if offset <= floor:
                return
            holders = {key for key, match in acks.items() if match >= offset}
            if voters.is_quorum(holders):
                self._commit(n, holders, offset)
                return

    def propose(self, node: int, kind: str, pick: int = 0) -> None:
        """The leader proposes a change of `kind` (one of CHANGES), the `pick`th of its
        candidates; it appends it if `change_refusal` finds nothing against it."""
        n = self.nodes[NodeId(node)]
        lead = n.leading
        if not n.up or lead is None:
            return
        proposed = self._proposal(n, lead, kind, pick)
        if proposed is None:
            return
        refusal = membership.change_refusal(
            n.history,
            proposed,
            hwm=Offset(n.hwm),
            epoch_start_offset=Offset(lead.epoch_start),
        )
        if refusal is not None:
            return
        n.history.append(Offset(len(n.log)), proposed)
        n.log.append(self._entry(n.epoch, proposed))
        self.changes += 1
        self.trace.append(
            f"{n.key} of epoch {n.epoch} appends {_names(proposed)} at {len(n.log) - 1}"
        )

    def partition(self, nodes: Sequence[int]) -> None:
        """The network splits `nodes` from the others until the next partition or heal."""
        self.cut_off = frozenset(NodeId(node) for node in nodes)
        if self.cut_off:
            self.trace.append(f"partition {sorted(self.cut_off)} from the others")

    def heal(self) -> None:
        if self.cut_off:
            self.trace.append("the partition heals")
        self.cut_off = frozenset()

    def crash(self, node: int) -> None:
        """The node stops; what is not durable is lost, the HWM is the saved one."""
        n = self.nodes[NodeId(node)]
        if not n.up:
            return
        n.up, n.leading, n.boot = False, None, n.boot + 1
        del n.log[n.durable :]
        n.history.truncate(Offset(n.durable))
        n.hwm = n.saved_hwm if self.hwm_durable else 0
        n.hwm_known = self.hwm_durable
        self._check_history(n)

    def restart(self, node: int, *, empty_disk: bool = False) -> None:
        """A stopped node starts again, on its disk or on an empty one (a new member)."""
        n = self.nodes[NodeId(node)]
        if n.up:
            return
        n.up = True
        if empty_disk:
            n.log, n.durable, n.hwm, n.saved_hwm = [], 0, 0, 0
            n.history = VoterSetHistory.starting_with(self.first_voters)
            n.incarnation += 1
            self._replace_disk(n)
            self.trace.append(f"node {node} restarts on an empty disk as {n.key}")

    def restart_on_empty_disk(self, node: int) -> None:
        self.restart(node, empty_disk=True)

    # ------------------------------------------------------------ invariants ------------

    def check(self) -> None:
        """The invariants that hold between steps (the rest are checked where a step
        decides: an election, a truncation, a HWM)."""
        for node, n in self.nodes.items():
            if n.hwm > len(n.log) or n.saved_hwm > n.durable:
                raise Violation(f"{n.key}: HWM {n.hwm}/{n.saved_hwm} past its log {n.durable}")
            above = [e.voters for e in n.log[n.hwm :] if e.voters is not None]
            if n.hwm_known and len(above) > 1:
                raise Violation(
                    f"{n.key} holds {len(above)} voter sets between its HWM {n.hwm} and its "
                    f"log end {len(n.log)}"
                )
            now = Seen(n.incarnation, n.boot, n.epoch, n.hwm, n.saved_hwm)
            before = self.seen.get(node)
            self.seen[node] = now
            if before is None or before.incarnation != now.incarnation:
                continue
            if now.epoch < before.epoch or now.saved_hwm < before.saved_hwm:
                raise Violation(f"{n.key} went back: {before} -> {now}")
            if now.boot == before.boot and now.hwm < before.hwm:
                raise Violation(f"{n.key}'s HWM went back while up: {before} -> {now}")

    def _become_leader(self, c: ModelNode, grants: set[ReplicaKey]) -> None:
        voters = _voters_in_log(c.log, self.first_voters)  # the checker's own count
        if c.key not in voters:
            raise Violation(f"{c.key} elected, not a voter of the set its log holds {voters}")
        if len(grants & voters) < len(voters) // 2 + 1:
            raise Violation(f"{c.key} elected by {_names(grants)}, no majority of {voters}")
        if c.epoch in self.leaders:
            raise Violation(f"{c.key} and {self.leaders[c.epoch]} both lead epoch {c.epoch}")
        if c.log[: len(self.committed)] != self.committed:
            raise Violation(
                f"{c.key} elected in epoch {c.epoch} without every committed entry "
                f"(holds {len(c.log)}, {len(self.committed)} committed)"
            )
        self.leaders[c.epoch] = c.key
        c.leading = Leadership(c.epoch, len(c.log))
        c.log.append(self._entry(c.epoch, None))
        self.trace.append(f"{c.key} leads epoch {c.epoch}, votes {_names(grants)} of {voters}")

    def _commit(self, n: ModelNode, holders: set[ReplicaKey], offset: int) -> None:
        voters = _voters_in_log(n.log, self.first_voters)  # the checker's own count
        if len(holders & voters) < len(voters) // 2 + 1:
            raise Violation(
                f"{n.key} commits {offset} on {_names(holders)}, no majority of {voters}"
            )
        known = min(offset, len(self.committed))
        if n.log[:known] != self.committed[:known]:
            raise Violation(f"{n.key} commits {offset} over other committed entries")
        if offset > len(self.committed):
            last = self._last_committed_voters()
            for entry in n.log[len(self.committed) : offset]:
                if entry.voters is None:
                    continue
                if len(last.voters ^ entry.voters.voters) > 1:
                    raise Violation(
                        f"committed voter sets {_names(last)} then {_names(entry.voters)}"
                    )
                last = entry.voters
            self.committed = n.log[:offset]
        self._raise_hwm(n, offset)
        n.hwm_known = True
        # A leader its own committed change removed resigns (KIP-853).
        if n.key not in self.voters_in_effect(n) and n.history.last_offset < n.hwm:
            n.leading = None

    def _raise_hwm(self, n: ModelNode, hwm: int) -> None:
        if hwm <= n.hwm:
            return
        if hwm > len(self.committed) or n.log[n.hwm : hwm] != self.committed[n.hwm : hwm]:
            raise Violation(f"{n.key}'s HWM {hwm} covers entries never committed")
        n.hwm = hwm

    def _check_history(self, n: ModelNode) -> None:
        """A pair assertion: the history kept by appends and truncations is the one the
        log implies."""
        implied = VoterSetHistory(
            [n.history.entries[0]]
            + [
                membership.VoterSetEntry(Offset(offset), entry.voters)
                for offset, entry in enumerate(n.log)
                if entry.voters is not None
            ]
        )
        if implied != n.history:
            raise Violation(f"{n.key}'s history {n.history} is not its log's {implied}")

    def _last_committed_voters(self) -> VoterSet:
        for entry in reversed(self.committed):
            if entry.voters is not None:
                return entry.voters
        return self.first_voters

    # ------------------------------------------------------------ helpers ---------------

    def _proposal(self, n: ModelNode, lead: Leadership, kind: str, pick: int) -> VoterSet | None:
        current = n.history.current
        # A new voter is added once caught up to the HWM, as the leader knows it.
        caught_up = [
            o.key for _, o in sorted(self.nodes.items()) if lead.matches.get(o.key, -1) >= n.hwm
        ]
        ready = [key for key in caught_up if key.node not in current.nodes]
        ghosts = [key for key in current if self.nodes[key.node].key != key]
        voters = list(current)
        if kind == "add" and ready:
            return current.add(ready[pick % len(ready)])
        if kind == "remove" and len(voters) > 1:
            return current.remove(voters[pick % len(voters)])
        if kind == "replace" and ghosts and len(voters) > 1:
            return current.remove(ghosts[pick % len(ghosts)])
        if kind == "two":
            renewed = [(key, self.nodes[key.node].key) for key in ghosts]
            return _two_changes(current, [pair for pair in renewed if pair[1] in caught_up], ready)
        return None

    def _replace_disk(self, n: ModelNode) -> None:
        """The node's copy is new: a new directory id, so a new key (KIP-853), and nothing
        of the old copy survives, not its epoch nor its vote."""
        n.key = ReplicaKey(n.key.node, self._new_directory())
        n.epoch, n.voted_for = 0, None

    def _adopt_epoch(self, n: ModelNode, epoch: int) -> None:
        if epoch > n.epoch:
            n.epoch, n.voted_for, n.leading = epoch, None, None

    def _entry(self, epoch: int, voters: VoterSet | None) -> Entry:
        self.serial += 1
        return Entry(epoch, self.serial, voters)

    def _new_directory(self) -> DirectoryId:
        self.disks += 1
        return DirectoryId(self.disks)


def _two_changes(
    current: VoterSet,
    renewed: list[tuple[ReplicaKey, ReplicaKey]],
    ready: list[ReplicaKey],
) -> VoterSet | None:
    """A change of two voters at once, which membership rule 2 refuses: a replaced disk's
    old key out and its new, caught-up key in, two observers in, or two voters out."""
    for ghost, new in renewed:
        return VoterSet((current.voters - {ghost}) | {new})
    if len(ready) >= 2:
        return current.add(ready[0]).add(ready[1])
    voters = list(current)
    if len(voters) >= 3:
        return current.remove(voters[0]).remove(voters[-1])
    return None


def _voters_in_log(log: list[Entry], first: VoterSet) -> _Keys:
    """The last voter set a log holds (the partition's first when it holds none), read
    from the log itself rather than from its `VoterSetHistory`."""
    for entry in reversed(log):
        if entry.voters is not None:
            return _Keys(entry.voters.voters)
    return _Keys(first.voters)


class _Keys(frozenset[ReplicaKey]):
    def __str__(self) -> str:
        return _names(self)


def _names(keys: Iterable[ReplicaKey]) -> str:
    return "{" + ", ".join(str(key) for key in sorted(keys)) + "}"


def _up_to_date(candidate: list[Entry], voter: list[Entry]) -> bool:
    """Raft's §5.4.1: the candidate's (last epoch, log end) is at least the voter's."""
    return (_last_epoch(candidate), len(candidate)) >= (_last_epoch(voter), len(voter))


def _last_epoch(log: list[Entry]) -> int:
    return log[-1].epoch if log else 0


def random_walk(seed: int, steps: int = 300) -> MembershipModel:
    """A seeded run of the model, checked after every step; raises `Violation` (with the
    seed and step in its message) on the first broken invariant."""
    rng = random.Random(seed)
    model = MembershipModel(
        voter_count=rng.choice(VOTER_COUNTS), hwm_durable=rng.random() < HWM_DURABLE_SHARE
    )
    actions = _walk_steps(model, rng)
    names = sorted(actions)
    weights = [STEP_WEIGHTS[name] * rng.choice(SWARM_FACTORS) for name in names]
    for step in range(steps):
        name = rng.choices(names, weights)[0]
        try:
            actions[name]()
            model.check()
        except Violation as broken:
            caught = Violation(f"seed {seed} step {step}: {broken}")
            caught.trace = (*model.trace, f"step {step} ({name}): {broken}")
            raise caught from None
    return model


def _walk_steps(model: MembershipModel, rng: random.Random) -> dict[str, Callable[[], None]]:
    """The steps of a walk by name (STEP_WEIGHTS), each drawing its arguments from `rng`."""
    ids = list(range(1, NODES + 1))
    reach_share, fetch_share = rng.choice(REACH), rng.choice(FETCH_SHARE)
    sync_share = rng.choice(FETCH_SYNC_SHARE)

    def a_leader() -> int:
        return rng.choice(model.leaders_up() or ids)

    def a_campaign() -> None:
        node = rng.choice(model.candidates_up() or ids)
        reach = [n for n in ids if rng.random() < reach_share]
        # Mostly when it hears no leader (an election timeout); sometimes beside one.
        heard = any(model.connected(node, leader) for leader in model.leaders_up())
        if not heard or rng.random() < CAMPAIGN_BESIDE_A_LEADER:
            model.campaign(node, reach)

    def a_fetch_round() -> None:
        leader = a_leader()
        for node in ids:  # each node fetches or not, in a fixed order: the seed decides
            if rng.random() < fetch_share:
                count, sync = rng.randint(0, 4), rng.random() < sync_share
                model.replicate(node, leader, count, sync=sync)

    def a_partition() -> None:
        # Jepsen's nemeses: one or two nodes cut off, often a leader among them.
        cut = rng.sample(ids, rng.choice((1, 2)))
        if rng.random() < 0.5:
            cut[0] = a_leader()
        model.partition(cut)

    def a_new_disk() -> None:
        node = rng.choice(ids)  # stopped, its disk replaced, started again
        if model.may_lose(node):
            model.crash(node)
            model.restart_on_empty_disk(node)

    def a_restart() -> None:
        node = rng.choice([n for n in ids if not model.nodes[NodeId(n)].up] or ids)
        model.restart(node, empty_disk=rng.random() < EMPTY_DISK_SHARE and model.may_lose(node))

    return {
        "campaign": a_campaign,
        "append": lambda: model.append(a_leader(), rng.randint(1, 3)),
        "replicate": a_fetch_round,
        "sync": lambda: model.sync(a_leader() if rng.random() < 0.5 else rng.choice(ids)),
        "advance": lambda: model.advance(a_leader()),
        "propose": lambda: model.propose(a_leader(), rng.choice(CHANGES), rng.randrange(8)),
        "crash": lambda: model.crash(a_leader() if rng.random() < 0.5 else rng.choice(ids)),
        "restart": a_restart,
        "partition": a_partition,
        "new_disk": a_new_disk,
        "heal": model.heal,
    }
