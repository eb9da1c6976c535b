"""`tidelog cluster rebalance`'s plan (tools/rebalance.py): replicas then leaders spread
evenly, the fewest moves that do it, never two replicas of a partition on one node, the
replication factor kept, drained nodes emptied, and the plan a function of its input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.tools.rebalance import Partition, PlanError, plan


def round_robin(partitions: int, nodes: list[int], factor: int) -> dict[Partition, list[int]]:
    return {
        ("t", p): [nodes[(p + r) % len(nodes)] for r in range(factor)] for p in range(partitions)
    }


def test_a_new_node_takes_its_share_and_the_rest_stays() -> None:
    placement = round_robin(12, [1, 2, 3], 3)  # every node holds every partition
    result = plan(placement, [1, 2, 3, 4])
    assert result.replicas_before == {1: 12, 2: 12, 3: 12, 4: 0}
    assert result.replicas_after == {1: 9, 2: 9, 3: 9, 4: 9}
    moved = sum(len(set(r) - set(placement[k])) for k, r in result.moves.items())
    assert moved == 9  # no replica moves that need not
    assert max(result.leaders_after.values()) - min(result.leaders_after.values()) <= 1
    assert result.reassignment_json()["version"] == 1


def test_a_drained_node_gives_up_everything() -> None:
    placement = round_robin(10, [1, 2, 3, 4], 2)
    result = plan(placement, [1, 2, 3])
    assert 4 not in result.replicas_after
    assert all(4 not in replicas for replicas in result.moves.values())
    assert not any(4 in placement[key] for key in placement if key not in result.moves)
    assert sorted(result.replicas_after.values()) == [6, 7, 7]


def test_bytes_break_the_ties() -> None:
    placement = {("t", 0): [1], ("t", 1): [1], ("t", 2): [1], ("t", 3): [2]}
    sizes = {("t", 0): 10, ("t", 1): 100, ("t", 2): 10, ("t", 3): 0}
    result = plan(placement, [1, 2], sizes)
    assert result.replicas_after == {1: 2, 2: 2}
    assert result.bytes_after == {1: 20, 2: 100}  # the big one went: the closest bytes


def test_a_balanced_placement_needs_no_move() -> None:
    assert plan(round_robin(6, [1, 2, 3], 2), [1, 2, 3]).moves == {}


def test_too_few_nodes_for_the_replication_factor_is_refused() -> None:
    with pytest.raises(PlanError, match="needs 3 nodes"):
        plan(round_robin(3, [1, 2, 3], 3), [1, 2])
    with pytest.raises(PlanError, match="no nodes"):
        plan(round_robin(3, [1, 2, 3], 1), [])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 6),
    st.integers(1, 3),
    st.data(),
)
def test_any_placement_spreads_within_one(
    partitions: int, node_count: int, factor: int, data: st.DataObject
) -> None:
    nodes = list(range(1, node_count + 2))  # one node more than the placement used
    factor = min(factor, node_count)
    old_nodes = nodes[:-1]
    placement = {
        ("t", p): data.draw(st.permutations(old_nodes))[:factor] for p in range(partitions)
    }
    sizes = {key: data.draw(st.integers(0, 10_000)) for key in placement}
    result = plan(placement, nodes, sizes)
    assert result == plan(placement, nodes, sizes)
    final = {key: list(result.moves.get(key, placement[key])) for key in placement}
    for key, replicas in final.items():
        assert len(replicas) == len(set(replicas)) == len(placement[key])
    counts = result.replicas_after
    assert max(counts.values()) - min(counts.values()) <= 1
    assert sum(counts.values()) == partitions * factor


def test_a_drain_moves_only_what_the_node_holds() -> None:
    placement = {("t", 0): [4, 1], ("t", 1): [1, 2], ("t", 2): [2, 4], ("t", 3): [1, 3]}
    result = plan(placement, [1, 2, 3], spread=False)
    assert set(result.moves) == {("t", 0), ("t", 2)}
    assert result.moves[("t", 0)] == (3, 1)  # the emptiest node takes its place
    assert result.moves[("t", 2)][0] == 2 and 4 not in result.moves[("t", 2)]
