"""One segment of a partition's log: a `.log` file of record batches and its two indexes.

Rules of this file:
- The `.log` file holds Kafka record batches v2 exactly as on the wire, back to back; its
  name is the base offset, zero-padded to 20 digits, as in Kafka.
- A batch's framing is checked before it is written (its CRC-32C was checked before it
  reached the log: at the leader's door, or by the follower's core), and framing and
  CRC-32C again whenever it is read back; a batch that fails is never returned.
- The indexes are hints rebuilt from the log whenever they look wrong; they are written
  without fsync while the segment is active and fsync'd once when it is sealed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from tidelog.errors import CorruptBatch
from tidelog.records import HEADER_SIZE, MAGIC_V2, BatchHeader, check_batch, read_header
from tidelog.types import Offset
from tidelog.wal.fs import FileSystem
from tidelog.wal.index import (
    NO_TIMESTAMP,
    OffsetIndex,
    TimeIndex,
    decode_offset_index,
    decode_time_index,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
OFFSET_DIGITS = 20
SCAN_CHUNK_BYTES = 1024 * 1024
SEGMENT_BYTES_MAX = 0x7FFFFFFF  # Positions are u32 in the index; Kafka caps at Int.MaxValue.


def segment_name(base_offset: Offset) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}"


class ChunkReader:
    """Reads batches of one file through a window of SCAN_CHUNK_BYTES: one pread per chunk,
    not per batch. The window is refilled whenever a request falls outside it."""

    def __init__(self, fs: FileSystem, path: str, end: int) -> None:
        self.fs = fs
        self.path = path
        self.end = end
        self._chunk = b""
        self._start = 0

    def _window(self, position: int, size_bytes: int) -> int:
        """Make [position, position + size_bytes) readable; its index in the window."""
        if position < self._start or position + size_bytes > self._start + len(self._chunk):
            length = min(max(SCAN_CHUNK_BYTES, size_bytes), self.end - position)
            self._chunk = self.fs.pread(self.path, position, length)
            self._start = position
        return position - self._start

    def header(self, position: int) -> BatchHeader:
        """The framed header at `position`; CorruptBatch when its framing is not sane."""
        available = self.end - position
        at = self._window(position, min(HEADER_SIZE, available))
        return check_framing(self._chunk, at, available)

    def batch(self, position: int, header: BatchHeader) -> bytes:
        """The whole batch at `position`, its CRC-32C checked (CorruptBatch if wrong)."""
        at = self._window(position, header.size_bytes)
        check_batch(self._chunk, at)
        return self._chunk[at : at + header.size_bytes]


def scan_batches(
    fs: FileSystem, path: str, start: int, end: int, *, verify: bool
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in [start, end) of `path`, read in chunks.

    With `verify` each batch's CRC-32C is checked; without, only its framing. Raises
    CorruptBatch at the first bad batch (the caller knows where it stopped).
    """
    reader = ChunkReader(fs, path, end)
    position = start
    while position < end:
        header = reader.header(position)
        if verify:
            reader.batch(position, header)
        yield position, header
        position += header.size_bytes


def check_framing(buf: bytes, at: int, available: int) -> BatchHeader:
    """The header at `at` if its framing is sane for `available` bytes; CorruptBatch if not."""
    if available < HEADER_SIZE or len(buf) - at < HEADER_SIZE:
        raise CorruptBatch(f"{available} bytes left, a batch header needs {HEADER_SIZE}")
    header = read_header(buf, at)
    if header.magic != MAGIC_V2:
        raise CorruptBatch(f"magic {header.magic}, expected {MAGIC_V2}")
    if header.size_bytes < HEADER_SIZE or header.size_bytes > available:
        raise CorruptBatch(f"batch of {header.size_bytes} bytes, {available} present")
    if header.last_offset_delta < 0:
        raise CorruptBatch(f"negative lastOffsetDelta {header.last_offset_delta}")
    return header


