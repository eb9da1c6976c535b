"""The disk log's leader-epoch history and its checkpoint (Kafka's LeaderEpochFileCache).

Rules of this file:
- The history is derived from the batches (`tidelog.core.epochs.EpochHistory`): appends
  and recovery's scan extend it, truncations cut it, log start moves trim it.
- Its checkpoint lags: `dirty` says it changed since it was last written, and a sync writes
  it once the data it tells of is durable (`take_rows`). What only unsynced bytes tell
  never reaches a checkpoint written before that sync (`durable_rows`): a crash may take them.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidelog.core.epochs import EpochEntry, EpochHistory
from tidelog.records import BatchHeader
from tidelog.types import Epoch, Offset
from tidelog.wal import checkpoint as ckpt


class LeaderEpochCache:
    """The epoch history of one disk log, and whether its checkpoint is behind it."""

    def __init__(self) -> None:
        self.history = EpochHistory()
        self.dirty = False

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self.history.entries

    @property
    def last_epoch(self) -> Epoch:
        return self.history.last_epoch

    def assign(self, header: BatchHeader) -> None:
        """A batch the core appended at the log end (recovery's scan takes `derive`)."""
        assert header.epoch >= self.history.last_epoch, "epochs never go back in the log"
        if self.history.extend(header):
            self.dirty = True

    def derive(self, header: BatchHeader) -> None:
        """A batch recovery scanned: what the disk holds is not ours to assert."""
        if self.history.extend(header):
            self.dirty = True

    def truncate(self, offset: Offset) -> None:
        if self.history.truncate(offset):
            self.dirty = True

    def trim(self, first_offset: Offset) -> None:
        if self.history.trim(first_offset):
            self.dirty = True

    def replace(self, entries: Iterable[EpochEntry]) -> None:
        """Take `entries` (what the checkpoint holds, or recovery found) as the history."""
        self.history.replace(entries)

    # --- the checkpoint -----------------------------------------------------------------
    def take_rows(self) -> list[list[int]] | None:
        """The checkpoint's rows when it is behind (call once the data is durable)."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.rows()

    def rows(self) -> list[list[int]]:
        """The whole history as checkpoint rows; the checkpoint is then up to date."""
        self.dirty = False
        return ckpt.epoch_rows(list(self.history))

    def durable_rows(self, first: Offset, synced_end_offset: Offset) -> list[list[int]]:
        """The rows a checkpoint may hold now: the entry of the record before `first` (the
        first offset the log holds) and those of batches a completed sync made durable.
        The checkpoint stays dirty when it leaves an entry out."""
        durable = self.history.below(Offset(max(first, synced_end_offset)))
        self.dirty = len(durable) != len(self.history)
        return ckpt.epoch_rows(durable)
