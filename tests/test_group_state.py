"""The consumer group's transition table (tidelog.groups.state): every pair of state and
event, legal or refused."""

from __future__ import annotations

import pytest

from tidelog.groups.records import group_key, offset_key
from tidelog.groups.state import (
    TRANSITIONS,
    GroupEvent,
    GroupState,
    IllegalTransition,
    loaded_state,
    next_state,
)

S = GroupState
E = GroupEvent
# Kafka's GroupMetadata: each state and the states it may be entered from, as moves.
EXPECTED = {
    (S.EMPTY, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.PREPARING_REBALANCE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.STABLE, E.REBALANCE): S.PREPARING_REBALANCE,
    (S.PREPARING_REBALANCE, E.ALL_JOINED): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.NONE_LEFT): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.SYNCED): S.STABLE,
    (S.EMPTY, E.EXPIRED): S.DEAD,
    (S.DEAD, E.DELETE_FAILED): S.EMPTY,
}


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("event", list(E), ids=lambda e: e.value)
def test_every_pair_moves_as_the_table_says_or_is_refused(
    state: GroupState, event: GroupEvent
) -> None:
    expected = EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"no move from {state.value}"):
            next_state(state, event)
    else:
        assert next_state(state, event) is expected


def test_the_table_is_the_expected_one() -> None:
    assert TRANSITIONS == EXPECTED


def test_nothing_leaves_dead_but_a_failed_delete_and_stable_is_entered_only_by_sync() -> None:
    assert {event for (state, event) in TRANSITIONS if state is S.DEAD} == {E.DELETE_FAILED}
    assert {key for key, to in TRANSITIONS.items() if to is S.STABLE} == {
        (S.COMPLETING_REBALANCE, E.SYNCED)
    }


def test_a_loaded_group_is_stable_with_members_and_empty_without() -> None:
    assert (loaded_state(True), loaded_state(False)) == (S.STABLE, S.EMPTY)


def test_record_keys_are_canonical_json() -> None:
    assert offset_key("g", "t", 3) == b'{"group":"g","partition":3,"topic":"t","type":"offset"}'
    assert group_key("g") == b'{"group":"g","type":"group"}'
