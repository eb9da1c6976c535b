"""Retention: which whole segments a log may delete from its start (Kafka's
`deleteRetentionSizeBreachedSegments` and `deleteRetentionMsBreachedSegments`).

Rules of this file:
- Only whole segments go, oldest first, never the active one and never one holding an
  offset at or above the HWM.
- By size: a segment goes while the log without it still holds `retention_bytes`. By age:
  a segment goes when its largest timestamp is older than `retention_ms` at `wall_ms` (the
  time of day, as record timestamps are).
- This file only decides; `DiskStorage.apply_retention` moves the log start (checkpoints
  first, then deletes). A compacting cleaner (cleanup.policy=compact) would be a second
  policy beside this one, choosing segments to rewrite instead of delete.
"""

from __future__ import annotations

from tidelog.types import Offset
from tidelog.wal.config import WalConfig
from tidelog.wal.segments import LogSegments


def segments_past_retention(
    segments: LogSegments, config: WalConfig, *, wall_ms: int, hwm: Offset
) -> int:
    """How many segments, from the oldest, retention deletes now."""
    total = segments.size_bytes()
    count = 0
    retention_bytes, retention_ms = config.retention_bytes, config.retention_ms
    for number in range(len(segments) - 1):
        segment = segments[number]
        by_size = retention_bytes is not None and total - segment.size_bytes >= retention_bytes
        by_age = retention_ms is not None and wall_ms - segment.max_timestamp > retention_ms
        if segment.end_offset > hwm or not (by_size or by_age):
            break
        total -= segment.size_bytes
        count += 1
    return count
