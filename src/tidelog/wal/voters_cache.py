"""The disk log's voter sets and their checkpoint (KIP-853's voter sets, kept as
epoch_cache.py keeps the leader-epoch history).

Rules of this file:
- The voter sets are derived from the VOTERS control batches (`tidelog.core.membership.
  VoterSetRecords`): appends and recovery's scan add them, truncations cut them, log start
  moves trim them to the set in effect below the first batch, a reset leaves the leader's set
  at the offset before the new start (or none).
- Its checkpoint (`voters-checkpoint`, checkpoint.py) lags: it is behind whenever the sets
  differ from what it was last written with, and a sync writes it once the data it tells
  of is durable (`take_rows`). What only unsynced bytes tell never reaches a checkpoint
  written before that sync: a log start move writes the sets of the durable batches,
  trimmed alike (`trim`), so a set that an unsynced VOTERS batch at the new start replaced
  stays in the checkpoint until a sync makes that batch durable (a crash may take it).
- What the checkpoint holds is known from the start (`restore`), so a checkpoint that
  recovery found wrong (a set whose batch a crash took) is written again at the next sync.
- Below the log start the checkpoint is the truth: every log start move and reset writes
  the set in effect there before it moves, and no batch below the start changes it later.
  Recovery takes that set from the checkpoint (`keep_checkpointed_below`), never from
  batches of segments a crash left below the start, and the rest from what it found.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidelog.core.membership import VoterSet, VoterSetEntry, VoterSetRecords
from tidelog.records import BatchHeader
from tidelog.types import Offset
from tidelog.wal import checkpoint as ckpt


class VoterSetCache:
    """The voter sets of one disk log, and what its checkpoint holds."""

    def __init__(self) -> None:
        self.records = VoterSetRecords()
        self._written: tuple[VoterSetEntry, ...] = ()

    @property
    def entries(self) -> tuple[VoterSetEntry, ...]:
        return self.records.entries

    @property
    def dirty(self) -> bool:
        """Whether the checkpoint is behind the voter sets."""
        return self.records.entries != self._written

    def restore(self, entries: Iterable[VoterSetEntry]) -> None:
        """Take `entries`, what the checkpoint holds, as the voter sets (recovery then cuts
        them where it scans from)."""
        self.records = VoterSetRecords(entries)
        self._written = self.records.entries

    def keep_checkpointed_below(self, log_start_offset: Offset) -> None:
        """After recovery: below `log_start_offset` only the last set the checkpoint holds
        there (see the module's rules); from it on, the sets recovery found."""
        carried = [entry for entry in self._written if entry.offset < log_start_offset][-1:]
        found = [entry for entry in self.records.entries if entry.offset >= log_start_offset]
        self.records = VoterSetRecords([*carried, *found])

    def on_batch(self, batch: bytes, header: BatchHeader) -> None:
        """A batch appended at the log end, or found by recovery's scan (only a control
        batch may hold a voter set: no other is read again)."""
        if header.is_control:
            self.records.on_batch(batch, header.base_offset)

    def truncate(self, offset: Offset) -> None:
        self.records.truncate(offset)

    def trim(self, first_offset: Offset, *, synced_end_offset: Offset) -> list[list[int]] | None:
        """The log start moved: the log's first batch is at `first_offset`. Keep the set in
        effect there; the rows the checkpoint must hold before any segment goes (None: it
        holds them already): the sets of batches below the start or durable (a completed
        sync ended at `synced_end_offset`), trimmed alike."""
        limit = max(first_offset, synced_end_offset)
        durable = VoterSetRecords(e for e in self.records.entries if e.offset < limit)
        durable.trim(first_offset)
        self.records.trim(first_offset)
        if durable.entries == self._written:
            return None
        self._written = durable.entries
        return ckpt.voter_rows(self._written)

    def reset(self, start_offset: Offset, voters: VoterSet | None) -> None:
        self.records.reset(start_offset, voters)

    # --- the checkpoint -----------------------------------------------------------------
    def take_rows(self) -> list[list[int]] | None:
        """The checkpoint's rows when it is behind (call once the data is durable)."""
        if not self.dirty:
            return None
        return self.rows()

    def rows(self) -> list[list[int]]:
        """Every voter set as checkpoint rows; the checkpoint is then up to date."""
        self._written = self.records.entries
        return ckpt.voter_rows(self._written)
