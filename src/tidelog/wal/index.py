"""The sparse indexes of one segment, in memory and in Kafka's file formats.

Rules of this file:
- `.index`: entries of (relative offset u32, position u32), big-endian, one per
  `index_interval_bytes` of log; the entry names the base offset of the batch at that
  position. The first batch of a segment (position 0) is implied.
- `.timeindex`: entries of (timestamp i64, relative offset u32): the largest timestamp so
  far and the last offset of the batch that reached it. Timestamps never decrease.
- An index is a hint, never trusted over the log: `decode_*` returns None for anything
  malformed and the segment then rebuilds the index by scanning.
"""

from __future__ import annotations

import bisect
import struct

from tidelog.types import Offset

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
RELATIVE_OFFSET_MAX = 0xFFFFFFFF
NO_TIMESTAMP = -1


class OffsetIndex:
    """Relative offset -> position, strictly increasing in both."""

    def __init__(self, base_offset: Offset) -> None:
        self.base_offset = base_offset
        self.offsets: list[int] = []
        self.positions: list[int] = []

    def lookup(self, offset: Offset) -> int:
        """The position of the last indexed batch starting at or before `offset` (or 0)."""
        index = bisect.bisect_right(self.offsets, offset - self.base_offset)
        return self.positions[index - 1] if index > 0 else 0

    def add(self, offset: Offset, position: int) -> bytes:
        """Record the batch at `position` starting at `offset`; the bytes to append."""
        relative = offset - self.base_offset
        assert 0 < relative <= RELATIVE_OFFSET_MAX
        assert not self.offsets or relative > self.offsets[-1]
        assert not self.positions or position > self.positions[-1]
        self.offsets.append(relative)
        self.positions.append(position)
        return OFFSET_ENTRY.pack(relative, position)

    def encode(self) -> bytes:
        pairs = zip(self.offsets, self.positions, strict=True)
        return b"".join(OFFSET_ENTRY.pack(relative, position) for relative, position in pairs)


def decode_offset_index(data: bytes, base_offset: Offset, log_size: int) -> OffsetIndex | None:
    """The index in `data`, or None when it is not a well-formed index of this segment."""
    if len(data) % OFFSET_ENTRY.size:
        return None
    index = OffsetIndex(base_offset)
    for relative, position in OFFSET_ENTRY.iter_unpack(data):
        increasing = not index.offsets or (
            relative > index.offsets[-1] and position > index.positions[-1]
        )
        if relative == 0 or position >= log_size or not increasing:
            return None
        index.offsets.append(relative)
        index.positions.append(position)
    return index


class TimeIndex:
    """Largest timestamp so far -> last offset of the batch that reached it."""

    def __init__(self, base_offset: Offset) -> None:
        self.base_offset = base_offset
        self.timestamps: list[int] = []
        self.offsets: list[int] = []

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else NO_TIMESTAMP

    def offset_before(self, timestamp: int) -> Offset | None:
        """The last indexed offset whose timestamp so far is below `timestamp`: every
        record up to it is older, so the answer lies after it."""
        index = bisect.bisect_left(self.timestamps, timestamp)
        return Offset(self.offsets[index - 1]) if index > 0 else None

    def maybe_add(self, timestamp: int, last_offset: Offset) -> bytes:
        """Record a new largest timestamp; b"" when it is not larger."""
        if timestamp <= self.max_timestamp:
            return b""
        relative = last_offset - self.base_offset
        assert 0 <= relative <= RELATIVE_OFFSET_MAX
        assert not self.offsets or last_offset > self.offsets[-1]
        self.timestamps.append(timestamp)
        self.offsets.append(last_offset)
        return TIME_ENTRY.pack(timestamp, relative)

    def encode(self) -> bytes:
        return b"".join(
            TIME_ENTRY.pack(ts, offset - self.base_offset)
            for ts, offset in zip(self.timestamps, self.offsets, strict=True)
        )


def decode_time_index(data: bytes, base_offset: Offset, end_offset: Offset) -> TimeIndex | None:
    """The time index in `data`, or None when it is malformed or points past the segment."""
    if len(data) % TIME_ENTRY.size:
        return None
    index = TimeIndex(base_offset)
    for timestamp, relative in TIME_ENTRY.iter_unpack(data):
        offset = Offset(base_offset + relative)
        if offset >= end_offset or (index.offsets and offset <= index.offsets[-1]):
            return None
        if index.maybe_add(timestamp, offset) == b"":
            return None
    return index
