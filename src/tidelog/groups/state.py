"""A consumer group's states and the one table of moves between them (Kafka's
GroupMetadata, with its valid previous states).

Rules of this file:
- A group moves only by `next_state(state, event)`: a pair the table does not hold is
  refused with IllegalTransition, and the group stays where it was.
- Empty -> PreparingRebalance when a member joins; PreparingRebalance -> CompletingRebalance
  when every member has joined (a new generation), or -> Empty when none is left;
  CompletingRebalance -> Stable when the leader's assignment is stored; any live state ->
  PreparingRebalance when a member joins, leaves or times out; an Empty group whose
  offsets all expired -> Dead, and back to Empty if its tombstone could not be written.
- A group read back from `__consumer_offsets` (a new coordinator) starts Stable with
  members, Empty without (`loaded_state`): that is a restore, not a move.
"""

from __future__ import annotations

import enum

from tidelog.errors import TidelogError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(enum.Enum):
    REBALANCE = "rebalance"  # a member joins, leaves, times out, or a write failed
    ALL_JOINED = "all joined"  # the join phase ends with members: a new generation
    NONE_LEFT = "none left"  # the join phase ends with no member
    SYNCED = "synced"  # the leader's assignment is stored
    EXPIRED = "expired"  # an empty group's offsets all expired: its tombstone goes out
    DELETE_FAILED = "delete failed"  # the tombstone could not be written


class IllegalTransition(TidelogError):
    """A group was asked to move where the table has no arrow."""

    def __init__(self, state: GroupState, event: GroupEvent) -> None:
        super().__init__(f"no move from {state.value} on {event.value!r}")
        self.state = state
        self.event = event


_LIVE = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
TRANSITIONS: dict[tuple[GroupState, GroupEvent], GroupState] = {
    **{(state, GroupEvent.REBALANCE): GroupState.PREPARING_REBALANCE for state in _LIVE},
    (GroupState.STABLE, GroupEvent.REBALANCE): GroupState.PREPARING_REBALANCE,
    (GroupState.PREPARING_REBALANCE, GroupEvent.ALL_JOINED): GroupState.COMPLETING_REBALANCE,
    (GroupState.PREPARING_REBALANCE, GroupEvent.NONE_LEFT): GroupState.EMPTY,
    (GroupState.COMPLETING_REBALANCE, GroupEvent.SYNCED): GroupState.STABLE,
    (GroupState.EMPTY, GroupEvent.EXPIRED): GroupState.DEAD,
    (GroupState.DEAD, GroupEvent.DELETE_FAILED): GroupState.EMPTY,
}


def next_state(state: GroupState, event: GroupEvent) -> GroupState:
    """Where `event` moves a group in `state`; IllegalTransition when nowhere."""
    moved = TRANSITIONS.get((state, event))
    if moved is None:
        raise IllegalTransition(state, event)
    return moved


def loaded_state(has_members: bool) -> GroupState:
    """The state of a group read back from its log."""
    return GroupState.STABLE if has_members else GroupState.EMPTY
