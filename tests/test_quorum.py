"""Table tests of the quorum arithmetic (core/quorum.py), as etcd-io/raft's quorum/."""

from __future__ import annotations

import pytest

from tidelog.core.quorum import (
    VoteResult,
    committed_offset,
    has_quorum,
    majority,
    quorum_size,
    vote_result,
)
from tidelog.types import NodeId, Offset


@pytest.mark.parametrize(
    ("voters", "expected"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)]
)
def test_majority(voters: int, expected: int) -> None:
    assert majority(voters) == expected


@pytest.mark.parametrize(
    ("voters", "min_insync", "expected"),
    [(3, None, 2), (3, 1, 2), (3, 2, 2), (3, 3, 3), (5, None, 3), (5, 4, 4), (1, None, 1)],
)
def test_quorum_size_is_a_majority_or_min_insync_when_larger(
    voters: int, min_insync: int | None, expected: int
) -> None:
    assert quorum_size(voters, min_insync) == expected


@pytest.mark.parametrize(
    ("matches", "quorum", "expected"),
    [
        ([5], 1, 5),
        ([5, 3, 9], 2, 5),
        ([5, 3, 9], 3, 3),
        ([5, 3], 3, None),  # not enough known
        ([7, 7, 2, 1, 9], 3, 7),
        ([0, 0, 0], 2, 0),
        ([], 1, None),
    ],
)
def test_committed_offset_is_what_a_quorum_reaches(
    matches: list[int], quorum: int, expected: int | None
) -> None:
    assert committed_offset([Offset(m) for m in matches], quorum) == expected


@pytest.mark.parametrize(
    ("votes", "voters", "expected"),
    [
        ({1: True}, 1, VoteResult.WON),
        ({1: True}, 3, VoteResult.PENDING),
        ({1: True, 2: True}, 3, VoteResult.WON),
        ({1: True, 2: False}, 3, VoteResult.PENDING),
        ({1: True, 2: False, 3: False}, 3, VoteResult.LOST),
        ({1: True, 2: False, 3: True}, 3, VoteResult.WON),
        ({1: True, 2: True}, 4, VoteResult.PENDING),
        ({1: True, 2: False, 3: False}, 4, VoteResult.PENDING),
        ({1: True, 2: True, 3: True}, 5, VoteResult.WON),
        ({1: False, 2: False, 3: False}, 5, VoteResult.LOST),
        ({}, 3, VoteResult.PENDING),
    ],
)
def test_vote_result(votes: dict[int, bool], voters: int, expected: VoteResult) -> None:
    assert vote_result({NodeId(n): v for n, v in votes.items()}, voters) is expected


@pytest.mark.parametrize(
    ("heard", "voters", "expected"),
    [([], 1, True), ([False, False], 3, False), ([True, False], 3, True), ([True], 4, False)],
)
def test_has_quorum_counts_the_leader(heard: list[bool], voters: int, expected: bool) -> None:
    assert has_quorum(heard, voters) is expected
