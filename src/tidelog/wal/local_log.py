"""The segments of one log on its `FileSystem`: append, roll, read, truncate, flush
(Kafka's LocalLog). It knows nothing of checkpoints, epochs or the HWM: `DiskStorage`
(log.py) holds those and calls this.

Rules of this file:
- `append` only writes (framing checked by its caller, never the CRC: the core checked
  every batch it hands over); nothing is durable until `flush` returns. It rolls to a new
  segment at `segment_bytes`, `segment_ms`, or when an offset would not fit the index.
- `flush` issues one fdatasync per segment written since the last flush, fsyncs the indexes
  of the segments sealed since, and the directory if a segment was created or removed.
- Every batch read is checked (framing, order and CRC-32C: the pair assertion of the
  write). A corrupt one is never served: it marks the log `needs_repair`, and every read
  or write then raises StorageError naming the segment and offset until the damage is
  set aside (`DiskStorage.quarantine`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidelog.errors import CorruptBatch, StorageError
from tidelog.records import HEADER_SIZE, BatchHeader, check_batch, read_header
from tidelog.types import Offset
from tidelog.wal.config import WalConfig
from tidelog.wal.fs import FileSystem
from tidelog.wal.index import RELATIVE_OFFSET_MAX
from tidelog.wal.segment import ChunkReader, Segment
from tidelog.wal.segments import LogSegments

Clock = Callable[[], int]


@dataclass(frozen=True, slots=True)
class RepairNeeded:
    """Where the committed log is corrupt: the partition must be repaired from a peer."""

    segment_path: str
    offset: Offset
    reason: str

    def __str__(self) -> str:
        return f"corrupt batch at offset {self.offset} in {self.segment_path}: {self.reason}"


class LocalLog:
    """The segment files of one log directory, what of them awaits a flush, and damage
    a read found."""

    def __init__(self, fs: FileSystem, directory: str, *, config: WalConfig, clock: Clock) -> None:
        self.fs = fs
        self.directory = directory
        self.config = config
        self.clock = clock
        self.segments = LogSegments()
        self.needs_repair: RepairNeeded | None = None
        self._dirty: list[Segment] = []  # written since the last flush
        self._unsynced_indexes: list[Segment] = []  # sealed (or rebuilt) since
        self.dir_dirty = False

    @property
    def log_end_offset(self) -> Offset:
        return self.segments.log_end_offset

    def check_serving(self) -> None:
        if self.needs_repair is not None:
            raise StorageError(f"needs repair: {self.needs_repair}")

    # --- the write path -------------------------------------------------------------
    def append(self, batches: list[tuple[bytes, BatchHeader]]) -> None:
        """Write batches whose framing is checked, in order, at the log end; roll first
        whenever a batch would not fit the active segment."""
        pending: list[tuple[bytes, BatchHeader]] = []
        pending_bytes = 0
        for batch, header in batches:
            if self._should_roll(header, pending_bytes):
                self._write_active(pending)
                pending, pending_bytes = [], 0
                self._roll()
            pending.append((batch, header))
            pending_bytes += header.size_bytes
        self._write_active(pending)

    def _should_roll(self, header: BatchHeader, pending_bytes: int) -> bool:
        active = self.segments.active
        size = active.size_bytes + pending_bytes
        if size == 0:
            return False
        return (
            size + header.size_bytes > self.config.segment_bytes
            or self.clock() - active.created_ms >= self.config.segment_ms
            or header.last_offset - active.base_offset > RELATIVE_OFFSET_MAX
        )

    def _write_active(self, pending: list[tuple[bytes, BatchHeader]]) -> None:
        if pending:
            active = self.segments.active
            active.write(pending)
            self.mark_dirty(active)

    def _roll(self) -> None:
        active = self.segments.active
        active.seal()
        self.mark_indexes_unsynced(active)
        self.segments.add(self.new_segment(active.end_offset))

    def new_segment(self, base_offset: Offset) -> Segment:
        """Create the files of an empty segment at `base_offset` (not yet in `segments`)."""
        segment = self.open_segment(base_offset)
        segment.create_files(self.clock())
        self.dir_dirty = True
        return segment

    def open_segment(self, base_offset: Offset) -> Segment:
        """The segment at `base_offset`, its files as they are."""
        return Segment(
            self.fs,
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
        )

    def mark_dirty(self, segment: Segment) -> None:
        if segment not in self._dirty:
            self._dirty.append(segment)

    def mark_indexes_unsynced(self, segment: Segment) -> None:
        if segment not in self._unsynced_indexes:
            self._unsynced_indexes.append(segment)

    def forget(self, segment: Segment) -> None:
        """A segment about to be deleted, or set aside, needs no more syncing."""
        if segment in self._dirty:
            self._dirty.remove(segment)
        if segment in self._unsynced_indexes:
            self._unsynced_indexes.remove(segment)

    def delete(self, segments: list[Segment]) -> None:
        """Delete the files of `segments`, no longer in `segments` (not durable yet)."""
        for segment in segments:
            self.forget(segment)
            segment.delete()
            self.dir_dirty = True

    def truncate(self, offset: Offset) -> None:
        """Remove every batch at or above `offset`, a batch boundary in the log (not
        durable until the next `flush`)."""
        index = self.segments.index_holding(offset)
        self.delete(self.segments.remove_after(index))
        segment = self.segments.active
        position = 0
        if offset > segment.base_offset:
            position, header = self.find(segment, offset)
            assert header.base_offset == offset, "not a batch boundary"
        segment.truncate(position, offset)
        self.mark_dirty(segment)

    def flush(self) -> None:
        """Make everything written durable: data, indexes, then names."""
        for segment in self._dirty:
            self.fs.fdatasync(segment.log_path)
        for segment in self._unsynced_indexes:
            segment.sync_indexes()
        if self.dir_dirty:
            self.fs.fsync_dir(self.directory)
        self.flushed()

    def flushed(self) -> None:
        """Everything written is durable: `flush` did it, or a sync of the whole file
        system (wal/group_sync.py)."""
        self._dirty.clear()
        self._unsynced_indexes.clear()
        self.dir_dirty = False

    def sync_directory(self) -> None:
        self.fs.fsync_dir(self.directory)
        self.dir_dirty = False

    # --- the read path ----------------------------------------------------------------
    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """Whole checked batches from the one holding `start_offset` (in the log), each
        ending by `end_offset`, up to `max_bytes` but at least one when one qualifies."""
        index = self.segments.index_holding(start_offset)
        out: list[bytes] = []
        budget = max_bytes
        position = self.find(self.segments[index], start_offset)[0]
        for number in range(index, len(self.segments)):
            done, budget = self._read_segment(
                self.segments[number], position, end_offset, budget, out
            )
            if done:
                break
            position = 0
        return out

    def read_range(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> memoryview:
        """As `read`, as one view of the file's bytes from the segment holding
        `start_offset` (in the log, below `end_offset`), read with one pread."""
        segment = self.segments.holding(start_offset)
        position, first = self.find(segment, start_offset)
        length = min(max(max_bytes, first.size_bytes), segment.size_bytes - position)
        data = memoryview(self.fs.pread(segment.log_path, position, length))
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
                raise self.corrupt(segment, header.base_offset, error) from error
            if header.next_offset > end_offset:
                break
            position += header.size_bytes
            expected = header.next_offset
        return position

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
        reader = ChunkReader(self.fs, segment.log_path, segment.size_bytes)
        expected = read_header(out[-1]).next_offset if out else None
        while position < segment.size_bytes:
            if expected is not None and expected >= end_offset:
                return True, budget  # what follows is not asked for: not even read
            try:
                header = reader.header(position)
                check_follows(header, expected)
            except CorruptBatch as error:
                raise self.corrupt(segment, expected or segment.base_offset, error) from error
            if header.next_offset > end_offset:
                self.checked(segment, reader, position, header)
                return True, budget
            if out and header.size_bytes > budget:
                return True, budget
            out.append(self.checked(segment, reader, position, header))
            budget -= header.size_bytes
            position += header.size_bytes
            expected = header.next_offset
            if budget <= 0:
                return True, budget
        return False, budget

    def find(self, segment: Segment, offset: Offset) -> tuple[int, BatchHeader]:
        """(position, header) of the batch of `segment` holding `offset`."""
        try:
            return segment.find(offset)
        except CorruptBatch as error:
            raise self.corrupt(segment, offset, error) from error

    def checked(
        self, segment: Segment, reader: ChunkReader, position: int, header: BatchHeader
    ) -> bytes:
        """The batch at `position`, its CRC-32C verified (pair assertion of append)."""
        try:
            return reader.batch(position, header)
        except CorruptBatch as error:
            raise self.corrupt(segment, header.base_offset, error) from error

    def corrupt(self, segment: Segment, offset: Offset, error: CorruptBatch) -> StorageError:
        """Mark the log for repair; the error to raise, naming segment and offset."""
        self.needs_repair = RepairNeeded(segment.log_path, offset, str(error))
        return StorageError(f"needs repair: {self.needs_repair}")

    def header_before(self, offset: Offset) -> BatchHeader | None:
        """The header of the batch that ends at `offset` (one the log holds), or None when
        it cannot be read (a read of the batch, or recovery, will find the damage)."""
        segment = self.segments.holding(Offset(offset - 1))
        try:
            header = segment.find(Offset(offset - 1))[1]
        except (CorruptBatch, OSError):  # a disk that fails a read: the writes will tell
            return None
        return header if header.next_offset == offset else None


def check_follows(header: BatchHeader, expected: Offset | None) -> None:
    """A batch starts where the one before it ended (its base offset lies outside its CRC);
    CorruptBatch if not."""
    if expected is not None and header.base_offset != expected:
        raise CorruptBatch(f"batch at offset {header.base_offset} where {expected} was due")
