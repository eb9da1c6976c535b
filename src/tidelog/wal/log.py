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
  (epoch, base offset); a truncation removes the entries at or above its offset. Its
  checkpoint lags (a sync writes it once the data is durable; recovery derives it from the
  segments it scans), so a log start move checkpoints it, trimmed to the new start, BEFORE
  deleting any segment: the deleted batches may be all that tells the epoch of the record
  before the log start.
- Never below the HWM: truncation below the checkpointed HWM is a bug (assert); retention
  and `advance_log_start` never pass the HWM saved with `save_hwm`.
- The recovery point is the base of a segment below which every batch was synced and every
  index fsync'd. It only moves forward when a sync follows a roll, and moves back durably
  BEFORE a truncation below it, so recovery always scans everything that may be torn.
- A corrupt batch is never served. One that a read finds marks the log `needs_repair`:
  every read or write raises StorageError naming the segment and offset, until its owner
  calls `quarantine`. Recovery finds damage itself: a corrupt or torn batch below the
  checkpointed HWM (or anywhere below the recovery point, all of it synced), a segment
  missing there, or a log that ends below that HWM. A corrupt or torn batch at or above the
  HWM (after the recovery point) is the unsynced tail: it is cut.
- Damage is set aside, never deleted: the damaged bytes (from the first bad batch on) and
  every later segment move to `quarantine/<cut offset>/` in the partition directory, and
  the log ends before them (a follower then fetches them again from its leader). The
  repair floor (how far the log reached: its end and last epoch as the log knew them, or,
  found at a start, what recovery can prove, the end unknown when the damage hides it) and
  the cut are checkpointed first, then the HWM (at most the new log end) and the epochs:
  after a crash in between, the next start finds the damage again and finishes the repair
  with the floor it recorded. The floor stays until the replica says its log reached it
  again (`clear_repair_floor`).
- After a failed write or fsync (EIO, ENOSPC) nothing written since the last completed
  sync is trusted: `reopen` releases the files without syncing, recovers the directory
  again and cuts the log back to what that sync made durable (PostgreSQL's fsyncgate).
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
from tidelog.core.producers import ProducerEntry
from tidelog.core.storage import (
    EpochEntry,
    RepairFloor,
    StoredState,
    extend_epochs,
    later_floor,
    reset_epochs,
    trim_epochs,
    truncate_epochs,
)
from tidelog.errors import CorruptBatch, OffsetOutOfRange, StorageError, check_range
from tidelog.records import HEADER_SIZE, NO_TIMESTAMP, BatchHeader, check_batch, read_header
from tidelog.types import NO_EPOCH, Epoch, Offset
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.controls import ControlBatches
from tidelog.wal.fs import FileSystem, OsFileSystem
from tidelog.wal.index import RELATIVE_OFFSET_MAX
from tidelog.wal.kafka_records import DefaultRecordBatch
from tidelog.wal.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    SCAN_CHUNK_BYTES,
    SEGMENT_BYTES_MAX,
    TIME_INDEX_SUFFIX,
    ChunkReader,
    Segment,
    scan_batches,
    segment_name,
)

