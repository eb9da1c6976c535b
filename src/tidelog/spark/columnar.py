"""Kafka record batches (magic 2) decoded straight into the `tidelog` source's Arrow columns.

`tidelog.spark.direct` reads a range by Fetch and hands each answer's records here: the
records become columns with numpy, a few array operations per field for all the records of
an answer, and no Python object per record (librdkafka's consumer makes one per record,
and the source then reads each of its fields through a method call).

A record is Kafka's DefaultRecord: a varint length, attributes (one byte), timestamp delta
(varlong), offset delta, key and value (varint lengths, -1 for null, then the bytes) and
headers, all varints zigzag-encoded. Rules of this file:
- Pure: bytes in, Arrow arrays out; no IO, no clock.
- Every batch's framing and CRC-32C are checked (`check_batch`) before one of its records
  is decoded; a batch that fails, or a record whose fields do not lie inside its length,
  or records that do not fill their batch exactly, is CorruptBatch naming its offset:
  nothing of that answer becomes a row.
- A compressed batch's records are decompressed (`tidelog.protocol.codecs`: gzip, snappy,
  lz4, zstd, to at most BATCH_SIZE_MAX bytes) and decoded as the others; a stream that
  does not decompress is CorruptBatch too. An answer's walk decompresses batches until
  INFLATED_BYTES_MAX is reached (the first compressed batch always).
- `walk_batches` stops at a batch it does not decode (transactional, not magic 2, a codec
  Kafka does not have): `Walk.stopped`, and `next_offset` is where the caller reads on
  with librdkafka. Control batches are skipped, as consumers skip them. Only whole batches
  are walked: one cut at the answer's byte limit, or starting at or past `end`, ends the
  walk.
- Rows are the records with first <= offset < end, in offset order. A record must end
  exactly where its fields do: its headers are walked (a count, then each key, UTF-8, and
  value), one by one in Python for the records that have any.
- Record starts: a record's length comes first, so the records of a batch that share one
  length field (its bytes) lie at one stride; each such run is checked at once (a numpy
  compare of the length bytes at the stride), a record that differs starts the next run.
  After RUNS_MAX runs, or for the last few records, the rest is walked one by one.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tidelog.errors import CorruptBatch
from tidelog.protocol.codecs import GZIP, LZ4, SNAPPY, ZSTD, CodecError, decompress
from tidelog.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_SIZE_MAX,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    check_batch,
)
from tidelog.spark.kafka_io import HEADER_TYPE, TIMESTAMP_TYPE, arrow_schema

Positions = npt.NDArray[np.int64]

RECORD_BODY_MIN: Final = 6  # attributes, timestamp, offset, key, value, headers
RUNS_MAX: Final = 16
"""Runs of one stride checked with numpy per batch; records past them are walked one by one."""
RUN_MIN: Final = 8
"""Fewer records left in a batch are walked one by one (numpy's set-up costs more)."""
VARINT_BYTES_MAX: Final = 10
PADDING: Final = 16
"""Zero bytes after an answer's records, so a gather a few bytes past a record stays inside."""
VIEW_INLINE_MAX: Final = 12
"""An Arrow binary view holds a value of at most this many bytes inline."""
INFLATED_BYTES_MAX: Final = 128 * 1024 * 1024
"""Once an answer's decompressed records reach this, the walk ends before the next
compressed batch (which the next Fetch starts at): a bound on a task's memory, where
batches that each decompress to the most allowed could otherwise fill it."""
MAGIC_POSITION: Final = 16
_PREFIX: Final = struct.Struct(">qi")  # every batch format starts with its offset and length
CREATE_TIME: Final = 0  # Spark's Kafka source's timestampType values
LOG_APPEND_TIME: Final = 1
CODECS: Final = frozenset({0, GZIP, SNAPPY, LZ4, ZSTD})


class Span(NamedTuple):
    """The records of one batch: bytes [start, stop) of the answer followed by the
    decompressed records of its compressed batches (`Walk.inflated`), `records` of them."""

    start: int
    stop: int
    records: int
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool


class Walk(NamedTuple):
    """The batches of one answer to decode, and the offset to read next: after the last
    whole batch walked, or (`stopped`) the offset of a batch this file does not decode."""

    spans: list[Span]
    next_offset: int
    stopped: bool
    inflated: list[bytes]
    """The decompressed records of the compressed batches, in order."""


class Headers(NamedTuple):
    """The headers of the rows: how many each row has, then each header (in row order):
    its row, and its key and value as (position, length) in `Columns.data`."""

    counts: Positions
    rows: Positions
    key_at: Positions
    key_length: Positions
    value_at: Positions
    value_length: Positions

    def of(self, keep: npt.NDArray[np.bool_]) -> Headers:
        """The headers of the rows `keep` marks."""
        kept = keep[self.rows]
        return Headers(self.counts[keep], *(column[kept] for column in self[1:]))


class Columns(NamedTuple):
    """The rows of one answer, as numpy columns (keys and values as views of `data`)."""

    data: npt.NDArray[np.uint8]
    offsets: npt.NDArray[np.int64]
    timestamps_ms: npt.NDArray[np.int64]
    types: npt.NDArray[np.int32]
    key_at: Positions
    key_length: Positions
    value_at: Positions
    value_length: Positions
    headers: Headers

    def __len__(self) -> int:
        return len(self.offsets)


def walk_batches(records: bytes | bytearray, first: int, end: int) -> Walk:
    """The whole batches of `records` (one Fetch answer's) that hold offsets >= first and
    start below `end`. CorruptBatch for a batch whose framing or CRC does not check, or
    whose records do not decompress."""
    position, next_offset = 0, first
    spans: list[Span] = []
    inflated: list[bytes] = []
    inflated_end = len(records)  # where the next decompressed records go

    def stop(base_offset: int) -> Walk:
        return Walk(spans, max(next_offset, base_offset), stopped=True, inflated=inflated)

    while len(records) - position >= HEADER_SIZE:
        base_offset, batch_length = _PREFIX.unpack_from(records, position)
        if base_offset >= end:
            break
        if records[position + MAGIC_POSITION] != MAGIC_V2:
            return stop(base_offset)
        if LOG_OVERHEAD + batch_length > len(records) - position:
            break  # cut at the answer's byte limit
        header = check_batch(records, position)
        start, stop_at = position + HEADER_SIZE, position + header.size_bytes
        position = stop_at
        if header.next_offset <= next_offset:
            continue  # wholly below the range (the answer starts at a batch's base offset)
        if header.attributes & ATTR_CONTROL:
            next_offset = header.next_offset
            continue
        codec = header.attributes & ATTR_COMPRESSION_MASK
        if header.attributes & ATTR_TRANSACTIONAL or codec not in CODECS:
            return stop(header.base_offset)
        if codec:
            if inflated and inflated_end - len(records) >= INFLATED_BYTES_MAX:
                break  # enough for one answer: the next Fetch starts at this batch
            try:
                plain = decompress(codec, bytes(records[start:stop_at]), size_max=BATCH_SIZE_MAX)
            except CodecError as error:
                raise CorruptBatch(f"the batch at offset {header.base_offset}: {error}") from None
            inflated.append(plain)
            start, stop_at = inflated_end, inflated_end + len(plain)
            inflated_end = stop_at
        spans.append(
            Span(
                start,
                stop_at,
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                header.max_timestamp,
                bool(header.attributes & ATTR_TIMESTAMP_TYPE),
            )
        )
        next_offset = header.next_offset
    return Walk(spans, next_offset, stopped=False, inflated=inflated)


def decode(records: bytes | bytearray, walk: Walk, first: int, end: int) -> Columns:
    """The rows of `walk`'s spans (of `records`, then its decompressed records) with
    first <= offset < end. CorruptBatch for a record that does not decode."""
    if walk.inflated:
        records = b"".join([records, *walk.inflated])
    spans = walk.spans
    data = np.zeros(len(records) + PADDING, np.uint8)
    data[: len(records)] = np.frombuffer(records, np.uint8)
    starts = all_starts(records, data, spans)
    counts = [span.records for span in spans]
    lengths, width = varints(data, starts)
    record_end = starts + width + lengths
    at = starts + width + 1  # past the attributes
    timestamp_delta, width = _field(data, at, record_end, spans, starts)
    at += width
    offset_delta, width = _field(data, at, record_end, spans, starts)
    at += width
    key_length, width = _field(data, at, record_end, spans, starts)
    key_at = at + width
    at = key_at + np.maximum(key_length, 0)
    value_length, width = _field(data, at, record_end, spans, starts)
    value_at = at + width
    at = value_at + np.maximum(value_length, 0)
    # The headers' count takes at least one byte: the value ends before the record does.
    bad = (key_length < -1) | (value_length < -1) | (at >= record_end)
    if bad.any():
        _corrupt(spans, starts, int(np.argmax(bad)), "a key or value that does not fit")
    header_count, width = _field(data, at, record_end, spans, starts)
    headers = _headers(
        records, spans, starts, at=at + width, record_end=record_end, counts=header_count
    )
    offsets = np.repeat(np.array([s.base_offset for s in spans], np.int64), counts)
    offsets += offset_delta
    appended = np.repeat(np.array([s.log_append_time for s in spans], np.bool_), counts)
    created = np.repeat(np.array([s.base_timestamp for s in spans], np.int64), counts)
    latest = np.repeat(np.array([s.max_timestamp for s in spans], np.int64), counts)
    timestamps = np.where(appended, latest, created + timestamp_delta)
    types = np.where(appended, LOG_APPEND_TIME, CREATE_TIME).astype(np.int32)
    columns = Columns(
        data, offsets, timestamps, types, key_at, key_length, value_at, value_length, headers
    )
    keep = (offsets >= first) & (offsets < end)
    if keep.all():
        return columns
    return Columns(
        data,
        offsets[keep],
        timestamps[keep],
        types[keep],
        key_at[keep],
        key_length[keep],
        value_at[keep],
        value_length[keep],
        headers.of(keep),
    )


def _headers(
    records: bytes | bytearray,
    spans: Sequence[Span],
    starts: Positions,
    *,
    at: Positions,
    record_end: Positions,
    counts: Positions,
) -> Headers:
    """The headers of each record, whose count is at `at`: a record without any must end
    there; the others are walked one header at a time (a key of UTF-8, then a value or a
    null), and must end exactly at their record's end."""
    if (counts < 0).any():
        _corrupt(spans, starts, int(np.argmax(counts < 0)), "a negative count of headers")
    none = counts == 0
    loose = none & (at != record_end)
    if loose.any():
        _corrupt(spans, starts, int(np.argmax(loose)), "bytes after the record's fields")
    rows: list[int] = []
    key_at: list[int] = []
    key_length: list[int] = []
    value_at: list[int] = []
    value_length: list[int] = []
    for row in np.flatnonzero(~none).tolist():
        position, stop = int(at[row]), int(record_end[row])
        try:
            for _ in range(int(counts[row])):
                length, position = _varint(records, position, stop)
                if length < 0 or position + length > stop:
                    raise ValueError(f"a header key of {length} bytes")
                bytes(records[position : position + length]).decode()
                key_at.append(position)
                key_length.append(length)
                length, position = _varint(records, position + length, stop)
                if length < -1 or position + max(length, 0) > stop:
                    raise ValueError(f"a header value of {length} bytes")
                value_at.append(position)
                value_length.append(length)
                rows.append(row)
                position += max(length, 0)
            if position != stop:
                raise ValueError("bytes after the record's headers")
        except UnicodeDecodeError:
            _corrupt(spans, starts, row, "a header key that is not UTF-8")
        except ValueError as error:
            _corrupt(spans, starts, row, str(error))
    walked = (rows, key_at, key_length, value_at, value_length)
    return Headers(counts, *(np.array(column, np.int64) for column in walked))


def to_arrow(
    columns: Columns, topic: str, partition: int, *, include_headers: bool = False
) -> pa.RecordBatch:
    """The Spark source's columns of `columns`' rows (`headers` last when included)."""
    count = len(columns)
    data = pa.py_buffer(columns.data)
    if (columns.key_length < 0).all():
        keys = pa.nulls(count, pa.binary())
    else:
        keys = binary(columns.data, data, columns.key_at, columns.key_length)
    stamps = pa.array(columns.timestamps_ms, pa.int64())
    arrays = [
        keys,
        binary(columns.data, data, columns.value_at, columns.value_length),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(columns.offsets, pa.int64()),
        pc.multiply_checked(stamps, 1000).cast(TIMESTAMP_TYPE),
        pa.array(columns.types, pa.int32()),
    ]
    if include_headers:
        arrays.append(header_lists(columns, data))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def header_lists(columns: Columns, buffer: pa.Buffer) -> pa.Array:
    """Each row's headers: a list (empty when it has none) of (key, value) structs."""
    headers = columns.headers
    offsets = np.zeros(len(headers.counts) + 1, np.int32)
    np.cumsum(headers.counts, out=offsets[1:])
    keys = binary(columns.data, buffer, headers.key_at, headers.key_length).cast(pa.string())
    values = binary(columns.data, buffer, headers.value_at, headers.value_length)
    items = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=HEADER_TYPE)


