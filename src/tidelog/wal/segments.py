"""The ordered set of one log's segments (Kafka's LogSegments), and their names on disk.

Rules of this file:
- The segments are in base offset order, each starting where the one before it ends; the
  last is the active one, the only one written. A log always holds at least one segment.
- A segment's file is named by its base offset, zero-padded to OFFSET_DIGITS (segment.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from tidelog.types import Offset
from tidelog.wal.fs import FileSystem
from tidelog.wal.segment import LOG_SUFFIX, OFFSET_DIGITS, Segment


class LogSegments:
    """The segments of one log, oldest first; found by the offsets they hold."""

    def __init__(self, segments: list[Segment] | None = None) -> None:
        self._segments: list[Segment] = segments or []

    def __iter__(self) -> Iterator[Segment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    def __getitem__(self, index: int) -> Segment:
        return self._segments[index]

    @property
    def active(self) -> Segment:
        """The last segment: the one appends go to."""
        return self._segments[-1]

    @property
    def first(self) -> Segment:
        return self._segments[0]

    @property
    def log_end_offset(self) -> Offset:
        return self._segments[-1].end_offset

    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    def paths(self) -> list[str]:
        return [segment.log_path for segment in self._segments]

    def index_holding(self, offset: Offset) -> int:
        """The index of the segment holding `offset` (the last one whose base is at most
        `offset`); `offset` is at least the first segment's base."""
        return bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1

    def holding(self, offset: Offset) -> Segment:
        """The segment holding `offset`."""
        return self._segments[self.index_holding(offset)]

    def index_of_path(self, log_path: str) -> int | None:
        for number, segment in enumerate(self._segments):
            if segment.log_path == log_path:
                return number
        return None

    # --- changes ----------------------------------------------------------------------
    def add(self, segment: Segment) -> None:
        """Add `segment` after the last one."""
        self._segments.append(segment)

    def remove_after(self, index: int) -> list[Segment]:
        """Remove the segments after `index`; those removed."""
        removed = self._segments[index + 1 :]
        del self._segments[index + 1 :]
        return removed

    def remove_below(self, offset: Offset) -> list[Segment]:
        """Remove the segments that end at or below `offset`, never the active one; those
        removed."""
        kept = 0
        while kept < len(self._segments) - 1 and self._segments[kept].end_offset <= offset:
            kept += 1
        removed, self._segments = self._segments[:kept], self._segments[kept:]
        return removed

    def replace(self, segments: list[Segment]) -> list[Segment]:
        """Hold `segments` instead; those held before."""
        old, self._segments = self._segments, segments
        return old


def is_segment_name(name: str) -> bool:
    stem = name[: -len(LOG_SUFFIX)]
    return name.endswith(LOG_SUFFIX) and len(stem) == OFFSET_DIGITS and stem.isdigit()


def bases_on_disk(fs: FileSystem, directory: str) -> list[Offset]:
    """The base offsets of the segment files in `directory`, in order."""
    names = fs.listdir(directory)
    return sorted(Offset(int(name[:OFFSET_DIGITS])) for name in names if is_segment_name(name))