Clock = Callable[[], int]
DAY_MS = 24 * 60 * 60 * 1000
QUARANTINE_DIR = "quarantine"
QUARANTINE_NAMES_MAX = 1000  # quarantine/<cut offset>, -1, -2, ...: one per repair
CONTROL_HEADER_READS_MAX = 8
"""Batch headers `data_end_offset` reads per call below what recovery scanned."""


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
        """ConfigError naming the first setting out of range (tidelog.errors)."""
        check_range("WalConfig.segment_bytes", self.segment_bytes, 1, SEGMENT_BYTES_MAX)
        check_range("WalConfig.segment_ms", self.segment_ms, 1)
        check_range("WalConfig.index_interval_bytes", self.index_interval_bytes, 1)
        if self.retention_bytes is not None:
            check_range("WalConfig.retention_bytes", self.retention_bytes, 0)
        if self.retention_ms is not None:
            check_range("WalConfig.retention_ms", self.retention_ms, 0)
        if self.flush_interval_ms is not None:
            check_range("WalConfig.flush_interval_ms", self.flush_interval_ms, 0)
        check_range("WalConfig.hwm_checkpoint_interval_ms", self.hwm_checkpoint_interval_ms, 0)


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
        # Where the control batches lie (wal/controls.py): recovery feeds what it scans.
        self._controls = ControlBatches(Offset(0))
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
        self._repair_floor: RepairFloor | None = None
        self._repair_floor_dirty = False
        self._repair_cut: Offset | None = None  # where a repair in progress cuts the log
        self._producers: tuple[ProducerEntry, ...] = ()  # the snapshot at the log start
        self.synced_end_offset = Offset(0)  # the log end as of the last completed sync
        try:
            self._recover()
        except BaseException:
            self._fs.close()
            raise

    # --- LogStorage -----------------------------------------------------------------
    def load(self) -> StoredState:
        return StoredState(
            hard_state=self._hard_state,
            hwm=Offset(min(self._hwm, self.log_end_offset)),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            epochs=tuple(self._epochs),
            repair_floor=self._repair_floor,
            producers=self._producers,
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
        length = min(max(max_bytes, first.size_bytes), segment.size_bytes - position)
        data = memoryview(self._fs.pread(segment.log_path, position, length))
        return data[: self._whole_batches(segment, data, end_offset)]

    def _whole_batches(self, segment: Segment, data: memoryview, end_offset: Offset) -> int:
        """The length of the longest run of whole, checked batches at the start of `data`
        that end by `end_offset`. A batch's end is read from a field its CRC covers: the
        batch that ends the run is checked too, when it is whole in `data`."""
        position = 0
        expected: Offset | None = None
        while position + HEADER_SIZE <= len(data) and (expected is None or expected < end_offset):
            header = read_header(data, position)
            if position + header.size_bytes > len(data):
                break
            try:
                check_batch(data, position)
                check_follows(header, expected)
            except CorruptBatch as error:
                raise self._corrupt(segment, header.base_offset, error) from error
            if header.next_offset > end_offset:
                break
            position += header.size_bytes
            expected = header.next_offset
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
        self._controls.truncate(offset)
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
            self._controls.on_batch(header)
            if self._should_roll(header, pending_bytes):
                self._write_active(pending)
                pending, pending_bytes = [], 0
                self._roll()
            pending.append((batch, header))
            pending_bytes += header.size_bytes
            end = header.next_offset
        self._write_active(pending)

    def lower_hwm(self, offset: Offset) -> None:
        """Lower the HWM to `offset`, and its checkpoint at once, durably (ISR mode gives up
        records committed here after an unclean election, then truncates below the old
        HWM: `LogStorage.lower_hwm`)."""
        self._hwm = Offset(min(self._hwm, offset))
        if self._hwm_checkpointed > self._hwm:
            ckpt.write_checkpoints(
                self._fs, self.directory, {ckpt.HWM: ckpt.offset_rows(self._hwm)}
            )
            self._hwm_checkpointed = self._hwm

    def save_hwm(self, hwm: Offset) -> None:
        """The HWM is checkpointed by `sync()`, at most every hwm_checkpoint_interval_ms."""
        assert hwm >= self._hwm_checkpointed
        self._hwm = hwm

    def clear_repair_floor(self) -> None:
        """Forgotten durably by the next sync that makes the data durable."""
        self._repair_floor = None
        self._repair_floor_dirty = True

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
        self.synced_end_offset = self.log_end_offset
        self._write_checkpoints(now, hard_state_only=False)

    # --- beyond LogStorage ----------------------------------------------------------
    @property
    def log_end_offset(self) -> Offset:
        return self._segments[-1].end_offset

    @property
    def hwm(self) -> Offset:
        return self._hwm

    def data_end_offset(self, below: Offset) -> Offset:
        """The offset after the last data record below `below` (the HWM), at least the log
        start: `below` less the control batches (new leaders') at the top of the log below
        it. A batch whose kind is unknown counts as data (wal/controls.py). Past the log end
        (a follower told a HWM it has not reached) the batches are unknown, and at or below
        the log start there are none: `below`.
        Below the batches recovery scanned it reads batch headers, at most
        CONTROL_HEADER_READS_MAX per call; those right below what it knows it keeps, so it
        reads each of them once. It never marks the log damaged."""
        if self.needs_repair is not None:
            return below
        if not self.log_start_offset < below <= self.log_end_offset:
            return below
        controls = self._controls
        end = Offset(max(controls.data_end(below), self.log_start_offset))
        for _ in range(CONTROL_HEADER_READS_MAX):
            if end == self.log_start_offset or end > controls.known_from:
                return end  # the batch that ends at `end` is known to be data
            learning = end == controls.known_from
            if learning and not controls.may_learn:
                return end  # unknown: it counts as data
            header = self._header_before(end)
            if header is None:
                if learning:
                    controls.cannot_learn()
                return end
            if learning:
                controls.learn(header)
            if not header.is_control:
                return end
            end = Offset(max(header.base_offset, self.log_start_offset))
        return end

    def _header_before(self, offset: Offset) -> BatchHeader | None:
        """The header of the batch that ends at `offset` (one the log holds), or None when
        it cannot be read (a read of the batch, or recovery, will find the damage)."""
        index = bisect.bisect_right(self._segments, offset - 1, key=lambda s: s.base_offset)
        segment = self._segments[index - 1]
        try:
            header = segment.find(Offset(offset - 1))[1]
        except (CorruptBatch, OSError):  # a disk that fails a read: the writes will tell
            return None
        return header if header.next_offset == offset else None

    def segment_paths(self) -> list[str]:
        return [segment.log_path for segment in self._segments]

    def size_bytes(self) -> int:
        """The bytes of every segment (the partition's size, as DescribeLogDirs tells it)."""
        return sum(segment.size_bytes for segment in self._segments)

    def close(self) -> None:
        """A clean shutdown: sync everything, checkpoint the HWM, release the files."""
        if self.needs_repair is None:
            self.sync()
            hwm = Offset(min(self._hwm, self.log_end_offset))
            if hwm != self._hwm_checkpointed:
                ckpt.write_checkpoints(self._fs, self.directory, {ckpt.HWM: ckpt.offset_rows(hwm)})
                self._hwm_checkpointed = hwm
        self._fs.close()

    def release(self) -> None:
        """Release the files without syncing anything (after a failed write or fsync)."""
        self._fs.close()

    def reopen(self) -> DiskStorage:
        """After a failed write or fsync (EIO, ENOSPC): this log released unsynced, and its
        directory recovered again, cut back to what the last completed sync made durable.
        The kernel may have dropped the pages a failed fsync did not write and still show
        them, so nothing written after that sync is trusted (PostgreSQL's fsyncgate).
        Raises OSError while the disk still fails."""
        synced = self.synced_end_offset
        self.release()
        fresh = DiskStorage(self.directory, clock=self._clock, config=self.config, fs=self._fs)
        if fresh.log_end_offset > synced:
            fresh.truncate_to(offset=synced)
        return fresh

    def __enter__(self) -> DiskStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- retention --------------------------------------------------------------------
    def apply_retention(
        self,
        wall_ms: int,
        snapshot: Callable[[Offset], tuple[ProducerEntry, ...]] | None = None,
    ) -> int:
        """Delete whole segments beyond retention_bytes or older than retention_ms (by the
        time of day `wall_ms`, as record timestamps are), oldest first, never the active one
        and never one holding an offset at or above the HWM.
        `snapshot` gives the producer snapshot at a log start (the replica's
        `producer_snapshot`); without it the one saved last is kept. Durable on return.
        The number of segments deleted."""
        total = sum(segment.size_bytes for segment in self._segments)
        count = 0
        for segment in self._segments[:-1]:
            retention_bytes, retention_ms = self.config.retention_bytes, self.config.retention_ms
            by_size = retention_bytes is not None and total - segment.size_bytes >= retention_bytes
            by_age = retention_ms is not None and wall_ms - segment.max_timestamp > retention_ms
            if segment.end_offset > self._hwm or not (by_size or by_age):
                break
            total -= segment.size_bytes
            count += 1
        if count:
            start = self._segments[count].base_offset
            self._move_log_start(start, snapshot(start) if snapshot else None)
        return count

    def advance_log_start(
        self, offset: Offset, *, producers: tuple[ProducerEntry, ...] | None = None
    ) -> None:
        """DeleteRecords: make `offset` the log start offset, deleting the segments wholly
        below it; `producers` is the producer snapshot there. Durable on return. Past the
        HWM raises OffsetOutOfRange."""
        if offset > self._hwm:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._hwm)
        if offset > self.log_start_offset:
            self._move_log_start(offset, producers)

    def reset(
        self,
        *,
        start_offset: Offset,
        prev_epoch: Epoch,
        producers: tuple[ProducerEntry, ...] | None = None,
    ) -> None:
        """Drop the whole log and start it empty at `start_offset`, which becomes the log
        start and the HWM: a follower behind its leader's log start (Kafka's
        truncateFullyAndStartAt). Everything below it is committed and deleted on the
        leader; `prev_epoch` is the epoch of its record at start_offset - 1, which the epoch
        history keeps. The checkpoints move first, so after a crash in between the old
        segments below `start_offset` are hidden and any above it are an ordinary divergent
        tail. Durable on return."""
        self._check_serving()
        self._save_producers(producers)
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
        self._controls.reset(start_offset)
        self._fs.fsync_dir(self.directory)
        self._dir_dirty = False
        self._write_recovery_point(start_offset)
        self.synced_end_offset = start_offset

    def _save_producers(self, producers: tuple[ProducerEntry, ...] | None) -> None:
        """The producer snapshot of a new log start, durable before the log start itself:
        a crash in between leaves a snapshot ahead of the log start (what the log replays
        it knows already), never behind it (a deleted batch forgotten). None keeps the
        snapshot saved last."""
        if producers is not None and producers != self._producers:
            self._producers = producers
            rows = ckpt.producer_rows(producers)
            ckpt.write_checkpoints(self._fs, self.directory, {ckpt.PRODUCERS: rows})

    def _move_log_start(self, offset: Offset, producers: tuple[ProducerEntry, ...] | None) -> None:
        """Checkpoint the producer snapshot, then the new log start with the epoch history
        trimmed to it, then remove the segments below it: after a crash in between, the
        checkpoints hide what was not removed yet. The epochs go first because the
        segments removed may be all that tells the epoch of the record before the log
        start (the leader-epoch checkpoint lags until a sync covers what recovery derived
        from them)."""
        assert offset <= self._hwm
        self._save_producers(producers)
        self.log_start_offset = offset
        kept = 0
        while kept < len(self._segments) - 1 and self._segments[kept].end_offset <= offset:
            kept += 1
        doomed, self._segments = self._segments[:kept], self._segments[kept:]
        first = self._trim_epochs()
        durable = self._durable_epochs(first)
        files = {
            ckpt.LOG_START_OFFSET: ckpt.offset_rows(offset),
            ckpt.LEADER_EPOCH: ckpt.epoch_rows(durable),
        }
        self._epochs_dirty = durable != self._epochs
        if self._hwm_checkpointed < offset:
            # The log start never passes the HWM, after a crash too. Checkpoint the log
            # start itself, not the HWM in memory: that may lie beyond what is synced here,
            # and a torn batch below a checkpointed HWM reads as corruption.
            self._hwm_checkpointed = offset
            files[ckpt.HWM] = ckpt.offset_rows(offset)
        ckpt.write_checkpoints(self._fs, self.directory, files)
        for segment in doomed:
            self._forget(segment)
            segment.delete()
        self._fs.fsync_dir(self.directory)

    def _durable_epochs(self, first: Offset) -> list[EpochEntry]:
        """The epoch history a checkpoint may hold now: the entry of the record before
        `first` (the first offset the log holds) and those of batches a completed sync
        made durable, never one that only unsynced bytes tell (a crash may take them)."""
        limit = max(first, self.synced_end_offset)
        return [entry for entry in self._epochs if entry.start_offset < limit]

    # --- time index -------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record whose timestamp is >= `timestamp`,
        or None. Control batches (a new leader's) never match, and a segment whose only
        later timestamps are theirs is passed over."""
        self._check_serving()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                found = self._offset_for_timestamp_in(segment, timestamp)
                if found is not None:
                    return found
        return None

    def max_timestamp_record(self, below: Offset) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record below `below` with the largest
        timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734), or None when there is none.
        Control batches never count; a segment or batch whose max timestamp cannot beat
        the best found so far is passed over."""
        self._check_serving()
        best: tuple[Offset, int] | None = None
        for segment in self._segments:
            if segment.base_offset >= below:
                break
            if best is not None and segment.max_timestamp <= best[1]:
                continue
            reader = ChunkReader(self._fs, segment.log_path, segment.size_bytes)
            for position, header in scan_batches(
                self._fs,
                segment.log_path,
                segment.index.lookup(segment.base_offset),
                segment.size_bytes,
                verify=False,
            ):
                if header.base_offset >= below:
                    break
                if header.is_control or header.next_offset <= self.log_start_offset:
                    continue
                if best is not None and NO_TIMESTAMP < header.max_timestamp <= best[1]:
                    continue
                batch = self._checked(segment, reader, position, header)
                for record in DefaultRecordBatch(batch):
                    offset = int(record.offset)
                    if offset >= below:
                        break
                    if offset >= self.log_start_offset and (
                        best is None or record.timestamp > best[1]
                    ):
                        best = Offset(offset), int(record.timestamp)
        return best

    def _offset_for_timestamp_in(
        self, segment: Segment, timestamp: int
    ) -> tuple[Offset, int] | None:
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
            if header.next_offset <= start or header.is_control:
                continue
            if NO_TIMESTAMP < header.max_timestamp < timestamp:
                continue  # (a header without a max timestamp is read record by record)
            batch = self._checked(segment, reader, position, header)
            found = first_record_at(batch, timestamp)
            if found is not None:
                return Offset(max(found[0], self.log_start_offset)), found[1]
        return None

    # --- the write path -------------------------------------------------------------
    def _extend_epochs(self, header: BatchHeader) -> None:
        last = self._epochs[-1].epoch if self._epochs else None
        assert last is None or header.epoch >= last, "epochs never go back in the log"
        if extend_epochs(self._epochs, header):
            self._epochs_dirty = True

    def _trim_epochs(self) -> Offset:
        """Keep the history from the record before the batch holding the log start on
        (`trim_epochs`); from the first segment's base when that batch cannot be read.
        The offset it was trimmed to (the first one the log holds)."""
        first = self._segments[0].base_offset
        segment = self._segments[0]
        if segment.base_offset < self.log_start_offset < segment.end_offset:
            with contextlib.suppress(CorruptBatch):
                first = segment.find(self.log_start_offset)[1].base_offset
        trimmed = trim_epochs(self._epochs, first)
        if trimmed != self._epochs:
            self._epochs = trimmed
            self._epochs_dirty = True
        return first

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
        if self._repair_floor_dirty:
            files[ckpt.REPAIR_FLOOR] = ckpt.repair_floor_rows(self._repair_floor)
            self._repair_floor_dirty = False
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
        """Add the batches of `segment` from `position` to `out`; (done, budget left).
        A batch's end is read from a field its CRC covers: the batch that ends the read
        is checked too."""
        reader = ChunkReader(self._fs, segment.log_path, segment.size_bytes)
        expected = read_header(out[-1]).next_offset if out else None
        while position < segment.size_bytes:
            if expected is not None and expected >= end_offset:
                return True, budget  # what follows is not asked for: not even read
            try:
                header = reader.header(position)
                check_follows(header, expected)
            except CorruptBatch as error:
                raise self._corrupt(segment, expected or segment.base_offset, error) from error
            if header.next_offset > end_offset:
                self._checked(segment, reader, position, header)
                return True, budget
            if out and header.size_bytes > budget:
                return True, budget
            out.append(self._checked(segment, reader, position, header))
            budget -= header.size_bytes
            position += header.size_bytes
            expected = header.next_offset
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
        recovery point, cutting a torn tail and setting damage aside; see the module's rules."""
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
        self._repair_floor, self._repair_cut = ckpt.read_repair_floor(self._fs, self.directory)
        self._producers = ckpt.read_producers(self._fs, self.directory)
        if not bases:
            self._segments = [self._new_segment(self.log_start_offset)]
            self._controls.reset(self.log_start_offset)
            self._fs.fsync_dir(self.directory)
            self._dir_dirty = False
        else:
            self._open_segments(bases)
        self.log_start_offset = Offset(max(self.log_start_offset, self._segments[0].base_offset))
        self._check_committed_end()
        if self.needs_repair is not None:
            self._set_aside(len(self._segments) - 1, self._floor_of_damage())
        elif self._repair_cut is not None:  # a repair cut the log, then a crash came
            self._end_log_at(self.log_end_offset)
        self._trim_epochs()
        self._hwm_checkpointed = Offset(min(self._hwm_checkpointed, self.log_end_offset))
        self._hwm = self._hwm_checkpointed
        self.synced_end_offset = self.log_end_offset

    def _clean_directory(self) -> list[Offset]:
        """Remove leftovers of a crash (temp files, indexes without a log); the bases of the
        segments present, in order."""
        names = self._fs.listdir(self.directory)
        logs = {name[:OFFSET_DIGITS] for name in names if is_segment_name(name)}
        for name in names:
            orphan = name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and (
                name[:OFFSET_DIGITS] not in logs
            )
            if name.endswith(ckpt.TEMP_SUFFIX) or orphan:
                self._fs.unlink(posixpath.join(self.directory, name))
        return self._bases_on_disk()

    def _bases_on_disk(self) -> list[Offset]:
        names = self._fs.listdir(self.directory)
        return sorted(Offset(int(name[:OFFSET_DIGITS])) for name in names if is_segment_name(name))

    def _open_segments(self, bases: list[Offset]) -> None:
        now = self._clock()
        checkpointed = ckpt.read_epochs(self._fs, self.directory)
        # The control batches are known from the first segment scanned on (the last one at
        # least); a log that ends before it (damage) knows none (`_end_log_at`).
        self._controls.reset(bases[-1])
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
                if not self._adopt(segment, bases[number + 1]):
                    self._epochs = checkpointed  # cut where the damage begins
                    return
                continue
            if not scanning:
                scanning = True
                self._epochs = [e for e in checkpointed if e.start_offset < base]
                self._controls.reset(base)
            if self._segments and base != self._segments[-1].end_offset:
                self._on_gap(self._segments[-1], base)
                self._drop_files_after(bases[number:])
                return
            if not self._scan(segment, last=last):
                self._drop_files_after(bases[number + 1 :])
                return
        if not scanning:
            self._epochs = checkpointed

    def _adopt(self, segment: Segment, end_offset: Offset) -> bool:
        """A segment wholly below the recovery point: trust its files unless they look wrong.
        False when it is damaged (synced, so never a torn tail): the log ends in it."""
        self._segments.append(segment)
        if segment.load_indexes(end_offset):
            return True
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch as error:
            self.needs_repair = RepairNeeded(segment.log_path, segment.end_offset, str(error))
            return False
        segment.seal()
        add_once(self._unsynced_indexes, segment)
        return True

    def _scan(self, segment: Segment, *, last: bool) -> bool:
        """Verify a segment at or after the recovery point, deriving the epoch history.
        False when the log ends in it (torn tail cut, or damage to set aside)."""
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
        """Below the checkpointed HWM: damage. Else cut the tail there, durably."""
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

    def _check_committed_end(self) -> None:
        """A whole log that ends below its checkpointed HWM lost committed batches (a file
        cut short at a batch boundary, a segment gone). A log that ends below its start
        is a reset or log start move a crash interrupted: no damage."""
        end = self.log_end_offset
        if self.needs_repair is None and self.log_start_offset <= end < self._hwm_checkpointed:
            reason = f"the log ends below its checkpointed HWM {self._hwm_checkpointed}"
            self.needs_repair = RepairNeeded(self._segments[-1].log_path, end, reason)

    def _derive_epochs(self, segment: Segment) -> None:
        """The epoch history and the control batches of a segment recovery scanned (its
        good prefix)."""
        for _, header in scan_batches(
            self._fs, segment.log_path, 0, segment.size_bytes, verify=False
        ):
            if extend_epochs(self._epochs, header):
                self._epochs_dirty = True
            self._controls.on_batch(header)

    def _drop_files_after(self, bases: list[Offset]) -> None:
        """Remove the segments beyond the end of the log found by recovery."""
        if self.needs_repair is not None:
            return  # Keep every byte: they are set aside.
        for base in bases:
            Segment(self._fs, self.directory, base, index_interval_bytes=1).delete()
        self._fs.fsync_dir(self.directory)

    # --- damage -----------------------------------------------------------------------
    def quarantine(self) -> bool:
        """Set aside the damage a read found (`needs_repair`; see the module's rules). The
        damaged segment is read again from its start: the log then ends before its first
        bad batch, and the repair floor records how far the log reached (its end and last
        epoch). False when no read found damage, or the segment reads whole again (only
        its sparse index was wrong: it is rebuilt)."""
        damage = self.needs_repair
        if damage is None:
            return False
        paths = [segment.log_path for segment in self._segments]
        index = paths.index(damage.segment_path) if damage.segment_path in paths else None
        last_epoch = self._epochs[-1].epoch if self._epochs else NO_EPOCH
        floor = RepairFloor(last_epoch, self.log_end_offset)
        if index is None or not self._damaged_again(index):
            self.needs_repair = None
            return False
        self._set_aside(index, floor)
        return True

    def _damaged_again(self, index: int) -> bool:
        """Scan segment `index` again, checking every CRC; True when a batch fails (the
        segment then ends before it), else its indexes are rebuilt and it stays."""
        segment = self._segments[index]
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch:
            return True
        if index < len(self._segments) - 1:
            segment.seal()
        add_once(self._unsynced_indexes, segment)
        return False

    def _set_aside(self, index: int, floor: RepairFloor) -> None:
        """Segment `index` ends at its good prefix (its `size_bytes`); set the rest of it and
        every later segment aside in quarantine/, durably, floor first (module's rules)."""
        segment = self._segments[index]
        cut = segment.end_offset
        self._repair_floor = later_floor(self._repair_floor, floor)
        self._repair_cut = cut
        point = Offset(min(self._recovery_point, segment.base_offset))
        ckpt.write_checkpoints(
            self._fs,
            self.directory,
            {
                ckpt.REPAIR_FLOOR: ckpt.repair_floor_rows(self._repair_floor, cut),
                ckpt.RECOVERY_POINT: ckpt.offset_rows(point),
            },
        )
        self._recovery_point = point
        aside = self._new_quarantine_dir(cut)
        self._copy_tail(segment, posixpath.join(aside, segment_name(cut) + LOG_SUFFIX))
        for base in self._bases_on_disk():
            if base > segment.base_offset:
                self._move_segment(base, aside)
        self._fs.fsync_dir(aside)
        segment.truncate(segment.size_bytes, cut)
        self._fs.fsync(segment.log_path)
        self._fs.fsync_dir(self.directory)
        for later in self._segments[index + 1 :]:
            self._forget(later)
        del self._segments[index + 1 :]
        self._end_log_at(cut)
        self.needs_repair = None

    def _end_log_at(self, cut: Offset) -> None:
        """The log now ends at `cut`: checkpoint its HWM (at most there), epochs and start,
        and that the repair is done."""
        truncate_epochs(self._epochs, cut)
        self._controls.truncate(cut)
        self._epochs_dirty = False
        self._hwm = self._hwm_checkpointed = Offset(min(self._hwm, cut))
        self._repair_cut = None
        files = {
            ckpt.HWM: ckpt.offset_rows(self._hwm),
            ckpt.LEADER_EPOCH: ckpt.epoch_rows(self._epochs),
            ckpt.REPAIR_FLOOR: ckpt.repair_floor_rows(self._repair_floor),
        }
        if cut < self.log_start_offset:  # the batch holding the log start was damaged
            self.log_start_offset = cut
            files[ckpt.LOG_START_OFFSET] = ckpt.offset_rows(cut)
        ckpt.write_checkpoints(self._fs, self.directory, files)
        self.synced_end_offset = cut

    def _new_quarantine_dir(self, cut: Offset) -> str:
        parent = posixpath.join(self.directory, QUARANTINE_DIR)
        for number in range(QUARANTINE_NAMES_MAX):
            name = segment_name(cut) + (f"-{number}" if number else "")
            path = posixpath.join(parent, name)
            if not self._fs.exists(path):
                self._fs.makedirs(path)
                self._fs.fsync_dir(parent)
                return path
        raise StorageError(f"{parent} holds {QUARANTINE_NAMES_MAX} repairs of offset {cut}")

    def _copy_tail(self, segment: Segment, target: str) -> None:
        """Copy the bytes of `segment` after its good prefix to `target`, durably."""
        position, end = segment.size_bytes, self._fs.size(segment.log_path)
        while position < end:
            size = min(SCAN_CHUNK_BYTES, end - position)
            chunk = self._fs.pread(segment.log_path, position, size)
            self._fs.append(target, chunk)
            position += len(chunk)
        if end > segment.size_bytes:
            self._fs.fsync(target)

    def _move_segment(self, base: Offset, aside: str) -> None:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            name = segment_name(base) + suffix
            source = posixpath.join(self.directory, name)
            if self._fs.exists(source):
                self._fs.rename(source, posixpath.join(aside, name))

    def _floor_of_damage(self) -> RepairFloor:
        """The floor for the damage recovery found: the one a repair in progress recorded
        when the damage is where it cuts (it knew more: it is finishing), else what
        recovery can tell (`_floor_found_by_recovery`)."""
        assert self.needs_repair is not None
        cut, recorded = self._repair_cut, self._repair_floor
        if cut is not None and recorded is not None and self.needs_repair.offset >= cut:
            return recorded
        return self._floor_found_by_recovery(self._segments[-1])

    def _floor_found_by_recovery(self, damaged: Segment) -> RepairFloor:
        """How far the log reached, as recovery can tell after finding damage in `damaged`:
        the checkpointed HWM (with the epoch of the record before it), the last epoch the
        leader-epoch checkpoint records, and the batches whose framing still reads, in
        order, after the damage. The end is unknown (None) unless those batches read to the
        end of the last file and reach past every other bound."""
        checkpointed = ckpt.read_epochs(self._fs, self.directory)
        proven: list[RepairFloor] = []
        hwm = self._hwm_checkpointed
        if hwm > 0:
            proven.append(RepairFloor(epoch_of(checkpointed, Offset(hwm - 1)), hwm))
        if checkpointed:
            last = checkpointed[-1]
            proven.append(RepairFloor(last.epoch, Offset(last.start_offset + 1)))
        walked, complete = self._walk_past_damage(damaged)
        best: RepairFloor | None = walked
        for floor in proven:
            best = later_floor(best, floor)
        if best is None:  # nothing tells: any later epoch holds what was committed
            return RepairFloor(self._hard_state.epoch, None)
        return best if complete and best == walked else RepairFloor(best.epoch, None)

    def _walk_past_damage(self, damaged: Segment) -> tuple[RepairFloor | None, bool]:
        """(epoch, end) of the last batch that reads in order from the good prefix of
        `damaged` through every later segment file (framing only: a bad CRC does not stop
        it), and whether they read so to their end. Offsets must follow each other and
        epochs rise no higher than the vote state's: the base offset and leader epoch of a
        batch lie outside its CRC."""
        files = [(damaged.log_path, damaged.size_bytes)] + [
            (posixpath.join(self.directory, segment_name(base) + LOG_SUFFIX), 0)
            for base in self._bases_on_disk()
            if base > damaged.base_offset
        ]
        expected, epoch, walked = damaged.end_offset, NO_EPOCH, None
        for path, start in files:
            try:
                for _, header in scan_batches(
                    self._fs, path, start, self._fs.size(path), verify=False
                ):
                    if header.base_offset != expected or not (
                        epoch <= header.epoch <= self._hard_state.epoch
                    ):
                        return walked, False
                    expected, epoch = header.next_offset, header.epoch
                    walked = RepairFloor(epoch, expected)
            except CorruptBatch:
                return walked, False
        return walked, True


def check_follows(header: BatchHeader, expected: Offset | None) -> None:
    """A batch starts where the one before it ended (its base offset lies outside its CRC);
    CorruptBatch if not."""
    if expected is not None and header.base_offset != expected:
        raise CorruptBatch(f"batch at offset {header.base_offset} where {expected} was due")


def epoch_of(epochs: list[EpochEntry], offset: Offset) -> Epoch:
    """The epoch of the record at `offset` in an epoch history (NO_EPOCH before it)."""
    index = bisect.bisect_right(epochs, offset, key=lambda entry: entry.start_offset)
    return epochs[index - 1].epoch if index > 0 else NO_EPOCH


def add_once(segments: list[Segment], segment: Segment) -> None:
    if segment not in segments:
        segments.append(segment)


def is_segment_name(name: str) -> bool:
    stem = name[: -len(LOG_SUFFIX)]
    return name.endswith(LOG_SUFFIX) and len(stem) == OFFSET_DIGITS and stem.isdigit()


def first_record_at(batch: bytes, timestamp: int) -> tuple[Offset, int] | None:
    """(offset, timestamp) of the first record in `batch` with a timestamp >= `timestamp`."""
    for record in DefaultRecordBatch(batch):
        if record.timestamp >= timestamp:
            return Offset(record.offset), int(record.timestamp)
    return None
