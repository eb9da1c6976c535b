"""Recovery at open: the segments a directory holds, checked (Kafka's LogLoader).

`DiskStorage` (log.py) reads the checkpoints, then lets a `LogLoader` open the segments;
it sets aside what the loader found damaged (quarantine.py).

Rules of this file:
- Leftovers of a crash (temp files, indexes without a log) are removed first.
- A segment wholly below the recovery point was synced with its indexes: its files are
  trusted unless they look wrong (then its indexes are rebuilt, every CRC checked); a
  batch that fails there is damage, never a torn tail.
- Every segment from the recovery point on is scanned, every CRC checked, rebuilding its
  indexes and deriving the epoch history, the control batches and the voter sets (the
  bytes of each control batch are read: they are few and small). A corrupt or torn batch
  at or above the checkpointed HWM is the unsynced tail: it is cut, durably, and any later
  segment removed. Below that HWM it is damage (`needs_repair`), and every byte is kept to
  be set aside.
- A segment that does not start where the one before it ends lies beyond a truncation
  that did not finish (dropped), unless committed batches are missing (damage).
- A log that ends below its checkpointed HWM lost committed batches (damage); one that
  ends below its start is a reset or log start move a crash interrupted (no damage).
"""

from __future__ import annotations

import posixpath

from tidelog.errors import CorruptBatch
from tidelog.types import Offset
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.controls import ControlBatches
from tidelog.wal.epoch_cache import LeaderEpochCache
from tidelog.wal.fs import FileSystem
from tidelog.wal.local_log import LocalLog, RepairNeeded
from tidelog.wal.segment import (
    INDEX_SUFFIX,
    OFFSET_DIGITS,
    TIME_INDEX_SUFFIX,
    Segment,
    scan_batches,
)
from tidelog.wal.segments import bases_on_disk, is_segment_name
from tidelog.wal.voters_cache import VoterSetCache


