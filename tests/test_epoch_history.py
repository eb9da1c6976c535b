"""The one leader-epoch history (core/epochs.py) the replica's log, the in-memory storage
and the disk log all keep: how it follows appends, truncations, start moves and resets,
and the questions the replica asks of it."""

from __future__ import annotations

from tidelog.core.epochs import EpochEntry, EpochHistory
from tidelog.records import read_header
from tidelog.types import NO_EPOCH, Epoch, Offset
from tidelog.wal.batches import build_batches

E1, E2, E3 = Epoch(1), Epoch(2), Epoch(3)


def history_of(sizes: list[int], epochs: list[Epoch]) -> EpochHistory:
    """The history of a log of batches of `sizes[i]` records in epoch `epochs[i]`."""
    history = EpochHistory()
    for batch in build_batches(sizes, epochs=epochs):
        history.extend(read_header(batch))
    return history


def test_a_larger_epoch_begins_at_its_first_batch_and_the_same_epoch_changes_nothing() -> None:
    history = history_of([2, 2, 3, 1], [E1, E1, E2, E3])
    assert history.entries == (
        EpochEntry(E1, Offset(0)),
        EpochEntry(E2, Offset(4)),
        EpochEntry(E3, Offset(7)),
    )
    assert history.last_epoch == E3
    same = read_header(build_batches([1], base_offset=8, epochs=[E3])[0])
    assert not history.extend(same)
    assert len(history) == 3


def test_an_epoch_at_or_below_an_entry_s_start_replaces_it() -> None:
    """Kafka's assign: a batch of a larger epoch whose base is at or below an entry's start
    (a log truncated without its history) replaces those entries."""
    history = EpochHistory([EpochEntry(E1, Offset(0)), EpochEntry(E2, Offset(4))])
    assert history.extend(read_header(build_batches([2], base_offset=4, epochs=[E3])[0]))
    assert history.entries == (EpochEntry(E1, Offset(0)), EpochEntry(E3, Offset(4)))


def test_questions_the_replica_asks() -> None:
    history = history_of([2, 2, 3, 1], [E1, E1, E2, E3])
    end = Offset(8)
    assert [history.epoch_at(Offset(o)) for o in (0, 3, 4, 6, 7)] == [E1, E1, E2, E2, E3]
    assert history.epoch_at(Offset(-1)) == NO_EPOCH
    assert history.end_offset_for_epoch(E1, log_end_offset=end) == (E1, Offset(4))
    assert history.end_offset_for_epoch(E3, log_end_offset=end) == (E3, end)
    assert history.end_offset_for_epoch(Epoch(9), log_end_offset=end) == (E3, end)
    assert history.end_offset_for_epoch(Epoch(0), log_end_offset=end) == (NO_EPOCH, Offset(0))
    assert EpochHistory().end_offset_for_epoch(E1, log_end_offset=end) == (NO_EPOCH, end)
    assert history.epoch_start_offset(E2) == Offset(4)
    assert history.epoch_start_offset(Epoch(9)) is None


def test_a_truncation_removes_the_epochs_that_begin_at_or_above_it() -> None:
    history = history_of([2, 2, 3, 1], [E1, E1, E2, E3])
    assert history.truncate(Offset(7))
    assert history.entries == (EpochEntry(E1, Offset(0)), EpochEntry(E2, Offset(4)))
    assert not history.truncate(Offset(6))
    assert history.truncate(Offset(4))
    assert history.last_epoch == E1


def test_a_trim_keeps_the_epoch_of_the_record_before_the_first_batch() -> None:
    """Raft's "last included term": an emptied or trimmed log still knows the epoch of its
    last record below the first batch it holds."""
    history = history_of([2, 2, 3, 1], [E1, E1, E2, E3])
    assert history.trim(Offset(7))
    assert history.entries == (EpochEntry(E2, Offset(6)), EpochEntry(E3, Offset(7)))
    assert history.epoch_at(Offset(6)) == E2
    assert not history.trim(Offset(7))
    assert not history.trim(Offset(0))


def test_a_reset_keeps_only_the_epoch_of_the_record_before_the_new_start() -> None:
    history = history_of([2, 2], [E1, E2])
    history.reset(Offset(10), E3)
    assert history.entries == (EpochEntry(E3, Offset(9)),)
    history.reset(Offset(0), E3)
    assert history.entries == ()
    history.reset(Offset(10), NO_EPOCH)
    assert history.entries == ()


def test_a_copy_is_independent() -> None:
    history = history_of([2, 2], [E1, E2])
    copy = history.copy()
    assert copy == history
    copy.truncate(Offset(2))
    assert copy != history
    assert history.last_epoch == E2
