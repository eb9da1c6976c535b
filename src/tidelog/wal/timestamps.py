"""Timestamp search over a log's segments: ListOffsets by time and MAX_TIMESTAMP.

Rules of this file:
- Control batches (a new leader's) never match: a segment whose only later timestamps are
  theirs is passed over.
- A segment or batch whose max timestamp cannot match (or beat the best found so far) is
  passed over by its header; a batch that may match is read whole and its CRC checked.
- Nothing below the log start is answered: a batch holding the log start answers with
  offsets at or above it.
"""

from __future__ import annotations

from tidelog.records import NO_TIMESTAMP
from tidelog.types import Offset
from tidelog.wal.kafka_records import DefaultRecordBatch
from tidelog.wal.local_log import LocalLog
from tidelog.wal.segment import ChunkReader, Segment, scan_batches


def offset_for_timestamp(
    log: LocalLog, timestamp: int, *, log_start_offset: Offset
) -> tuple[Offset, int] | None:
    """(offset, timestamp) of the first data record whose timestamp is >= `timestamp`,
    or None."""
    for segment in log.segments:
        if segment.max_timestamp >= timestamp:
            found = _offset_for_timestamp_in(log, segment, timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def _offset_for_timestamp_in(
    log: LocalLog, segment: Segment, timestamp: int, log_start_offset: Offset
) -> tuple[Offset, int] | None:
    before = segment.time_index.offset_before(timestamp)
    start = segment.base_offset if before is None else Offset(before + 1)
    reader = ChunkReader(log.fs, segment.log_path, segment.size_bytes)
    for position, header in scan_batches(
        log.fs,
        segment.log_path,
        segment.index.lookup(start),
        segment.size_bytes,
        verify=False,
    ):
        if header.next_offset <= start or header.is_control:
            continue
        if NO_TIMESTAMP < header.max_timestamp < timestamp:
            continue  # (a header without a max timestamp is read record by record)
        batch = log.checked(segment, reader, position, header)
        found = first_record_at(batch, timestamp)
        if found is not None:
            return Offset(max(found[0], log_start_offset)), found[1]
    return None


def max_timestamp_record(
    log: LocalLog, below: Offset, *, log_start_offset: Offset
) -> tuple[Offset, int] | None:
    """(offset, timestamp) of the first data record below `below` with the largest
    timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734), or None when there is none."""
    best: tuple[Offset, int] | None = None
    for segment in log.segments:
        if segment.base_offset >= below:
            break
        if best is not None and segment.max_timestamp <= best[1]:
            continue
        reader = ChunkReader(log.fs, segment.log_path, segment.size_bytes)
        for position, header in scan_batches(
            log.fs,
            segment.log_path,
            segment.index.lookup(segment.base_offset),
            segment.size_bytes,
            verify=False,
        ):
            if header.base_offset >= below:
                break
            if header.is_control or header.next_offset <= log_start_offset:
                continue
            if best is not None and NO_TIMESTAMP < header.max_timestamp <= best[1]:
                continue
            batch = log.checked(segment, reader, position, header)
            for record in DefaultRecordBatch(batch):
                offset = int(record.offset)
                if offset >= below:
                    break
                if offset >= log_start_offset and (best is None or record.timestamp > best[1]):
                    best = Offset(offset), int(record.timestamp)
    return best


def first_record_at(batch: bytes, timestamp: int) -> tuple[Offset, int] | None:
    """(offset, timestamp) of the first record in `batch` with a timestamp >= `timestamp`."""
    for record in DefaultRecordBatch(batch):
        if record.timestamp >= timestamp:
            return Offset(record.offset), int(record.timestamp)
    return None
