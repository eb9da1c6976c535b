"""Quorum mode's replica sets changing under the simulator's faults (`sim --moves`).

Rules of this file:
- A simulated controller moves the partition as KIP-455's reassignments do: now and then
  it draws a new target, any set of the cluster's nodes at least min.insync.replicas large
  (a move, a cancel that goes back, a replication factor that grows or shrinks). Every
  node stays a member: a node outside the target is a learner, replicated to and never
  counted (core/mode/quorum.py's `_next_voters` adds each caught-up target copy, then
  removes the voters outside the target). A share of the seeds throttles what leaders
  send to the copies that do not vote (core/replicate.py).
- Each node learns a new target on its own time (a metadata log applied at each node's
  pace): the changes reach it in their order, each after a delay of its own (a later
  one overtaking an earlier one), and a node that is down takes the last one that
  reached it when it starts again. A leader that has not learned it yet moves toward
  the one it knows.
- In the liveness phase the target stays: a run converges only once the leader's voter
  set is the target, on the copies its nodes hold now, and that change is committed.
- KRaft's membership invariants (KAFKA-16580) hold at every step, on every live log
  (`MembershipMonitor`): at most one voter set above the committed end, and each set a
  log holds differs from the one before it by one voter (or names directories only).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from functools import partial

from tidelog.core.membership import ReplicaKey, VoterSet
from tidelog.core.replica import Replica, Role
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster
from tidelog.types import NO_DIRECTORY, NodeId

THROTTLES = (None, None, 200_000, 2_000_000)  # bytes a second (the simulator's tick is 1 ms)
CHANGE_RATE = 1 / 400  # a new target per 400 microticks of the safety phase, on average
DELIVERY_DELAY_MAX = 3_000  # microticks before a node learns a new target


class Moves:
    """The controller of `sim --moves`: targets drawn from `rng`, learned by each node
    after a delay of its own."""

    def __init__(self, cluster: Cluster, rng: random.Random, *, min_size: int) -> None:
        self.cluster = cluster
        self.rng = rng
        self.min_size = min_size
        self.members = cluster.ids
        self.target = cluster.ids
        # (when, node, change number, target): each node takes the changes in their order,
        # a later one overtaking an earlier one (a node that started again knows the last).
        self.due: list[tuple[int, NodeId, int, tuple[NodeId, ...]]] = []
        self.changes = 0
        self.taken = dict.fromkeys(cluster.ids, 0)
        # A replication throttle for the copies that do not vote, or none (per seed).
        self.throttle = rng.choice(THROTTLES)
        if self.throttle is not None:
            cluster.note(f"moves: throttle {self.throttle} bytes/s")
            for node, sim_node in cluster.nodes.items():
                sim_node.config = dataclasses.replace(
                    sim_node.config, throttle_bytes_per_s=self.throttle
                )
                cluster.input(node, partial(self.set_throttle, rate=self.throttle))

    def step(self, *, safety: bool) -> None:
        cluster = self.cluster
        if safety and self.rng.random() < CHANGE_RATE:
            self.change()
        due = [entry for entry in self.due if entry[0] <= cluster.now]
        self.due = [entry for entry in self.due if entry[0] > cluster.now]
        for _, node, number, target in due:
            if number > self.taken[node]:  # what it starts with, and takes if up
                self.taken[node] = number
                sim_node = cluster.nodes[node]
                sim_node.config = dataclasses.replace(
                    sim_node.config, members=self.members, target=target
                )
                cluster.input(node, partial(self.take, target=target))

    def change(self) -> None:
        cluster = self.cluster
        size = self.rng.randint(self.min_size, len(cluster.ids))
        target = tuple(sorted(self.rng.sample(cluster.ids, size)))
        self.target = target
        self.changes += 1
        cluster.note(f"move: target {list(target)}")
        for node in cluster.ids:
            delay = self.rng.randint(0, DELIVERY_DELAY_MAX)
            self.due.append((cluster.now + delay, node, self.changes, target))

    @staticmethod
    def set_throttle(replica: Replica, rate: int) -> None:
        refusal = replica.set_throttle(rate)
        assert refusal is None, refusal

    def take(self, replica: Replica, target: tuple[NodeId, ...]) -> None:
        refusal = replica.set_members(self.members, target)
        assert refusal is None, refusal

    def settled(self, replicas: dict[NodeId, Replica]) -> str | None:
        """Why the leader's voter set is not yet the target on the copies its nodes hold
        now, committed; None once it is."""
        leader = max((r for r in replicas.values() if r.role is Role.LEADER), key=lambda r: r.epoch)
        wanted = {
            ReplicaKey(node, replicas[node].key.directory)
            for node in self.target
            if node in replicas
        }
        if set(leader.voters) != wanted:
            return f"leader {leader.id}'s voters {sorted(leader.voters)} are not {sorted(wanted)}"
        if leader.log.voters.uncommitted(leader.hwm):
            return f"leader {leader.id}'s last voter change is not committed"
        return None


class MembershipMonitor:
    """KRaft's membership invariants (KAFKA-16580) on every live log, at every step."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def check(self, node: NodeId, replica: Replica) -> None:
        entries = replica.log.voters.entries
        above = [entry for entry in entries if entry.offset >= self.checker.committed_end]
        if len(above) > 1:
            self.checker.fail(
                f"node {node}'s log holds {len(above)} voter sets above the committed end "
                f"{self.checker.committed_end}: {[e.offset for e in above]}"
            )
        for before, after in itertools.pairwise(entries):
            if not one_change(before.voters, after.voters):
                self.checker.fail(
                    f"node {node}'s voter set at {after.offset} ({sorted(after.voters)}) is "
                    f"more than one change from the one at {before.offset} "
                    f"({sorted(before.voters)})"
                )


def one_change(before: VoterSet, after: VoterSet) -> bool:
    """Whether `after` adds or removes one voter of `before`, or only names the directories
    of voters `before` knew by node alone (core/membership.py's rule 3), by its own count."""
    old, new = set(before), set(after)
    if len(old ^ new) == 1:
        return True
    named = {key.node: key.directory for key in new}
    return before.nodes == after.nodes and all(
        key in new or (key.directory == NO_DIRECTORY and named[key.node] != NO_DIRECTORY)
        for key in old
    )
