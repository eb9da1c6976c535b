"""Record batches built by hand, good and hostile, for the tests of Produce validation.

`record()` encodes one Kafka DefaultRecord with any field, even a wrong one; `batch()` puts
records (or any bytes) behind a v2 header with any header field and a valid CRC-32C unless
told otherwise, compressing them with the codec asked for. `HOSTILE` is the catalogue of
batches a Produce must refuse, each with Kafka's error code and a fragment of the reason:
the unit tests run it against the validation, the live tests against a real broker.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import lz4.frame
import snappy
import zstandard
from crc32c import crc32c

from tidelog.protocol.codecs import GZIP, LZ4, SNAPPY, ZSTD
from tidelog.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
)

TIMESTAMP_BASE: Final = 1_700_000_000_000
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_CRC: Final = struct.Struct(">I")
_CRC_POSITION: Final = 17


def varint(value: int) -> bytes:
    """Kafka's zigzag varint of `value` (any size: a test may need one too long)."""
    zigzag = (value << 1) ^ (value >> 70)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(
    offset_delta: int,
    value: bytes | None = b"value",
    *,
    key: bytes | None = None,
    timestamp_delta: int = 0,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    length_change: int = 0,
) -> bytes:
    """One record; `length_change` makes its length field lie by that much."""
    body = (
        b"\x00"
        + varint(timestamp_delta)
        + varint(offset_delta)
        + _field(key)
        + _field(value)
        + varint(len(headers))
        + b"".join(varint(len(k)) + k + _field(v) for k, v in headers)
    )
    return varint(len(body) + length_change) + body


def records(count: int, value: bytes = b"value") -> list[bytes]:
    """`count` good records, offset deltas 0..count-1, timestamps one ms apart."""
    return [record(i, value, timestamp_delta=i) for i in range(count)]


def compress(codec: int, data: bytes) -> bytes:
    """`data` compressed as Kafka's clients compress a batch's records."""
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        out: bytes = snappy.compress(data)  # plain snappy, as librdkafka writes it
        return out
    if codec == LZ4:
        framed: bytes = lz4.frame.compress(data)
        return framed
    assert codec == ZSTD
    return zstandard.ZstdCompressor().compress(data)


def batch(
    body: Sequence[bytes] | bytes,
    *,
    count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    codec: int = 0,
    base_offset: int = 0,
    base_timestamp: int = TIMESTAMP_BASE,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = MAGIC_V2,
    crc_change: int = 0,
) -> bytes:
    """A v2 batch of `body` (records, or raw bytes as they are). Unless given: the count
    is the number of records, lastOffsetDelta count - 1, maxTimestamp the base timestamp
    plus the number of records less one (as `records()` makes them), the CRC right."""
    raw = body if isinstance(body, bytes) else b"".join(body)
    n = 0 if isinstance(body, bytes) else len(body)
    count = n if count is None else count
    last = count - 1 if last_offset_delta is None else last_offset_delta
    max_ts = base_timestamp + max(n - 1, 0) if max_timestamp is None else max_timestamp
    payload = compress(codec, raw) if codec else raw
    out = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            -1,
            magic,
            0,
            attributes | codec,
            last,
            base_timestamp,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    out += payload
    crc = (crc32c(bytes(out[CRC_START:])) + crc_change) & 0xFFFFFFFF
    _CRC.pack_into(out, _CRC_POSITION, crc)
    return bytes(out)


class Hostile(NamedTuple):
    """A batch a Produce must refuse: Kafka's error and a fragment of the reason."""

    name: str
    records: bytes
    code: str
    reason: str
    api_version: int = 8
    transactional_id: str | None = None


GOOD: Final = records(3)


