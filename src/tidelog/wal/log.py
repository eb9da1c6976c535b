"""The durable log of one partition: segments, checkpoints, recovery and retention.

`DiskStorage` implements `tidelog.core.storage.LogStorage` on a `FileSystem`.

Rules of this file:
- Group commit: `append` only writes; nothing counts as durable until `sync()` returns.
  A truncation (rare: a leader change) is durable when `truncate_to` returns, together with
  everything written before it, so the durable log is always a prefix of the written one.
  `sync()` issues one fdatasync per segment written since the last sync (one, unless a roll
  happened), fsyncs the directory if a segment was created or removed, then replaces the
  checkpoints that changed. `save_hard_state` is durable when the next `sync()` returns.
- The leader-epoch history is derived from the batches: a batch of a larger epoch adds
  (epoch, base offset); a truncation removes the entries at or above its offset.
- Never below the HWM: truncation below the checkpointed HWM is a bug (assert); retention
  and `advance_log_start` never pass the HWM saved with `save_hwm`.
- The recovery point is the base of a segment below which every batch was synced and every
  index fsync'd. It only moves forward when a sync follows a roll, and moves back durably
  BEFORE a truncation below it, so recovery always scans everything that may be torn.
- A corrupt batch below the checkpointed HWM is never dropped and never served: the log is
  marked `needs_repair` and every read or write raises StorageError naming the segment and
  offset. A corrupt or torn batch at or above it is the unsynced tail: it is cut.
- `flush_interval_ms` (never the default) is the weaker mode: `sync()` skips the data
  fsync until that much time has passed since the last one, so a crash may lose that window.
"""

from __future__ import annotations

import bisect
import contextlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.core.messages import HardState
from tidelog.core.storage import (
    EpochEntry,
    StoredState,
    extend_epochs,
    reset_epochs,
    trim_epochs,
    truncate_epochs,
)
from tidelog.errors import CorruptBatch, OffsetOutOfRange, StorageError
from tidelog.records import HEADER_SIZE, BatchHeader, check_batch, read_header
from tidelog.types import Epoch, Offset
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.fs import FileSystem, OsFileSystem
from tidelog.wal.index import RELATIVE_OFFSET_MAX
from tidelog.wal.kafka_records import DefaultRecordBatch
from tidelog.wal.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    SEGMENT_BYTES_MAX,
    TIME_INDEX_SUFFIX,
    ChunkReader,
    Segment,
    scan_batches,
)

