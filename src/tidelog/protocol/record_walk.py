"""Walking the records of a Kafka record batch (magic 2) in place: the hot path of Produce.

Each record is Kafka's DefaultRecord: a varint length, then attributes (one byte),
timestamp delta (varlong), offset delta (varint), key and value (a varint length, negative
for null, then the bytes) and headers (a count, then each key and value), all varints
zigzag-encoded; the length must be exactly what the fields take. Rules of this file:
- `walk_records` checks any records, one at a time, creating no object per record;
  `walk_uniform_records` checks records that all share the first one's layout (attributes
  0, the same key and value lengths, no headers, one-byte timestamp deltas, then perhaps
  two-byte ones >= 0, as rising timestamps have them) a column of bytes at a time (slices
  with a step, in C), and answers None for any other records, which `walk_records` then
  checks: it never accepts records `walk_records` refuses, and returns what it would.
- Both require attributes 0 (unused in magic 2: every client writes 0) and offset deltas
  0..n-1, and return the largest timestamp delta.
"""

from __future__ import annotations

import itertools
from typing import Final, NamedTuple

from tidelog.records import uvarint

RECORD_SIZE_MIN: Final = 7  # length, attributes, timestamp, offset, key, value, headers
RECORD_BODY_MIN: Final = RECORD_SIZE_MIN - 1
_TIMESTAMP_DELTA_NONE: Final = -(2**64)  # below every 64-bit delta


