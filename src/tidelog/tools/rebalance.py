"""`tidelog cluster rebalance`'s plan: replicas, then leaders, spread evenly over the nodes.

Rules of this file:
- The plan is a pure function of the placement (each partition's replicas, its preferred
  leader first), the partitions' sizes in bytes and the nodes: the same input, the same
  plan. Nothing here talks to a broker.
- Replicas first, by count: while one node holds two replicas more than another, a replica
  moves from the fullest node to the emptiest one that does not hold that partition yet.
  Of the partitions that could move, the one that leaves the two nodes' bytes closest
  together goes. A move never puts two replicas of a partition on one node, and the
  replication factor never changes. Nodes given that hold nothing yet (a new broker) fill
  up; nodes not given (a node being drained) give up all they hold.
- Then leaders, by count: while a partition's preferred leader (its first replica) leads
  at least two partitions more than another of its replicas, that one comes first. Only
  the order of a partition's replicas changes for it: no data moves, and a partition
  whose leader stays keeps its order.
- A partition whose replicas do not change is not in the plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Partition = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to submit (kafka-reassign-partitions' `partitions`), and the counts it leads to."""

    moves: dict[Partition, tuple[int, ...]]  # only the partitions that change
    replicas_before: dict[int, int]
    replicas_after: dict[int, int]
    leaders_before: dict[int, int]
    leaders_after: dict[int, int]
    bytes_before: dict[int, int]
    bytes_after: dict[int, int]

    def reassignment_json(self) -> dict[str, object]:
        """The plan in kafka-reassign-partitions' JSON (version 1)."""
        return {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": partition, "replicas": list(replicas)}
                for (topic, partition), replicas in sorted(self.moves.items())
            ],
        }


class PlanError(ValueError):
    """The placement cannot be spread over the nodes given."""


def plan(
    placement: Mapping[Partition, Sequence[int]],
    nodes: Sequence[int],
    sizes: Mapping[Partition, int] | None = None,
    *,
    spread: bool = True,
) -> Plan:
    """Spread `placement`'s replicas, then its leaders, over `nodes` (see the rules).
    `spread=False`: only move what nodes not given hold (a drain), nothing else."""
    sizes = sizes or {}
    live = sorted(set(nodes))
    if not live:
        raise PlanError("no nodes to spread over")
    factor = max((len(replicas) for replicas in placement.values()), default=0)
    if factor > len(live):
        raise PlanError(f"a replication factor of {factor} needs {factor} nodes; {len(live)} given")
    current = {key: list(replicas) for key, replicas in sorted(placement.items())}
    before = _counts(current, live, sizes)
    _evacuate(current, live, sizes)
    if spread:
        _spread_replicas(current, live, sizes)
        _spread_leaders(current, live)
    after = _counts(current, live, sizes)
    moves = {
        key: tuple(replicas)
        for key, replicas in current.items()
        if tuple(replicas) != tuple(placement[key])
    }
    return Plan(moves, before[0], after[0], before[1], after[1], before[2], after[2])


def _counts(
    current: Mapping[Partition, Sequence[int]], live: Sequence[int], sizes: Mapping[Partition, int]
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Replicas, leaderships and bytes per node (every node named, live ones at least)."""
    replicas: Counter[int] = Counter(dict.fromkeys(live, 0))
    leaders: Counter[int] = Counter(dict.fromkeys(live, 0))
    held: Counter[int] = Counter(dict.fromkeys(live, 0))
    for key, nodes in current.items():
        for node in nodes:
            replicas[node] += 1
            held[node] += sizes.get(key, 0)
        if nodes:
            leaders[nodes[0]] += 1
    return dict(sorted(replicas.items())), dict(sorted(leaders.items())), dict(sorted(held.items()))


def _evacuate(
    current: dict[Partition, list[int]], live: Sequence[int], sizes: Mapping[Partition, int]
) -> None:
    """Every replica on a node not given moves to the live node holding fewest replicas
    (then bytes) that does not hold the partition yet."""
    for replicas in current.values():
        for index, node in enumerate(replicas):
            if node in live:
                continue
            counts, _, held = _counts(current, live, sizes)
            choices = [n for n in live if n not in replicas]
            replicas[index] = min(choices, key=lambda n: (counts[n], held[n], n))


def _spread_replicas(
    current: dict[Partition, list[int]], live: Sequence[int], sizes: Mapping[Partition, int]
) -> None:
    """Move one replica at a time from the fullest node to the emptiest until no two nodes
    differ by more than one replica (each move lowers the spread: it ends)."""
    while True:
        counts, _, held = _counts(current, live, sizes)
        fullest = max(live, key=lambda n: (counts[n], held[n], -n))
        emptiest = min(live, key=lambda n: (counts[n], held[n], n))
        if counts[fullest] - counts[emptiest] <= 1:
            return
        candidates = [
            key
            for key, replicas in current.items()
            if fullest in replicas and emptiest not in replicas
        ]
        if not candidates:  # every partition on the fullest holds the emptiest too
            return
        gap = held[fullest] - held[emptiest]
        chosen = min(candidates, key=lambda key: (abs(gap - 2 * sizes.get(key, 0)), key))
        replicas = current[chosen]
        replicas[replicas.index(fullest)] = emptiest


def _spread_leaders(current: dict[Partition, list[int]], live: Sequence[int]) -> None:
    """Move preferred leaderships, one at a time, from the node leading most to the node
    leading fewest among that partition's replicas, while that narrows the gap by two (each
    move lowers the spread: it ends). A partition whose leader is not moved keeps its
    order."""
    while True:
        leading: Counter[int] = Counter(dict.fromkeys(live, 0))
        for replicas in current.values():
            if replicas:
                leading[replicas[0]] += 1
        best: tuple[int, Partition, int] | None = None
        for key, replicas in current.items():
            if not replicas:
                continue
            first = replicas[0]
            other = min(replicas[1:], key=lambda n: (leading[n], n), default=None)
            if other is None or leading[first] - leading[other] < 2:
                continue
            gain = leading[first] - leading[other]
            if best is None or gain > best[0]:
                best = (gain, key, other)
        if best is None:
            return
        _, key, chosen = best
        replicas = current[key]
        replicas.remove(chosen)
        replicas.insert(0, chosen)