class LogLoader:
    """Opens the segments of `log`'s directory into it, deriving `epochs`, `controls` and
    `voters` (restored from its checkpoint by the caller) from what it scans; damage found
    is left in `log.needs_repair`."""

    def __init__(
        self,
        log: LocalLog,
        epochs: LeaderEpochCache,
        controls: ControlBatches,
        voters: VoterSetCache,
        *,
        hwm_checkpointed: Offset,
        recovery_point: Offset,
    ) -> None:
        self.log = log
        self.fs = log.fs
        self.directory = log.directory
        self.epochs = epochs
        self.controls = controls
        self.voters = voters
        self.hwm_checkpointed = hwm_checkpointed
        self.recovery_point = recovery_point

    def open_segments(self, bases: list[Offset]) -> None:
        """Open the segments at `bases` (at least one), adopting those below the recovery
        point and scanning the rest, until the log ends."""
        now = self.log.clock()
        checkpointed = ckpt.read_epochs(self.fs, self.directory)
        # The control batches are known from the first segment scanned on (the last one at
        # least); a log that ends before it (damage) knows none (`DiskStorage._end_log_at`).
        self.controls.reset(bases[-1])
        scanning = False
        for number, base in enumerate(bases):
            segment = self.log.open_segment(base)
            segment.created_ms = now
            last = number == len(bases) - 1
            if not scanning and not last and bases[number + 1] <= self.recovery_point:
                if not self._adopt(segment, bases[number + 1]):
                    self.epochs.replace(checkpointed)  # cut where the damage begins
                    return
                continue
            if not scanning:
                scanning = True
                self.epochs.replace(e for e in checkpointed if e.start_offset < base)
                self.voters.truncate(base)
                self.controls.reset(base)
            segments = self.log.segments
            if len(segments) and base != segments.log_end_offset:
                self._on_gap(segments.active, base)
                self._drop_files_after(bases[number:])
                return
            if not self._scan(segment, last=last):
                self._drop_files_after(bases[number + 1 :])
                return
        if not scanning:
            self.epochs.replace(checkpointed)

    def check_committed_end(self, log_start_offset: Offset) -> None:
        """A whole log that ends below its checkpointed HWM lost committed batches (a file
        cut short at a batch boundary, a segment gone). A log that ends below its start
        is a reset or log start move a crash interrupted: no damage."""
        log = self.log
        end = log.log_end_offset
        if log.needs_repair is None and log_start_offset <= end < self.hwm_checkpointed:
            reason = f"the log ends below its checkpointed HWM {self.hwm_checkpointed}"
            log.needs_repair = RepairNeeded(log.segments.active.log_path, end, reason)

    def _adopt(self, segment: Segment, end_offset: Offset) -> bool:
        """A segment wholly below the recovery point: trust its files unless they look wrong.
        False when it is damaged (synced, so never a torn tail): the log ends in it."""
        self.log.segments.add(segment)
        if segment.load_indexes(end_offset):
            return True
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch as error:
            self.log.needs_repair = RepairNeeded(segment.log_path, segment.end_offset, str(error))
            return False
        segment.seal()
        self.log.mark_indexes_unsynced(segment)
        return True

    def _scan(self, segment: Segment, *, last: bool) -> bool:
        """Verify a segment at or after the recovery point, deriving the epoch history.
        False when the log ends in it (torn tail cut, or damage to set aside)."""
        self.log.segments.add(segment)
        segment.size_bytes = self.fs.size(segment.log_path)
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch as error:
            return self._on_corrupt_tail(segment, error)
        self._derive_epochs(segment)
        if not last:
            segment.seal()
            self.log.mark_indexes_unsynced(segment)
        return True

    def _on_corrupt_tail(self, segment: Segment, error: CorruptBatch) -> bool:
        """Below the checkpointed HWM: damage. Else cut the tail there, durably."""
        self._derive_epochs(segment)
        offset = segment.end_offset
        if offset < self.hwm_checkpointed:
            self.log.needs_repair = RepairNeeded(segment.log_path, offset, str(error))
            return False
        self.fs.truncate(segment.log_path, segment.size_bytes)
        self.fs.fsync(segment.log_path)
        return False

    def _on_gap(self, previous: Segment, next_base: Offset) -> None:
        """The next segment does not start where `previous` ends: it lies beyond a
        truncation that did not finish (dropped), unless committed data is missing."""
        if previous.end_offset < self.hwm_checkpointed:
            reason = f"the next segment starts at {next_base}: committed batches are missing"
            self.log.needs_repair = RepairNeeded(previous.log_path, previous.end_offset, reason)

    def _derive_epochs(self, segment: Segment) -> None:
        """The epoch history, the control batches and the voter sets of a segment recovery
        scanned (its good prefix, every CRC checked already)."""
        path = segment.log_path
        for position, header in scan_batches(self.fs, path, 0, segment.size_bytes, verify=False):
            self.epochs.derive(header)
            self.controls.on_batch(header)
            if header.is_control:
                batch = self.fs.pread(path, position, header.size_bytes)
                self.voters.on_batch(batch, header)

    def _drop_files_after(self, bases: list[Offset]) -> None:
        """Remove the segments beyond the end of the log found by recovery."""
        if self.log.needs_repair is not None:
            return  # Keep every byte: they are set aside.
        for base in bases:
            self.log.open_segment(base).delete()
        self.fs.fsync_dir(self.directory)


def clean_directory(fs: FileSystem, directory: str) -> list[Offset]:
    """Remove leftovers of a crash (temp files, indexes without a log); the bases of the
    segments present, in order."""
    names = fs.listdir(directory)
    logs = {name[:OFFSET_DIGITS] for name in names if is_segment_name(name)}
    for name in names:
        orphan = name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and (
            name[:OFFSET_DIGITS] not in logs
        )
        if name.endswith(ckpt.TEMP_SUFFIX) or orphan:
            fs.unlink(posixpath.join(directory, name))
    return bases_on_disk(fs, directory)