def binary(
    data: npt.NDArray[np.uint8], buffer: pa.Buffer, at: Positions, lengths: Positions
) -> pa.Array:
    """A binary array of the values data[at:at+length] (null where length is -1): Arrow
    binary views of `buffer`, copied into one binary array by Arrow's cast."""
    count = len(at)
    sizes = np.maximum(lengths, 0).astype(np.int32)
    views = np.zeros((count, 16), np.uint8)
    words = views.view(np.int32)  # size, then the prefix (or inline bytes), buffer, offset
    words[:, 0] = sizes
    long = sizes > VIEW_INLINE_MAX
    if long.any():
        where = at[long]
        views[long, 4:8] = data[where[:, None] + np.arange(4)]
        words[long, 3] = where
    short = ~long
    if short.any():
        inline = data[at[short][:, None] + np.arange(VIEW_INLINE_MAX)]
        inline[np.arange(VIEW_INLINE_MAX) >= sizes[short][:, None]] = 0
        views[short, 4:16] = inline
    valid = lengths >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(pa.binary_view(), count, [validity, pa.py_buffer(views), buffer])
    return array.cast(pa.binary())


def all_starts(
    records: bytes | bytearray, data: npt.NDArray[np.uint8], spans: Sequence[Span]
) -> Positions:
    """Where each record of `spans` starts, in order. The records of small batches are
    walked one by one into one list (numpy's set-up would cost more than the walk)."""
    pieces: list[Positions] = []
    walked: list[int] = []
    for span in spans:
        if span.records < RUN_MIN:
            walked += _walk_starts(records, span.start, span, span.records)
            continue
        if walked:
            pieces.append(np.array(walked, np.int64))
            walked = []
        pieces.append(record_starts(records, data, span))
    if walked:
        pieces.append(np.array(walked, np.int64))
    return np.concatenate(pieces) if pieces else _none()


