"""The leader-epoch history of one log: which epoch each record was written in.

One type serves everyone who keeps one: the replica's log (core/log.py), the in-memory
storage (core/storage.py) and the disk log's cache of it (wal/epoch_cache.py), as Kafka's
LeaderEpochFileCache serves its log and its replica alike.

Rules of this file:
- The history is a list of (epoch, start offset), both strictly rising. A batch of a larger
  epoch than the last adds (epoch, its base offset), replacing entries at or after that
  base (Kafka's `assign`); a batch of the last epoch changes nothing.
- A truncation removes the entries at or above its offset: divergence is found by epochs,
  never by the HWM (KIP-101).
- The history reaches one record below the first batch the log holds: a log emptied by
  DeleteRecords, retention or a reset still knows the epoch of its last record (Raft's
  snapshot "last included term"), for votes and for consistency checks.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from tidelog.records import BatchHeader
from tidelog.types import NO_EPOCH, Epoch, Offset


class EpochEntry(NamedTuple):
    """One line of the leader-epoch history: `epoch` begins at `start_offset`."""

    epoch: Epoch
    start_offset: Offset


class EpochHistory:
    """A leader-epoch history that follows its log's appends, truncations and start moves."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = list(entries)

    def copy(self) -> EpochHistory:
        return EpochHistory(self._entries)

    # --- questions ------------------------------------------------------------------
    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[EpochEntry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochHistory) and self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"EpochHistory({self._entries!r})"

    @property
    def last_epoch(self) -> Epoch:
        """The epoch of the last record (NO_EPOCH for a log that never held one)."""
        return self._entries[-1].epoch if self._entries else NO_EPOCH

    def epoch_at(self, offset: Offset) -> Epoch:
        """The epoch of the record at `offset` (NO_EPOCH below the history)."""
        index = bisect.bisect_right(self._entries, offset, key=lambda entry: entry.start_offset)
        return self._entries[index - 1].epoch if index > 0 else NO_EPOCH

    def end_offset_for_epoch(self, epoch: Epoch, *, log_end_offset: Offset) -> tuple[Epoch, Offset]:
        """(largest epoch <= `epoch`, the offset where it ends in a log ending at
        `log_end_offset`): Kafka's OffsetsForLeaderEpoch answer. Before the first epoch:
        (NO_EPOCH, the first offset the history knows)."""
        entries = self._entries
        index = bisect.bisect_right(entries, epoch, key=lambda entry: entry.epoch)
        if index == 0:
            first = entries[0].start_offset if entries else log_end_offset
            return NO_EPOCH, Offset(first)
        if index == len(entries):
            return entries[-1].epoch, log_end_offset
        return entries[index - 1].epoch, entries[index].start_offset

    def epoch_start_offset(self, epoch: Epoch) -> Offset | None:
        """Where `epoch` begins, None when no record of it is held."""
        for entry in reversed(self._entries):
            if entry.epoch == epoch:
                return entry.start_offset
        return None

    def below(self, limit: Offset) -> list[EpochEntry]:
        """The entries that begin below `limit`."""
        return [entry for entry in self._entries if entry.start_offset < limit]

    # --- changes ----------------------------------------------------------------------
    def extend(self, header: BatchHeader) -> bool:
        """A batch was appended: a larger epoch begins at its base (Kafka's
        LeaderEpochFileCache.assign, which replaces entries at or after it). True if changed."""
        entries = self._entries
        if entries and header.epoch <= entries[-1].epoch:
            return False
        while entries and entries[-1].start_offset >= header.base_offset:
            entries.pop()
        entries.append(EpochEntry(header.epoch, header.base_offset))
        return True

    def truncate(self, offset: Offset) -> bool:
        """The log lost everything at or above `offset`: so do the epochs. True if changed."""
        entries = self._entries
        changed = False
        while entries and entries[-1].start_offset >= offset:
            entries.pop()
            changed = True
        return changed

    def trim(self, first_offset: Offset) -> bool:
        """Kafka's truncateFromStart, one record further back: keep the history of the
        records from `first_offset - 1` on, where `first_offset` is the first offset the log
        still holds (the base of its first batch). The entry covering first_offset - 1
        stays, its start raised to that offset. True if changed."""
        if first_offset <= 0:
            return False
        entries = self._entries
        before = Offset(first_offset - 1)
        index = bisect.bisect_right(entries, before, key=lambda e: e.start_offset)
        if index == 0:
            return False
        covering = entries[index - 1]
        trimmed = [EpochEntry(covering.epoch, Offset(max(covering.start_offset, before)))]
        trimmed += entries[index:]
        changed = trimmed != entries
        self._entries = trimmed
        return changed

    def reset(self, start_offset: Offset, prev_epoch: Epoch) -> None:
        """The log was emptied at `start_offset`; its last record was of `prev_epoch`."""
        if start_offset <= 0 or prev_epoch == NO_EPOCH:
            self._entries = []
            return
        self._entries = [EpochEntry(prev_epoch, Offset(start_offset - 1))]

    def replace(self, entries: Iterable[EpochEntry]) -> None:
        """Take `entries` as the history (one read from a checkpoint)."""
        self._entries = list(entries)
