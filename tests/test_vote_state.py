"""The vote written in place (wal/vote_state.py): two slots, the latest valid one read, a
torn write costing only the vote it wrote, the checkpoint format of before read."""

from __future__ import annotations

import random

import pytest

from tidelog.core.messages import HardState
from tidelog.errors import StorageError
from tidelog.types import Epoch, NodeId
from tidelog.wal import FaultyFileSystem
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.vote_state import SLOT_BYTES, VoteState

DIRECTORY = "/data/topic-0"


def fresh() -> tuple[FaultyFileSystem, VoteState]:
    fs = FaultyFileSystem(random.Random(0))
    fs.makedirs(DIRECTORY)
    return fs, VoteState(fs, DIRECTORY)


def vote(epoch: int, voted: int | None) -> HardState:
    return HardState(Epoch(epoch), None if voted is None else NodeId(voted))


def test_votes_are_written_in_place_after_the_first_and_read_back() -> None:
    fs, votes = fresh()
    assert votes.read() == vote(0, None)
    votes.write(vote(1, 1))
    calls = fs.calls
    for epoch in range(2, 6):
        votes.write(vote(epoch, 2))
    assert fs.calls - calls == 2 * 4  # a pwrite and an fdatasync each: no rename
    fs.crash()
    assert VoteState(fs, DIRECTORY).read() == vote(5, 2)


def test_a_torn_slot_leaves_the_vote_before_it() -> None:
    fs, votes = fresh()
    votes.write(vote(3, 1))
    votes.write(vote(4, None))
    votes.stage(vote(5, 2))  # not synced: lost by a crash, or torn
    fs.pwrite(votes.path, (votes.seq % 2) * SLOT_BYTES + 4, b"#")
    assert VoteState(fs, DIRECTORY).read() == vote(4, None)
    fs.crash()
    assert VoteState(fs, DIRECTORY).read() == vote(4, None)


def test_a_file_with_no_valid_slot_is_malformed() -> None:
    fs, votes = fresh()
    votes.write(vote(3, 1))
    fs.pwrite(votes.path, 0, b"x" * (2 * SLOT_BYTES))
    with pytest.raises(StorageError, match="no valid vote"):
        VoteState(fs, DIRECTORY).read()


def test_the_checkpoint_format_is_read_and_replaced() -> None:
    fs, _ = fresh()
    ckpt.write_checkpoints(fs, DIRECTORY, {ckpt.VOTE_STATE: [[7, 3]]})
    votes = VoteState(fs, DIRECTORY)
    assert votes.read() == vote(7, 3)
    votes.write(vote(8, None))
    fs.crash()
    again = VoteState(fs, DIRECTORY)
    assert again.read() == vote(8, None) and again.in_place
