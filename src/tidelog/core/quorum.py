"""Quorum arithmetic, as etcd-io/raft's quorum/: pure functions of counts and offsets.

Rules of this file:
- A majority of n voters is n // 2 + 1; any two majorities share a voter (Raft §5.2).
- An offset is committed when `quorum_size` replicas hold it durably: a majority, or
  min.insync.replicas when that is larger (Kafka's acks=all with min.insync.replicas).
- An election is won by a majority of grants and lost by a majority of refusals; until
  one of them, it is pending.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence

from tidelog.types import NodeId, Offset


def majority(voters: int) -> int:
    """The smallest number of voters that overlaps every other such number."""
    return voters // 2 + 1


def quorum_size(voters: int, min_insync: int | None) -> int:
    """How many durable copies commit an offset."""
    return max(majority(voters), min_insync or majority(voters))


def committed_offset(matches: Sequence[Offset], quorum: int) -> Offset | None:
    """The largest offset that `quorum` of these durable log ends reach; None when fewer
    than `quorum` are known."""
    if len(matches) < quorum:
        return None
    return sorted(matches, reverse=True)[quorum - 1]


class VoteResult(enum.Enum):
    WON = "won"
    LOST = "lost"
    PENDING = "pending"


def vote_result(votes: Mapping[NodeId, bool], voters: int) -> VoteResult:
    """Where an election stands, given the answers so far (a candidate's own vote among
    them)."""
    granted = sum(1 for vote in votes.values() if vote)
    if granted >= majority(voters):
        return VoteResult.WON
    if len(votes) - granted >= majority(voters):
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(heard_from: Iterable[bool], voters: int) -> bool:
    """Whether the leader and the followers heard from (True) make a majority."""
    return 1 + sum(1 for heard in heard_from if heard) >= majority(voters)