def record_starts(records: bytes | bytearray, data: npt.NDArray[np.uint8], span: Span) -> Positions:
    """Where each record of `span` starts (module rules: runs of one stride)."""
    parts: list[Positions] = []
    position, done, runs = span.start, 0, 0
    while done < span.records:
        left = span.records - done
        if left < RUN_MIN or runs >= RUNS_MAX:
            parts.append(np.array(_walk_starts(records, position, span, left), np.int64))
            position = span.stop
            break
        length, body = _record_length(records, position, span)
        stride = body - position + length
        fits = min(left, (span.stop - position) // stride)
        if fits == 0:
            raise CorruptBatch(_where(span, done, "a record longer than its batch"))
        candidates = position + stride * np.arange(fits, dtype=np.int64)
        same = np.ones(fits, np.bool_)
        for i, byte in enumerate(records[position:body]):
            same &= data[candidates + i] == byte
        run = fits if same.all() else int(np.argmin(same))
        parts.append(candidates[:run])
        position += stride * run
        done += run
        runs += 1
    if position != span.stop:
        raise CorruptBatch(_where(span, span.records, "records that do not fill their batch"))
    return np.concatenate(parts) if parts else _none()


def _walk_starts(records: bytes | bytearray, position: int, span: Span, count: int) -> list[int]:
    starts = []
    for _ in range(count):
        starts.append(position)
        length, body = _record_length(records, position, span)
        position = body + length
    if position != span.stop:
        raise CorruptBatch(_where(span, span.records, "records that do not fill their batch"))
    return starts


def _record_length(records: bytes | bytearray, position: int, span: Span) -> tuple[int, int]:
    """The length of the record at `position` and where its body starts."""
    try:
        length, at = _varint(records, position, span.stop)
    except ValueError as error:
        raise CorruptBatch(_where(span, None, f"{error} at byte {position}")) from None
    if length < RECORD_BODY_MIN or at + length > span.stop:
        raise CorruptBatch(_where(span, None, f"a record of {length} bytes at byte {position}"))
    return length, at


def _varint(records: bytes | bytearray, position: int, stop: int) -> tuple[int, int]:
    """The zigzag varint (32 bits at most) at `position`, before `stop`, and the position
    after it; ValueError when it does not end there."""
    raw, shift = 0, 0
    while True:
        if position >= stop or shift > 28:
            raise ValueError("a varint that does not end")
        byte = records[position]
        raw |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def varints(data: npt.NDArray[np.uint8], at: Positions) -> tuple[Positions, Positions]:
    """The zigzag varints at `at` (decoded) and how many bytes each takes; a varint that
    never ends within VARINT_BYTES_MAX bytes gives width VARINT_BYTES_MAX + 1."""
    first = data[at]
    more = first >= 0x80
    if not more.any():
        raw = first.astype(np.int64)
        return (raw >> 1) ^ -(raw & 1), np.ones(len(at), np.int64)
    raw = (first & 0x7F).astype(np.int64)
    width = np.ones(len(at), np.int64)
    for i in range(1, VARINT_BYTES_MAX + 1):
        which = np.flatnonzero(more)
        if which.size == 0:
            break
        width[which] += 1
        if i == VARINT_BYTES_MAX:
            break
        byte = data[at[which] + i]
        raw[which] |= (byte & 0x7F).astype(np.int64) << (7 * i)
        more[which] = byte >= 0x80
    return (raw >> 1) ^ -(raw & 1), width


def _field(
    data: npt.NDArray[np.uint8],
    at: Positions,
    record_end: Positions,
    spans: Sequence[Span],
    starts: Positions,
) -> tuple[Positions, Positions]:
    values, width = varints(data, at)
    outside = (at + width > record_end) | (width > VARINT_BYTES_MAX)
    if outside.any():
        _corrupt(spans, starts, int(np.argmax(outside)), "a field past the record's end")
    return values, width


def _corrupt(spans: Sequence[Span], starts: Positions, row: int, reason: str) -> None:
    """CorruptBatch for the record of `row` (an index into `starts`)."""
    position = int(starts[row])
    span = next(s for s in spans if s.start <= position < s.stop)
    raise CorruptBatch(_where(span, None, f"{reason} (record at byte {position})"))


def _where(span: Span, index: int | None, what: str) -> str:
    record = "" if index is None else f", record {index}"
    return f"the batch at offset {span.base_offset}{record}: {what}"


def _none() -> Positions:
    return np.zeros(0, np.int64)