class MalformedRecord(ValueError):
    """A record of a batch that does not decode; `index` is its place in the batch."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"record {index}: {reason}")
        self.index = index
        self.reason = reason


class _Malformed(ValueError):
    """A field of the record being walked that does not decode."""


def walk_records(buf: bytes, position: int, count: int) -> int:
    """Check that buf[position:] holds exactly `count` records whose offset deltas run
    0..count-1; return their largest timestamp delta. Raises MalformedRecord.

    Each record is Kafka's DefaultRecord: length, attributes, timestamp delta, offset
    delta, key, value (varint lengths, negative for null) and headers; the length must be
    exactly what its fields take. This is the hot path of every Produce: one pass, no
    object per record, and varints of one or two bytes (lengths below 8 KiB, offset deltas
    below 8192) decoded inline; longer ones and headers go to the helpers.
    """
    end = len(buf)
    largest = _TIMESTAMP_DELTA_NONE
    index = 0
    try:
        for index in range(count):
            b = buf[position]
            if b < 0x80:
                size, position = b, position + 1
            elif buf[position + 1] < 0x80:
                size, position = (b & 0x7F) | buf[position + 1] << 7, position + 2
            else:
                size, position = _uvarint(buf, position, 32)
            body_start, body_end = position, position + (size >> 1)
            if size & 1 or size >> 1 < RECORD_BODY_MIN or body_end > end:
                raise _Malformed(_size_reason(size, end - position))
            if buf[position]:
                raise _Malformed(f"record attributes {buf[position]}, expected 0")
            b = buf[position + 1]  # the timestamp delta
            if b < 0x80:
                delta, position = (b >> 1) ^ -(b & 1), position + 2
            else:
                z, position = _uvarint(buf, position + 1, 64)
                delta = (z >> 1) ^ -(z & 1)
            if delta > largest:  # noqa: PLR1730 - a comparison costs less than a call
                largest = delta
            b = buf[position]
            if b < 0x80:
                z, position = b, position + 1
            elif buf[position + 1] < 0x80:
                z, position = (b & 0x7F) | buf[position + 1] << 7, position + 2
            else:
                z, position = _uvarint(buf, position, 32)
            if z != index << 1:
                raise _Malformed(f"offset delta {(z >> 1) ^ -(z & 1)}, expected {index}")
            for _field in (0, 1):  # the key, then the value
                b = buf[position]
                if b < 0x80:
                    position += 1 if b & 1 else 1 + (b >> 1)
                elif buf[position + 1] < 0x80:
                    z = (b & 0x7F) | buf[position + 1] << 7
                    position += 2 if z & 1 else 2 + (z >> 1)
                else:
                    position = _skip_bytes(buf, position)
            position = position + 1 if buf[position] == 0 else _skip_headers(buf, position)
            if position != body_end:
                raise _Malformed(
                    f"Invalid record size: expected to read {size >> 1} bytes in record "
                    f"payload, but instead read {position - body_start}"
                )
    except IndexError:
        raise MalformedRecord(
            index, "Incorrect declared batch size, premature EOF reached"
        ) from None
    except _Malformed as error:
        raise MalformedRecord(index, str(error)) from None
    if position != end:
        raise MalformedRecord(
            count, "Incorrect declared batch size, records still remaining in file"
        )
    return largest


def _size_reason(size: int, remaining: int) -> str:
    value = (size >> 1) ^ -(size & 1)
    if value < RECORD_BODY_MIN:
        return f"Invalid record size {value}: a record takes at least {RECORD_BODY_MIN} bytes"
    return (
        f"Invalid record size: expected {value} bytes in record payload, but instead the "
        f"buffer has only {remaining} remaining bytes."
    )


def _uvarint(buf: bytes, position: int, bits: int) -> tuple[int, int]:
    """The raw (zigzag-encoded) varint of at most `bits` bits at `position`, and the
    position after it."""
    raw, shift = 0, 0
    while True:
        b = buf[position]
        position += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= bits:
            raise _Malformed(f"Varint is too long: more than {bits} bits")
    if raw >> bits:
        raise _Malformed(f"Varint does not fit in {bits} bits")
    return raw, position


def _varint(buf: bytes, position: int) -> tuple[int, int]:
    """The signed 32-bit varint at `position`, and the position after it."""
    raw, position = _uvarint(buf, position, 32)
    return (raw >> 1) ^ -(raw & 1), position


def _skip_bytes(buf: bytes, position: int) -> int:
    """The position after a key or value: its varint length, then that many bytes (none
    for a negative length: a null)."""
    length, position = _varint(buf, position)
    return position + max(length, 0)


def _skip_headers(buf: bytes, position: int) -> int:
    """The position after a record's headers: a count, then each header's key (a length
    >= 0) and value (a negative length is a null)."""
    count, position = _varint(buf, position)
    if count < 0:
        raise _Malformed(f"Found invalid number of record headers {count}")
    if count > len(buf) - position:
        raise _Malformed(
            f"Found invalid number of record headers. {count} is larger than the remaining "
            "size of the buffer"
        )
    for _ in range(count):
        key_length, position = _varint(buf, position)
        if key_length < 0:
            raise _Malformed(f"Invalid negative header key size {key_length}")
        try:
            buf[position : position + key_length].decode()
        except UnicodeDecodeError:
            raise _Malformed("a header key that is not UTF-8") from None
        position = _skip_bytes(buf, position + key_length)
    return position


# ---------------------------------------------------------------------- uniform records
UNIFORM_COUNT_MAX: Final = 1 << 17
"""The most records `walk_uniform_records` checks by columns (larger batches are walked)."""
UNIFORM_COUNT_MIN: Final = 16
"""Fewer records are walked one by one: the columns' set-up costs ~30 us, the walk of one
record ~1 us (even at 16 records the two take about as long)."""

# Offset deltas take 1, 2 or 3 varint bytes: (width, first index, end index).
_OFFSET_WIDTHS: Final = ((1, 0, 64), (2, 64, 8192), (3, 8192, UNIFORM_COUNT_MAX))
_LOW_BYTES: Final = bytes(range(0x80, 0x100, 2))  # the low byte of zigzag(i), i = 0..63 (mod 64)


def _offset_columns() -> dict[int, tuple[bytes, ...]]:
    """For each width, the bytes of the offset deltas of its indices, byte by byte: the
    varint of zigzag(i) = 2i is 7 bits of 2i per byte, continuation bit on all but the last."""
    wide = UNIFORM_COUNT_MAX - 8192
    return {
        1: (bytes(range(0, 0x80, 2)),),
        2: (_LOW_BYTES * 127, b"".join(bytes([h]) * 64 for h in range(1, 128))),
        3: (
            _LOW_BYTES * (wide // 64),
            b"".join(bytes([0x80 | h]) * 64 for h in range(128)) * (wide // 8192),
            b"".join(bytes([h]) * 8192 for h in range(1, UNIFORM_COUNT_MAX // 8192)),
        ),
    }


_OFFSET_COLUMNS: Final = _offset_columns()
# A one-byte zigzag varint v (below 0x80) holds (v >> 1) ^ -(v & 1), -64..63: this maps it
# to that value + 64, so the largest byte is the largest delta.
_ZIGZAG_ORDER: Final = bytes((((v >> 1) ^ -(v & 1)) + 64) if v < 0x80 else 0 for v in range(256))
# _ABOVE[top] marks (0x80) each byte that is no one-byte varint or holds more than top - 64.
_ABOVE: Final = tuple(
    bytes(0x80 if v >= 0x80 or _ZIGZAG_ORDER[v] > top else 0 for v in range(256))
    for top in range(0x80)
)
_TAIL_RECORDS: Final = 8
# Marks (0x80) each low byte of a two-byte varint that lacks the continuation bit or holds
# an odd zigzag value (a negative delta).
_NOT_WIDE_EVEN: Final = bytes(0 if v >= 0x80 and not v & 1 else 0x80 for v in range(256))


class _Layout(NamedTuple):
    """The fields of a record that are the same in every record of a uniform batch."""

    key_field: bytes  # the key's length, as written
    key_size: int
    value_field: bytes
    value_size: int


class _Run(NamedTuple):
    """Records first..end-1 of a batch, whose offset and timestamp deltas take the same
    number of bytes, so that each record is `stride` bytes long."""

    first: int
    end: int
    offset_width: int
    timestamp_width: int
    size_field: bytes  # the records' length, as written
    stride: int


def walk_uniform_records(buf: bytes, position: int, count: int) -> int | None:
    """The largest timestamp delta of the `count` records at buf[position:], when they all
    have the first record's layout and are valid; else None (then `walk_records` decides).

    The records of one run have one size, so each field is a column of bytes at a fixed
    stride: a constant field is checked with one count per byte, the offset deltas against
    precomputed columns, the timestamp deltas with a translate (one-byte deltas) or a max
    (two-byte ones, which must then be >= 0, as rising timestamps are).
    """
    layout = _first_layout(buf, position)
    if layout is None or count > UNIFORM_COUNT_MAX:
        return None
    runs = _runs(layout, count, len(buf) - position)
    if runs is None:
        return None
    largest = _TIMESTAMP_DELTA_NONE
    for run in runs:
        delta = _check_run(buf, position, run, layout)
        if delta is None:
            return None
        largest = max(largest, delta)
        position += (run.end - run.first) * run.stride
    return largest


def _runs(layout: _Layout, count: int, size: int) -> list[_Run] | None:
    """The runs of `count` records of `layout` that take `size` bytes: the first records
    with one-byte timestamp deltas, the others (if any) with two-byte ones, as a batch of
    rising timestamps has them; None when no such runs take `size` bytes.

    Each two-byte delta makes its record longer, so the size falls as the number of
    one-byte deltas rises: a binary search finds that number, all of them tried first."""
    low, high = 0, count  # the number of records with one-byte timestamp deltas
    narrow = count
    while low <= high:
        runs = _runs_of(layout, count, narrow_count=narrow)
        taken = sum((run.end - run.first) * run.stride for run in runs)
        if taken == size:
            return runs
        if taken > size:
            low = narrow + 1
        else:
            high = narrow - 1
        narrow = (low + high) // 2
    return None


def _runs_of(layout: _Layout, count: int, *, narrow_count: int) -> list[_Run]:
    bounds = sorted({0, count, *(b for b in (64, 8192, narrow_count) if 0 < b < count)})
    runs = []
    for first, end in itertools.pairwise(bounds):
        offset_width = next(w for w, low, high in _OFFSET_WIDTHS if low <= first < high)
        timestamp_width = 1 if first < narrow_count else 2
        body = 2 + timestamp_width + offset_width + len(layout.key_field) + layout.key_size
        body += len(layout.value_field) + layout.value_size  # and attributes and headers
        size_field = uvarint(body << 1)
        runs.append(
            _Run(first, end, offset_width, timestamp_width, size_field, len(size_field) + body)
        )
    return runs


def _first_layout(buf: bytes, position: int) -> _Layout | None:
    """The layout of the record at `position` when the column check covers it: attributes
    0, a one-byte timestamp delta, offset delta 0, no headers, a length that fits."""
    try:
        size, body = _uvarint(buf, position, 32)
        if size & 1 or buf[body] != 0 or buf[body + 1] >= 0x80 or buf[body + 2] != 0:
            return None
        key_at = body + 3
        key_length, value_at = _varint(buf, key_at)
        value_length, headers_at = _varint(buf, value_at + max(key_length, 0))
        headers_at += max(value_length, 0)
        if buf[headers_at] != 0 or headers_at + 1 != body + (size >> 1):
            return None
    except (IndexError, _Malformed):
        return None
    value_field_end = headers_at - max(value_length, 0)
    return _Layout(
        bytes(buf[key_at:value_at]),
        max(key_length, 0),
        bytes(buf[value_at + max(key_length, 0) : value_field_end]),
        max(value_length, 0),
    )


def _check_run(buf: bytes, position: int, run: _Run, layout: _Layout) -> int | None:
    """The largest timestamp delta of `run`, whose first record is at `position`, or None.

    Each column is a slice of `buf` with a step (a C loop over bytes, unlike a strided
    memoryview)."""
    end = position + (run.end - run.first) * run.stride
    stride = run.stride
    timestamp_at = len(run.size_field) + 1
    offset_at = timestamp_at + run.timestamp_width
    key_at = offset_at + run.offset_width
    value_at = key_at + len(layout.key_field) + layout.key_size
    constants = [
        *enumerate(run.size_field),
        (timestamp_at - 1, 0),  # attributes
        *((key_at + i, b) for i, b in enumerate(layout.key_field)),
        *((value_at + i, b) for i, b in enumerate(layout.value_field)),
        (stride - 1, 0),  # no headers
    ]
    for offset, byte in constants:
        if buf[position + offset : end : stride].count(byte) != run.end - run.first:
            return None
    width_first = next(low for w, low, _ in _OFFSET_WIDTHS if w == run.offset_width)
    for i, column in enumerate(_OFFSET_COLUMNS[run.offset_width]):
        expected = column[run.first - width_first : run.end - width_first]
        if buf[position + offset_at + i : end : stride] != expected:
            return None
    low = buf[position + timestamp_at : end : stride]
    if run.timestamp_width == 1:
        return _largest_timestamp_delta(low)
    return _largest_wide_timestamp_delta(low, buf[position + timestamp_at + 1 : end : stride])


def _largest_wide_timestamp_delta(low: bytes, high: bytes) -> int | None:
    """The largest of two-byte zigzag timestamp deltas (their low and their high bytes),
    when each is a two-byte varint of a delta >= 0; else None."""
    if not high.isascii() or not low.translate(_NOT_WIDE_EVEN).isascii():
        return None
    # The low bytes all carry the continuation bit: (high, low) orders as the varints do.
    top_high, top_low = max(zip(high, low, strict=True))
    return ((top_low & 0x7F) | top_high << 7) >> 1


def _largest_timestamp_delta(timestamps: bytes) -> int | None:
    """The largest of one-byte zigzag timestamp deltas, or None when one takes more bytes.

    The last records usually hold the latest timestamps: their largest is taken as the
    candidate, and one translate and one isascii (in C) show that no byte exceeds it, or
    is no one-byte varint; max() over every byte is the rare fallback."""
    top = max(timestamps[-_TAIL_RECORDS:].translate(_ZIGZAG_ORDER))
    if timestamps.translate(_ABOVE[top]).isascii():
        return top - 64
    if not timestamps.isascii():
        return None
    return max(timestamps.translate(_ZIGZAG_ORDER)) - 64