Clock = Callable[[], int]
DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class WalConfig:
    """Limits of one partition's log; the defaults are Kafka's, except as noted."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    retention_bytes: int | None = None
    retention_ms: int | None = 7 * DAY_MS
    # None: every sync() fsyncs (the default). N: sync() fsyncs at most every N ms.
    flush_interval_ms: int | None = None
    # The HWM is only a hint for recovery, so it is checkpointed lazily (Kafka: 5 s).
    hwm_checkpoint_interval_ms: int = 5000

    def __post_init__(self) -> None:
        assert 0 < self.segment_bytes <= SEGMENT_BYTES_MAX
        assert self.segment_ms > 0
        assert self.index_interval_bytes > 0
        assert self.hwm_checkpoint_interval_ms >= 0


@dataclass(frozen=True, slots=True)
class RepairNeeded:
    """Where the committed log is corrupt: the partition must be repaired from a peer."""

    segment_path: str
    offset: Offset
    reason: str

    def __str__(self) -> str:
        return f"corrupt batch at offset {self.offset} in {self.segment_path}: {self.reason}"


class DiskStorage:
    """A LogStorage in a directory of segment files. Opening it recovers the directory."""

    def __init__(
        self,
        directory: str,
        *,
        clock: Clock,
        config: WalConfig | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        self.directory = directory
        self.config = config or WalConfig()
        self._clock = clock
        self._fs: FileSystem = fs if fs is not None else OsFileSystem()
        self.needs_repair: RepairNeeded | None = None
        self._segments: list[Segment] = []
        self._epochs: list[EpochEntry] = []
        self._dirty: list[Segment] = []
        self._unsynced_indexes: list[Segment] = []
        self._dir_dirty = False
        self._epochs_dirty = False
        self._last_sync_ms = clock()
        self._hwm_checkpoint_ms = self._last_sync_ms
        self._hard_state = HardState(epoch=Epoch(0), voted_for=None)
        self._hard_state_saved = self._hard_state
        self._hwm = self._hwm_checkpointed = Offset(0)
        self.log_start_offset = self._recovery_point = Offset(0)
        self._recover()

    # --- LogStorage -----------------------------------------------------------------
    def load(self) -> StoredState:
        return StoredState(
            hard_state=self._hard_state,
            hwm=Offset(min(self._hwm, self.log_end_offset)),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            epochs=tuple(self._epochs),
        )

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """Whole batches from the one holding `start_offset`, each ending at or before
        `end_offset`, up to `max_bytes` but at least one when one qualifies. Each batch's
        CRC-32C is checked; a corrupt one raises StorageError and marks the log for repair."""
        self._check_serving()
        if start_offset < self.log_start_offset:
            raise OffsetOutOfRange(start_offset, self.log_start_offset, self.log_end_offset)
        if start_offset >= self.log_end_offset:
            return []
        index = bisect.bisect_right(self._segments, start_offset, key=lambda s: s.base_offset)
        out: list[bytes] = []
        budget = max_bytes
        position = self._find(self._segments[index - 1], start_offset)[0]
        for segment in self._segments[index - 1 :]:
            done, budget = self._read_segment(segment, position, end_offset, budget, out)
            if done:
                break
            position = 0
        return out

    def read_range(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> memoryview:
        """As `read`, but the batches come as one view of the file's bytes, read with one
        pread and never copied again, all from the segment holding `start_offset` (a
        reader asks again for the next one). Each batch's CRC-32C is checked. Empty when
        no batch ends by `end_offset`."""
        self._check_serving()
        if start_offset < self.log_start_offset:
            raise OffsetOutOfRange(start_offset, self.log_start_offset, self.log_end_offset)
        if start_offset >= min(end_offset, self.log_end_offset):
            return memoryview(b"")
        index = bisect.bisect_right(self._segments, start_offset, key=lambda s: s.base_offset)
        segment = self._segments[index - 1]
        position, first = self._find(segment, start_offset)
        if first.next_offset > end_offset:
            return memoryview(b"")
        length = min(max(max_bytes, first.size_bytes), segment.size_bytes - position)
        data = memoryview(self._fs.pread(segment.log_path, position, length))
        return data[: self._whole_batches(segment, data, end_offset)]

    def _whole_batches(self, segment: Segment, data: memoryview, end_offset: Offset) -> int:
        """The length of the longest run of whole, checked batches at the start of `data`
        that end by `end_offset` (at least the first batch's)."""
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = read_header(data, position)
            if position and (
                header.next_offset > end_offset or position + header.size_bytes > len(data)
            ):
                break
            try:
                check_batch(data, position)
            except CorruptBatch as error:
                raise self._corrupt(segment, header.base_offset, error) from error
            position += header.size_bytes
        return position

    def save_hard_state(self, hard_state: HardState) -> None:
        """Durable when the next `sync()` returns."""
        assert hard_state.epoch >= self._hard_state.epoch
        self._hard_state = hard_state

    def truncate_to(self, *, offset: Offset) -> None:
        """Remove every batch at or above `offset`, a batch boundary at or above the
        checkpointed HWM. Durable on return, with everything written before it."""
        self._check_serving()
        assert offset >= self._hwm_checkpointed, "truncation below the checkpointed HWM"
        assert offset >= self.log_start_offset
        assert offset <= self.log_end_offset
        if offset == self.log_end_offset:
            return
        if offset < self._recovery_point:
            # Recovery must rescan from here before any new batch here can reach the disk.
            self._write_recovery_point(offset)
        index = bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1
        for segment in self._segments[index + 1 :]:
            self._forget(segment)
            segment.delete()
            self._dir_dirty = True
        del self._segments[index + 1 :]
        segment = self._segments[-1]
        position = 0
        if offset > segment.base_offset:
            position, header = self._find(segment, offset)
            assert header.base_offset == offset, "not a batch boundary"
        segment.truncate(position, offset)
        self._mark_dirty(segment)
        if truncate_epochs(self._epochs, offset):
            self._epochs_dirty = True
        self._hwm = Offset(min(self._hwm, offset))
        self._flush(self._clock())

    def append(self, batches: list[bytes]) -> None:
        """Append stamped batches at the log end, each checked (CRC-32C) before it is
        written. Rolls to a new segment at `segment_bytes` or `segment_ms`."""
        self._check_serving()
        pending: list[tuple[bytes, BatchHeader]] = []
        pending_bytes = 0
        end = self.log_end_offset
        for batch in batches:
            header = check_batch(batch)
            assert header.size_bytes == len(batch)
            assert header.base_offset == end, "append leaves a gap"
            self._extend_epochs(header)
            if self._should_roll(header, pending_bytes):
                self._write_active(pending)
                pending, pending_bytes = [], 0
                self._roll()
            pending.append((batch, header))
            pending_bytes += header.size_bytes
            end = header.next_offset
        self._write_active(pending)

    def save_hwm(self, hwm: Offset) -> None:
        """The HWM is checkpointed by `sync()`, at most every hwm_checkpoint_interval_ms."""
        assert hwm >= self._hwm_checkpointed
        self._hwm = hwm

    def sync(self) -> None:
        """Make everything written so far durable: data, then names, then checkpoints."""
        now = self._clock()
        interval = self.config.flush_interval_ms
        if interval is not None and now - self._last_sync_ms < interval:
            self._write_checkpoints(now, hard_state_only=True)
            return
        self._flush(now)

    def _flush(self, now: int) -> None:
        self._last_sync_ms = now
        for segment in self._dirty:
            self._fs.fdatasync(segment.log_path)
        for segment in self._unsynced_indexes:
            segment.sync_indexes()
        if self._dir_dirty:
            self._fs.fsync_dir(self.directory)
        self._dirty.clear()
        self._unsynced_indexes.clear()
        self._dir_dirty = False
        self._write_checkpoints(now, hard_state_only=False)

    # --- beyond LogStorage ----------------------------------------------------------
    @property
    def log_end_offset(self) -> Offset:
        return self._segments[-1].end_offset

    @property
    def hwm(self) -> Offset:
        return self._hwm

    def segment_paths(self) -> list[str]:
        return [segment.log_path for segment in self._segments]

    def close(self) -> None:
        """A clean shutdown: sync everything, checkpoint the HWM, release the files."""
        if self.needs_repair is None:
            self.sync()
            hwm = Offset(min(self._hwm, self.log_end_offset))
            if hwm != self._hwm_checkpointed:
                ckpt.write_checkpoints(self._fs, self.directory, {ckpt.HWM: ckpt.offset_rows(hwm)})
                self._hwm_checkpointed = hwm
        self._fs.close()

    def __enter__(self) -> DiskStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- retention --------------------------------------------------------------------
    def apply_retention(self, now_ms: int) -> int:
        """Delete whole segments beyond retention_bytes or older than retention_ms, oldest
        first, never the active one and never one holding an offset at or above the HWM.
        Durable on return. The number of segments deleted."""
        total = sum(segment.size_bytes for segment in self._segments)
        count = 0
        for segment in self._segments[:-1]:
            retention_bytes, retention_ms = self.config.retention_bytes, self.config.retention_ms
            by_size = retention_bytes is not None and total - segment.size_bytes >= retention_bytes
            by_age = retention_ms is not None and now_ms - segment.max_timestamp > retention_ms
            if segment.end_offset > self._hwm or not (by_size or by_age):
                break
            total -= segment.size_bytes
            count += 1
        if count:
            self._move_log_start(self._segments[count].base_offset)
        return count

    def advance_log_start(self, offset: Offset) -> None:
        """DeleteRecords: make `offset` the log start offset, deleting the segments wholly
        below it. Durable on return. Past the HWM raises OffsetOutOfRange."""
        if offset > self._hwm:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._hwm)
        if offset > self.log_start_offset:
            self._move_log_start(offset)

    def reset(self, *, start_offset: Offset, prev_epoch: Epoch) -> None:
        """Drop the whole log and start it empty at `start_offset`, which becomes the log
        start and the HWM: a follower behind its leader's log start (Kafka's
        truncateFullyAndStartAt). Everything below it is committed and deleted on the
        leader; `prev_epoch` is the epoch of its record at start_offset - 1, which the epoch
        history keeps. The checkpoints move first, so after a crash in between the old
        segments below `start_offset` are hidden and any above it are an ordinary divergent
        tail. Durable on return."""
        self._check_serving()
        self.log_start_offset = start_offset
        self._hwm = self._hwm_checkpointed = start_offset
        self._epochs = reset_epochs(start_offset, prev_epoch)
        self._epochs_dirty = False
        ckpt.write_checkpoints(
            self._fs,
            self.directory,
            {
                ckpt.LOG_START_OFFSET: ckpt.offset_rows(start_offset),
                ckpt.HWM: ckpt.offset_rows(start_offset),
                ckpt.LEADER_EPOCH: ckpt.epoch_rows(self._epochs),
            },
        )
        for segment in self._segments:
            self._forget(segment)
            segment.delete()
        self._segments = [self._new_segment(start_offset)]
        self._fs.fsync_dir(self.directory)
        self._dir_dirty = False
        self._write_recovery_point(start_offset)

    def _move_log_start(self, offset: Offset) -> None:
        """Checkpoint the new log start first, then remove the segments below it: after a
        crash in between, the checkpoint hides what was not removed yet."""
        assert offset <= self._hwm
        self.log_start_offset = offset
        files = {ckpt.LOG_START_OFFSET: ckpt.offset_rows(offset)}
        if self._hwm_checkpointed < offset:
            # The log start never passes the HWM, after a crash too. Checkpoint the log
            # start itself, not the HWM in memory: that may lie beyond what is synced here,
            # and a torn batch below a checkpointed HWM reads as corruption.
            self._hwm_checkpointed = offset
            files[ckpt.HWM] = ckpt.offset_rows(offset)
        ckpt.write_checkpoints(self._fs, self.directory, files)
        while len(self._segments) > 1 and self._segments[0].end_offset <= offset:
            segment = self._segments.pop(0)
            self._forget(segment)
            segment.delete()
        self._fs.fsync_dir(self.directory)
        self._trim_epochs()

    # --- time index -------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> Offset | None:
        """The first offset whose record has a timestamp >= `timestamp`, or None."""
        self._check_serving()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                return self._offset_for_timestamp_in(segment, timestamp)
        return None

    def _offset_for_timestamp_in(self, segment: Segment, timestamp: int) -> Offset | None:
        before = segment.time_index.offset_before(timestamp)
        start = segment.base_offset if before is None else Offset(before + 1)
        reader = ChunkReader(self._fs, segment.log_path, segment.size_bytes)
        for position, header in scan_batches(
            self._fs,
            segment.log_path,
            segment.index.lookup(start),
            segment.size_bytes,
            verify=False,
        ):
            if header.next_offset <= start or header.max_timestamp < timestamp:
                continue
            batch = self._checked(segment, reader, position, header)
            found = first_offset_at(batch, timestamp)
            if found is not None:
                return Offset(max(found, self.log_start_offset))
        return None

    # --- the write path -------------------------------------------------------------
    def _extend_epochs(self, header: BatchHeader) -> None:
        last = self._epochs[-1].epoch if self._epochs else None
        assert last is None or header.epoch >= last, "epochs never go back in the log"
        if extend_epochs(self._epochs, header):
            self._epochs_dirty = True

    def _trim_epochs(self) -> None:
        """Keep the history from the record before the batch holding the log start on
        (`trim_epochs`); from the first segment's base when that batch cannot be read."""
        first = self._segments[0].base_offset
        segment = self._segments[0]
        if segment.base_offset < self.log_start_offset < segment.end_offset:
            with contextlib.suppress(CorruptBatch):
                first = segment.find(self.log_start_offset)[1].base_offset
        trimmed = trim_epochs(self._epochs, first)
        if trimmed != self._epochs:
            self._epochs = trimmed
            self._epochs_dirty = True

    def _should_roll(self, header: BatchHeader, pending_bytes: int) -> bool:
        active = self._segments[-1]
        size = active.size_bytes + pending_bytes
        if size == 0:
            return False
        return (
            size + header.size_bytes > self.config.segment_bytes
            or self._clock() - active.created_ms >= self.config.segment_ms
            or header.last_offset - active.base_offset > RELATIVE_OFFSET_MAX
        )

    def _write_active(self, pending: list[tuple[bytes, BatchHeader]]) -> None:
        if pending:
            active = self._segments[-1]
            active.write(pending)
            self._mark_dirty(active)

    def _roll(self) -> None:
        active = self._segments[-1]
        active.seal()
        add_once(self._unsynced_indexes, active)
        self._segments.append(self._new_segment(active.end_offset))

    def _new_segment(self, base_offset: Offset) -> Segment:
        segment = Segment(
            self._fs,
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
        )
        segment.create_files(self._clock())
        self._dir_dirty = True
        return segment

    def _mark_dirty(self, segment: Segment) -> None:
        add_once(self._dirty, segment)

    def _forget(self, segment: Segment) -> None:
        """A segment about to be deleted needs no more syncing."""
        if segment in self._dirty:
            self._dirty.remove(segment)
        if segment in self._unsynced_indexes:
            self._unsynced_indexes.remove(segment)

    def _write_checkpoints(self, now: int, *, hard_state_only: bool) -> None:
        files: dict[str, list[list[int]]] = {}
        if self._hard_state != self._hard_state_saved:
            files[ckpt.VOTE_STATE] = ckpt.hard_state_rows(self._hard_state)
        if not hard_state_only:
            files.update(self._data_checkpoints(now))
        ckpt.write_checkpoints(self._fs, self.directory, files)
        self._hard_state_saved = self._hard_state

    def _data_checkpoints(self, now: int) -> dict[str, list[list[int]]]:
        """The checkpoints that changed; call only once the data is durable."""
        files: dict[str, list[list[int]]] = {}
        if self._epochs_dirty:
            files[ckpt.LEADER_EPOCH] = ckpt.epoch_rows(self._epochs)
            self._epochs_dirty = False
        hwm = Offset(min(self._hwm, self.log_end_offset))
        interval = self.config.hwm_checkpoint_interval_ms
        if hwm != self._hwm_checkpointed and now - self._hwm_checkpoint_ms >= interval:
            files[ckpt.HWM] = ckpt.offset_rows(hwm)
            self._hwm_checkpointed = hwm
            self._hwm_checkpoint_ms = now
        active_base = self._segments[-1].base_offset
        if active_base > self._recovery_point:
            files[ckpt.RECOVERY_POINT] = ckpt.offset_rows(active_base)
            self._recovery_point = active_base
        return files

    def _write_recovery_point(self, offset: Offset) -> None:
        ckpt.write_checkpoints(
            self._fs, self.directory, {ckpt.RECOVERY_POINT: ckpt.offset_rows(offset)}
        )
        self._recovery_point = offset

    # --- the read path ----------------------------------------------------------------
    def _check_serving(self) -> None:
        if self.needs_repair is not None:
            raise StorageError(f"needs repair: {self.needs_repair}")

    def _find(self, segment: Segment, offset: Offset) -> tuple[int, BatchHeader]:
        try:
            return segment.find(offset)
        except CorruptBatch as error:
            raise self._corrupt(segment, offset, error) from error

    def _read_segment(
        self,
        segment: Segment,
        position: int,
        end_offset: Offset,
        budget: int,
        out: list[bytes],
    ) -> tuple[bool, int]:
        """Add the batches of `segment` from `position` to `out`; (done, budget left)."""
        reader = ChunkReader(self._fs, segment.log_path, segment.size_bytes)
        while position < segment.size_bytes:
            try:
                header = reader.header(position)
            except CorruptBatch as error:
                raise self._corrupt(segment, segment.end_offset, error) from error
            if header.next_offset > end_offset:
                return True, budget
            if out and header.size_bytes > budget:
                return True, budget
            out.append(self._checked(segment, reader, position, header))
            budget -= header.size_bytes
            position += header.size_bytes
            if budget <= 0:
                return True, budget
        return False, budget

    def _checked(
        self, segment: Segment, reader: ChunkReader, position: int, header: BatchHeader
    ) -> bytes:
        """The batch at `position`, its CRC-32C verified (pair assertion of append)."""
        try:
            return reader.batch(position, header)
        except CorruptBatch as error:
            raise self._corrupt(segment, header.base_offset, error) from error

    def _corrupt(self, segment: Segment, offset: Offset, error: CorruptBatch) -> StorageError:
        """Mark the log for repair; the error to raise, naming segment and offset."""
        self.needs_repair = RepairNeeded(segment.log_path, offset, str(error))
        return StorageError(f"needs repair: {self.needs_repair}")

    # --- recovery -------------------------------------------------------------------
    def _recover(self) -> None:
        """Open the directory: checkpoints, segments, then verify everything after the
        recovery point, cutting a torn tail; see the module's rules."""
        self._fs.makedirs(self.directory)
        bases = self._clean_directory()
        self._hard_state = ckpt.read_hard_state(self._fs, self.directory)
        self._hard_state_saved = self._hard_state
        self._hwm_checkpointed = ckpt.read_offset(self._fs, self.directory, ckpt.HWM) or Offset(0)
        self._hwm = self._hwm_checkpointed
        stored_start = ckpt.read_offset(self._fs, self.directory, ckpt.LOG_START_OFFSET)
        self.log_start_offset = stored_start or Offset(0)
        point = ckpt.read_offset(self._fs, self.directory, ckpt.RECOVERY_POINT) or Offset(0)
        self._recovery_point = point
        if not bases:
            self._segments = [self._new_segment(self.log_start_offset)]
            self._fs.fsync_dir(self.directory)
            self._dir_dirty = False
        else:
            self._open_segments(bases)
        self.log_start_offset = Offset(max(self.log_start_offset, self._segments[0].base_offset))
        self._trim_epochs()
        self._hwm_checkpointed = Offset(min(self._hwm_checkpointed, self.log_end_offset))
        self._hwm = self._hwm_checkpointed

    def _clean_directory(self) -> list[Offset]:
        """Remove leftovers of a crash (temp files, indexes without a log); the bases of the
        segments present, in order."""
        names = self._fs.listdir(self.directory)
        bases = sorted(Offset(int(name[:OFFSET_DIGITS])) for name in names if is_segment_name(name))
        logs = {name[:OFFSET_DIGITS] for name in names if is_segment_name(name)}
        for name in names:
            orphan = name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and (
                name[:OFFSET_DIGITS] not in logs
            )
            if name.endswith(ckpt.TEMP_SUFFIX) or orphan:
                self._fs.unlink(posixpath.join(self.directory, name))
        return bases

    def _open_segments(self, bases: list[Offset]) -> None:
        now = self._clock()
        checkpointed = ckpt.read_epochs(self._fs, self.directory)
        scanning = False
        for number, base in enumerate(bases):
            segment = Segment(
                self._fs,
                self.directory,
                base,
                index_interval_bytes=self.config.index_interval_bytes,
            )
            segment.created_ms = now
            last = number == len(bases) - 1
            if not scanning and not last and bases[number + 1] <= self._recovery_point:
                self._adopt(segment, bases[number + 1])
                continue
            if not scanning:
                scanning = True
                self._epochs = [e for e in checkpointed if e.start_offset < base]
            if self._segments and base != self._segments[-1].end_offset:
                self._on_gap(self._segments[-1], base)
                self._drop_files_after(bases[number:])
                return
            if not self._scan(segment, last=last):
                self._drop_files_after(bases[number + 1 :])
                return
        if not scanning:
            self._epochs = checkpointed

    def _adopt(self, segment: Segment, end_offset: Offset) -> None:
        """A segment wholly below the recovery point: trust its files unless they look wrong."""
        self._segments.append(segment)
        if not segment.load_indexes(end_offset):
            try:
                segment.rebuild_indexes(verify=True)
            except CorruptBatch as error:
                self.needs_repair = RepairNeeded(segment.log_path, segment.end_offset, str(error))
            segment.seal()
            add_once(self._unsynced_indexes, segment)

    def _scan(self, segment: Segment, *, last: bool) -> bool:
        """Verify a segment at or after the recovery point, deriving the epoch history.
        False when the log ends in it (torn tail cut, or corruption needing repair)."""
        self._segments.append(segment)
        segment.size_bytes = self._fs.size(segment.log_path)
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch as error:
            return self._on_corrupt_tail(segment, error)
        self._derive_epochs(segment)
        if not last:
            segment.seal()
            add_once(self._unsynced_indexes, segment)
        return True

    def _on_corrupt_tail(self, segment: Segment, error: CorruptBatch) -> bool:
        """Below the checkpointed HWM: needs repair. Else cut the tail there, durably."""
        self._derive_epochs(segment)
        offset = segment.end_offset
        if offset < self._hwm_checkpointed:
            self.needs_repair = RepairNeeded(segment.log_path, offset, str(error))
            return False
        self._fs.truncate(segment.log_path, segment.size_bytes)
        self._fs.fsync(segment.log_path)
        return False

    def _on_gap(self, previous: Segment, next_base: Offset) -> None:
        """The next segment does not start where `previous` ends: it lies beyond a
        truncation that did not finish (dropped), unless committed data is missing."""
        if previous.end_offset < self._hwm_checkpointed:
            reason = f"the next segment starts at {next_base}: committed batches are missing"
            self.needs_repair = RepairNeeded(previous.log_path, previous.end_offset, reason)

    def _derive_epochs(self, segment: Segment) -> None:
        for _, header in scan_batches(
            self._fs, segment.log_path, 0, segment.size_bytes, verify=False
        ):
            if extend_epochs(self._epochs, header):
                self._epochs_dirty = True

    def _drop_files_after(self, bases: list[Offset]) -> None:
        """Remove the segments beyond the end of the log found by recovery."""
        if self.needs_repair is not None:
            return  # Keep every byte for the repair.
        for base in bases:
            Segment(self._fs, self.directory, base, index_interval_bytes=1).delete()
        self._fs.fsync_dir(self.directory)


def add_once(segments: list[Segment], segment: Segment) -> None:
    if segment not in segments:
        segments.append(segment)


def is_segment_name(name: str) -> bool:
    stem = name[: -len(LOG_SUFFIX)]
    return name.endswith(LOG_SUFFIX) and len(stem) == OFFSET_DIGITS and stem.isdigit()


def first_offset_at(batch: bytes, timestamp: int) -> Offset | None:
    """The offset of the first record in `batch` with a timestamp >= `timestamp`."""
    for record in DefaultRecordBatch(batch):
        if record.timestamp >= timestamp:
            return Offset(record.offset)
    return None