class Segment:
    """A segment file, its end, and its indexes in memory."""

    def __init__(
        self, fs: FileSystem, directory: str, base_offset: Offset, *, index_interval_bytes: int
    ) -> None:
        self.fs = fs
        self.base_offset = base_offset
        prefix = posixpath.join(directory, segment_name(base_offset))
        self.log_path = prefix + LOG_SUFFIX
        self.index_path = prefix + INDEX_SUFFIX
        self.time_index_path = prefix + TIME_INDEX_SUFFIX
        self.index_interval_bytes = index_interval_bytes
        self.size_bytes = 0
        self.end_offset = base_offset
        self.created_ms = 0
        self._reset_indexes()

    def _reset_indexes(self) -> None:
        self.index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self.max_timestamp = NO_TIMESTAMP
        self.max_timestamp_offset = self.base_offset
        self.bytes_since_index_entry = 0
        # The last batch this segment wrote, while it is the segment's last: a consumer at
        # the log's end finds it without a scan from the sparse index entry before it.
        self.last_batch: tuple[int, BatchHeader] | None = None

    # --- writing --------------------------------------------------------------------
    def create_files(self, now_ms: int) -> None:
        """Create the three (empty) files of a new segment."""
        self.created_ms = now_ms
        for path in (self.log_path, self.index_path, self.time_index_path):
            self.fs.append(path, b"")

    def write(self, batches: list[tuple[bytes, BatchHeader]]) -> None:
        """Append checked batches starting at the segment end: one write per file."""
        index_entries, time_entries = bytearray(), bytearray()
        for batch, header in batches:
            assert header.base_offset == self.end_offset
            assert len(batch) == header.size_bytes
            entry, time_entry = self._index_batch(header, self.size_bytes)
            index_entries += entry
            time_entries += time_entry
            self.last_batch = (self.size_bytes, header)
            self.size_bytes += header.size_bytes
            self.end_offset = header.next_offset
        assert self.size_bytes <= SEGMENT_BYTES_MAX
        self.fs.append(self.log_path, b"".join(batch for batch, _ in batches))
        if index_entries:
            self.fs.append(self.index_path, bytes(index_entries))
        if time_entries:
            self.fs.append(self.time_index_path, bytes(time_entries))

    def _index_batch(self, header: BatchHeader, position: int) -> tuple[bytes, bytes]:
        """Update the in-memory indexes for one batch; the index bytes to append."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = header.last_offset
        entry = time_entry = b""
        if self.bytes_since_index_entry > self.index_interval_bytes:
            entry = self.index.add(header.base_offset, position)
            time_entry = self.time_index.maybe_add(self.max_timestamp, self.max_timestamp_offset)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += header.size_bytes
        return entry, time_entry

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp for good."""
        entry = self.time_index.maybe_add(self.max_timestamp, self.max_timestamp_offset)
        if entry:
            self.fs.append(self.time_index_path, entry)

    def sync_indexes(self) -> None:
        self.fs.fsync(self.index_path)
        self.fs.fsync(self.time_index_path)

    def truncate(self, position: int, offset: Offset) -> None:
        """Cut the log at `position` (where `offset` starts) and rebuild the indexes."""
        assert position <= self.size_bytes
        self.fs.truncate(self.log_path, position)
        self.size_bytes = position
        self.end_offset = offset
        self.rebuild_indexes(verify=False)

    def delete(self) -> None:
        for path in (self.log_path, self.index_path, self.time_index_path):
            if self.fs.exists(path):
                self.fs.unlink(path)

    # --- recovery -------------------------------------------------------------------
    def rebuild_indexes(self, *, verify: bool) -> None:
        """Scan the log from the start and rewrite both index files from it.

        Raises CorruptBatch at the first bad batch; `end_offset` and `size_bytes` then say
        where the good prefix ends.
        """
        self._reset_indexes()
        end, self.size_bytes, self.end_offset = self.size_bytes, 0, self.base_offset
        try:
            for position, header in scan_batches(self.fs, self.log_path, 0, end, verify=verify):
                if header.base_offset != self.end_offset:
                    raise CorruptBatch(f"batch at offset {header.base_offset} leaves a gap")
                self._index_batch(header, position)
                self.size_bytes = position + header.size_bytes
                self.end_offset = header.next_offset
        finally:
            self._rewrite_index_files()

    def _rewrite_index_files(self) -> None:
        for path, data in (
            (self.index_path, self.index.encode()),
            (self.time_index_path, self.time_index.encode()),
        ):
            if self.fs.exists(path):
                self.fs.truncate(path, 0)
            self.fs.append(path, data)

    def load_indexes(self, end_offset: Offset) -> bool:
        """Adopt the index files of a segment known to end at `end_offset`; False when they
        are missing, malformed or stale (the caller then rebuilds them)."""
        self.size_bytes = self.fs.size(self.log_path)
        self.end_offset = end_offset
        self.last_batch = None
        if not (self.fs.exists(self.index_path) and self.fs.exists(self.time_index_path)):
            return False
        index = decode_offset_index(
            self._read_all(self.index_path), self.base_offset, self.size_bytes
        )
        times = decode_time_index(
            self._read_all(self.time_index_path), self.base_offset, end_offset
        )
        if index is None or times is None or not self._points_at_batch(index):
            return False
        self.index, self.time_index = index, times
        self.max_timestamp = times.max_timestamp
        return True

    def _read_all(self, path: str) -> bytes:
        return self.fs.pread(path, 0, self.fs.size(path))

    def _points_at_batch(self, index: OffsetIndex) -> bool:
        """The last index entry names a batch that really starts there (stale check)."""
        if not index.offsets:
            return True
        position = index.positions[-1]
        try:
            header = self.header_at(position)
        except CorruptBatch:
            return False
        return header.base_offset == self.base_offset + index.offsets[-1]

    # --- reading --------------------------------------------------------------------
    def header_at(self, position: int) -> BatchHeader:
        """The framed header at `position`, read from the disk; CorruptBatch when not sane."""
        data = self.fs.pread(self.log_path, position, HEADER_SIZE)
        return check_framing(data, 0, self.size_bytes - position)

    def find(self, offset: Offset) -> tuple[int, BatchHeader]:
        """(position, header) of the batch holding `offset`, found from the sparse index."""
        assert self.base_offset <= offset < self.end_offset
        last = self.last_batch
        if last is not None and last[1].base_offset <= offset:
            # The segment's last batch (it ends at the segment's end): its header is read
            # from the disk as a scan would, and must be the one written there.
            position, written = last
            if self.header_at(position) != written:
                raise CorruptBatch(f"the batch header at {position} is not the one written")
            return last
        start = self.index.lookup(offset)
        for position, header in scan_batches(
            self.fs, self.log_path, start, self.size_bytes, verify=False
        ):
            if header.next_offset > offset:
                return position, header
        raise CorruptBatch(f"offset {offset} not found in {self.log_path}")