def _hostile() -> list[Hostile]:
    three = GOOD
    return [
        Hostile("no batch", b"", "INVALID_RECORD", "at least one record batch"),
        Hostile("count 3, lastOffsetDelta 0", batch(three, last_offset_delta=0),
                "INVALID_RECORD", "Inconsistent batch offset range [0, 0] and count of records 3"),
        Hostile("lastOffsetDelta 2^31-1", batch(three, last_offset_delta=2**31 - 1),
                "INVALID_RECORD", "Inconsistent batch offset range"),
        Hostile("lastOffsetDelta -1", batch(three, last_offset_delta=-1),
                "INVALID_RECORD", "invalid offset range"),
        Hostile("count 0", batch(three, count=0, last_offset_delta=2),
                "INVALID_RECORD", "Invalid reported count for record batch: 0"),
        Hostile("count 2^31-1", batch(three, count=2**31 - 1),
                "INVALID_RECORD", "2147483647 records cannot fit"),
        Hostile("garbage records", batch(b"\xde\xad\xbe\xef" * 8, count=3),
                "INVALID_RECORD", "Record 0 of the batch"),
        Hostile("codec 7", batch(three, attributes=7), "INVALID_RECORD",
                "Unknown compression type id: 7"),
        Hostile("codec 5", batch(three, attributes=5), "INVALID_RECORD",
                "Unknown compression type id: 5"),
        Hostile("control bit", batch(three, attributes=ATTR_CONTROL), "INVALID_RECORD",
                "Clients are not allowed to write control records"),
        Hostile("transactional bit", batch(three, attributes=ATTR_TRANSACTIONAL,
                producer_id=9, producer_epoch=0, base_sequence=0),
                "INVALID_PRODUCER_ID_MAPPING", "no transaction coordinator",
                transactional_id="tx"),
        Hostile("offset deltas 1..3", batch([record(i + 1) for i in range(3)]),
                "INVALID_RECORD", "offset delta 1, expected 0"),
        Hostile("offset deltas 0,2,1", batch([record(0), record(2), record(1)]),
                "INVALID_RECORD", "Record 1 of the batch in topic partition"),
        Hostile("a record longer than the batch", batch([record(0, length_change=50)]),
                "INVALID_RECORD", "but instead the buffer has only"),
        Hostile("a record length that lies", batch([record(0, length_change=1), record(1)]),
                "INVALID_RECORD", "Invalid record size: expected to read"),
        Hostile("a byte after the records", batch(b"".join(three) + b"\x00", count=3),
                "INVALID_RECORD", "records still remaining"),
        Hostile("a negative header count", batch([three[0][:-1] + varint(-2)], count=1),
                "INVALID_RECORD", "invalid number of record headers -2"),
        Hostile("a negative header key", batch([record(0, headers=[(b"k", b"v")])[:-4]
                + varint(-3) + b"k\x02v"], count=1), "INVALID_RECORD",
                "Invalid negative header key size -3"),
        Hostile("a varint too long", batch([b"\x0e\x00" + b"\xff" * 11 + b"\x00"], count=1),
                "INVALID_RECORD", "Varint is too long"),
        Hostile("record attributes 0x80", batch([three[0][:1] + b"\x80" + three[0][2:]], count=1),
                "INVALID_RECORD", "record attributes 128, expected 0"),
        Hostile("a header key not UTF-8", batch([record(0, headers=[(b"\xff\xfe", b"v")])]),
                "INVALID_RECORD", "a header key that is not UTF-8"),
        Hostile("snappy garbage", batch(b"garbage!", count=1, attributes=SNAPPY),
                "INVALID_RECORD", "Failed to decompress the snappy record stream"),
        Hostile("gzip garbage", batch(b"\x1f\x8b\x08\x00garbage", count=1, attributes=GZIP),
                "INVALID_RECORD", "Failed to decompress the gzip record stream"),
        Hostile("zstd cut short", batch(compress(ZSTD, b"".join(three))[:-4], count=3,
                attributes=ZSTD), "INVALID_RECORD", "zstd: the stream is cut short"),
        Hostile("lz4 of bad records", batch([record(0), record(0)], codec=LZ4),
                "INVALID_RECORD", "offset delta 0, expected 1"),
        Hostile("zstd before Produce v7", batch(three, codec=ZSTD),
                "UNSUPPORTED_COMPRESSION_TYPE", "not allowed to use ZStandard", 6),
        Hostile("LogAppendTime without a time", batch(three, attributes=ATTR_TIMESTAMP_TYPE,
                max_timestamp=-1), "INVALID_TIMESTAMP", "rejected due to invalid timestamp"),
        Hostile("bad CRC", batch(three, crc_change=1), "CORRUPT_MESSAGE", "Record is corrupt"),
        Hostile("shorter than a header", batch(three)[:8] + struct.pack(">i", 20)
                + batch(three)[12:32], "CORRUPT_MESSAGE", "smaller than the minimum"),
        Hostile("cut short", batch(three)[:-5], "INVALID_RECORD",
                "must have at least one whole record batch"),
        Hostile("two batches", batch(three) + batch(three), "INVALID_RECORD",
                "exactly one record batch per partition"),
        Hostile("magic 1", batch(three, magic=1), "INVALID_RECORD", "magic version 2"),
        Hostile("base offset 5", batch(three, base_offset=5), "INVALID_RECORD",
                "should be 0, but it is 5"),
        Hostile("producer id without a sequence", batch(three, producer_id=7,
                producer_epoch=0), "INVALID_RECORD", "Invalid sequence number -1"),
        Hostile("producer id without an epoch", batch(three, producer_id=7,
                base_sequence=0), "INVALID_RECORD", "Invalid producer epoch -1"),
        Hostile("producer id -5", batch(three, producer_id=-5), "INVALID_RECORD",
                "Invalid producer id"),
    ]  # fmt: skip


HOSTILE: Final = _hostile()
