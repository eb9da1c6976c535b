"""The Spark source's columnar decoder against kafka-python's record batch reader.

A Fetch answer's batches (written by kafka-python's builder: keys, values and headers of
any size, null or not, timestamp deltas of every width, offset gaps, batches past 64 and
8192 records, where offset deltas widen; uncompressed or compressed with any of Kafka's
codecs) decode to exactly the records kafka-python reads from them, in [first, end).
Control batches are skipped, a transactional batch stops the walk where librdkafka must
read on, a batch cut at the byte limit is left for the next Fetch, and a corrupt batch
(its CRC, a stream that does not decompress, or records that do not fit, even under a
recomputed CRC) is an error naming its offset, never rows.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.errors import CorruptBatch
from tidelog.protocol.codecs import GZIP, LZ4, SNAPPY, ZSTD
from tidelog.records import CONTROL_TYPE_LEADER_CHANGE, CRC_START, build_control_batch, stamp
from tidelog.spark import columnar
from tidelog.spark.kafka_io import arrow_schema
from tidelog.wal.kafka_records import DefaultRecordBatch, DefaultRecordBatchBuilder

TIMESTAMP_BASE = 1_700_000_000_000
CODECS = [0, 0, GZIP, SNAPPY, LZ4, ZSTD]
Record = tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
"""offset, ms, timestamp type, key, value, headers"""
ATTRIBUTES_AT = 21
LOG_APPEND_TIME_BIT = 0x08


def batch_of(
    base_offset: int,
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
    *,
    codec: int = 0,
    transactional: bool = False,
) -> bytes:
    """A batch at `base_offset` of (offset delta, timestamp delta, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=7 if transactional else -1, producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1, batch_size=1 << 30,
    )  # fmt: skip
    for delta, stamp_delta, key, value, headers in records:
        builder.append(delta, timestamp=TIMESTAMP_BASE + stamp_delta, key=key, value=value,
                       headers=headers)  # fmt: skip
    return stamp(bytes(builder.build()), base_offset=base_offset, epoch=3)


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_START - 4, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def log_append_time(batch: bytes) -> bytes:
    out = bytearray(batch)
    out[ATTRIBUTES_AT + 1] |= LOG_APPEND_TIME_BIT
    return with_crc(out)


def expected(answer: bytes, first: int, end: int) -> list[Record]:
    """kafka-python's reading of every data batch of `answer`, in [first, end)."""
    rows: list[Record] = []
    position = 0
    while position < len(answer):
        (size,) = struct.unpack_from(">i", answer, position + 8)
        batch = DefaultRecordBatch(answer[position : position + 12 + size])
        position += 12 + size
        if batch.is_control_batch:
            continue
        for record in batch:
            if first <= record.offset < end:
                rows.append(
                    (record.offset, record.timestamp, record.timestamp_type, record.key,
                     record.value, [(k, v) for k, v in record.headers])
                )  # fmt: skip
    return rows


def decoded(answer: bytes, first: int, end: int) -> tuple[list[Record], columnar.Walk]:
    walk = columnar.walk_batches(answer, first, end)
    rows = columnar.decode(answer, walk, first, end)
    batch = columnar.to_arrow(rows, "t", 4, include_headers=True)
    assert batch.schema.equals(arrow_schema(include_headers=True))
    plain = columnar.to_arrow(rows, "t", 4)
    assert plain.schema.equals(arrow_schema(include_headers=False))
    assert plain.equals(batch.drop_columns(["headers"]))
    table = batch.to_pydict()
    assert set(table["topic"]) <= {"t"} and set(table["partition"]) <= {4}
    records = [
        (offset, int(stamp.timestamp() * 1000 + 0.5), kind, key, value,
         [(h["key"], h["value"]) for h in headers])
        for offset, stamp, kind, key, value, headers in zip(
            table["offset"], table["timestamp"], table["timestampType"], table["key"],
            table["value"], table["headers"], strict=True,
        )
    ]  # fmt: skip
    return records, walk


a_value = st.none() | st.binary(max_size=40) | st.binary(min_size=100, max_size=300)
a_header = st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8))
a_stamp = st.integers(-(2**40), 2**40) | st.integers(-70, 70) | st.integers(0, 9000)


@st.composite
def a_batch(draw: Any) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    """Records of random fields, or (to make long runs of one stride) of one layout."""
    count = draw(st.integers(1, 300))
    gaps = draw(st.booleans())
    if draw(st.booleans()):
        value = draw(st.binary(min_size=draw(st.sampled_from([0, 5, 12, 13, 100])), max_size=120))
        key = draw(st.none() | st.binary(max_size=20))
        step = draw(st.sampled_from([0, 1, 3]))
        fields = [(i * step, key, value, []) for i in range(count)]
    else:
        fields = [
            (draw(a_stamp), draw(a_value), draw(a_value), draw(st.lists(a_header, max_size=2)))
            for _ in range(count)
        ]
    deltas, delta = [], 0
    for _ in range(count):
        deltas.append(delta)
        delta += 1 + (draw(st.integers(0, 3)) if gaps else 0)
    return [(d, *f) for d, f in zip(deltas, fields, strict=True)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(a_batch(), min_size=1, max_size=4), st.integers(0, 50), st.data())
def test_an_answer_decodes_as_kafka_python_reads_it(batches, base, data) -> None:  # type: ignore[no-untyped-def]
    answer, offset = b"", base
    for records in batches:
        batch = batch_of(offset, records, codec=data.draw(st.sampled_from(CODECS)))
        if data.draw(st.booleans()):
            batch = log_append_time(batch)
        answer += batch
        offset += records[-1][0] + 1
    first = data.draw(st.integers(base, offset))
    end = data.draw(st.integers(first, offset + 2))
    rows, walk = decoded(answer, first, end)
    assert rows == expected(answer, first, end)
    assert not walk.stopped


def test_offset_deltas_past_8192_widen_and_still_decode() -> None:
    records = [(i, i // 100, None, b"v" * 100, []) for i in range(9000)]
    answer = batch_of(10, records)
    rows, walk = decoded(answer, 0, 1 << 40)
    assert rows == expected(answer, 0, 1 << 40)
    assert [r[0] for r in rows] == list(range(10, 9010))
    assert walk.next_offset == 9010


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    answer = log_append_time(batch_of(0, [(0, 5, None, b"a", []), (1, 9, None, b"b", [])]))
    rows, _ = decoded(answer, 0, 10)
    assert [(r[1], r[2]) for r in rows] == [(TIMESTAMP_BASE + 9, 1), (TIMESTAMP_BASE + 9, 1)]


def test_control_batches_are_skipped_and_a_transactional_batch_stops_the_walk() -> None:
    control = build_control_batch(
        base_offset=0, epoch=3, control_type=CONTROL_TYPE_LEADER_CHANGE, timestamp_ms=1
    )
    plain = batch_of(1, [(0, 0, b"k", b"one", []), (1, 1, None, b"two", [])])
    packed = batch_of(3, [(0, 0, None, b"three" * 50, [])], codec=GZIP)
    pending = batch_of(4, [(0, 0, None, b"four", [])], transactional=True)
    answer = control + plain + packed + pending
    walk = columnar.walk_batches(answer, 0, 100)
    assert walk.stopped and walk.next_offset == 4  # librdkafka reads on from there
    rows, _ = decoded(answer, 0, 100)
    assert [(r[0], r[4]) for r in rows] == [(1, b"one"), (2, b"two"), (3, b"three" * 50)]
    # Only control batches: nothing to decode, but the next Fetch starts past them.
    walk = columnar.walk_batches(control, 0, 100)
    assert (walk.spans, walk.next_offset, walk.stopped) == ([], 1, False)


def test_a_compressed_stream_that_does_not_decompress_is_an_error() -> None:
    batch = bytearray(batch_of(5, [(0, 0, None, b"gz" * 100, [])], codec=GZIP))
    batch[61] ^= 0xFF  # the gzip stream's first byte
    with pytest.raises(CorruptBatch, match="the batch at offset 5: gzip"):
        columnar.walk_batches(with_crc(batch), 0, 100)


def test_an_answer_decompresses_a_bounded_amount(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches that inflate much (zeros, here) end the walk once the bound is reached: the
    next Fetch starts at the first one left; the first batch is always decoded."""
    monkeypatch.setattr(columnar, "INFLATED_BYTES_MAX", 50_000)
    big = [(i, 0, None, bytes(1000), []) for i in range(30)]  # about 30 KB inflated
    answer = b"".join(batch_of(30 * n, big, codec=ZSTD) for n in range(4))
    assert len(answer) < 2_000
    walk = columnar.walk_batches(answer, 0, 1000)
    assert (len(walk.spans), walk.next_offset, walk.stopped) == (2, 60, False)
    monkeypatch.setattr(columnar, "INFLATED_BYTES_MAX", 0)
    walk = columnar.walk_batches(answer, 0, 1000)
    assert (len(walk.spans), walk.next_offset) == (1, 30)
    rows, _ = decoded(answer[: len(batch_of(0, big, codec=ZSTD))], 0, 1000)
    assert [r[4] for r in rows] == [bytes(1000)] * 30


def test_a_batch_cut_at_the_byte_limit_is_left_for_the_next_fetch() -> None:
    whole = batch_of(0, [(0, 0, None, b"a", [])])
    cut = batch_of(1, [(0, 0, None, b"b" * 500, [])])[:300]
    walk = columnar.walk_batches(whole + cut, 0, 100)
    assert (len(walk.spans), walk.next_offset, walk.stopped) == (1, 1, False)
    # A batch at or past the range's end is not walked either.
    walk = columnar.walk_batches(whole + batch_of(1, [(0, 0, None, b"b", [])]), 0, 1)
    assert (len(walk.spans), walk.next_offset) == (1, 1)


def test_a_corrupt_crc_is_an_error_naming_the_batch() -> None:
    good = batch_of(0, [(0, 0, None, b"x" * 50, [])])
    bad = bytearray(batch_of(1, [(0, 0, None, b"y" * 50, [])]))
    bad[-10] ^= 0x01
    with pytest.raises(CorruptBatch, match="CRC-32C mismatch at offset 1"):
        columnar.walk_batches(good + bytes(bad), 0, 100)


@pytest.mark.parametrize(
    ("where", "byte", "reason"),
    [
        (0, 0x7F, "a record of -64 bytes"),  # the record's length
        (5, 0x7F, "a key or value that does not fit"),  # the value's length: -64
        (4, 0x60, "a field past the record's end"),  # the key's length: 48, too long
    ],
)
def test_records_that_do_not_fit_are_errors_even_under_a_good_crc(
    where: int, byte: int, reason: str
) -> None:
    records = [(i, 0, None, b"z" * 10, []) for i in range(20)]
    batch = bytearray(batch_of(7, records))
    record_at = 61 + 17 * 3  # the fourth record: each takes 17 bytes
    batch[record_at + where] = byte
    answer = with_crc(batch)
    with pytest.raises(CorruptBatch, match=f"the batch at offset 7.*{reason}"):
        walk = columnar.walk_batches(answer, 0, 100)
        columnar.decode(answer, walk, 0, 100)


@pytest.mark.parametrize(
    ("headers", "where", "byte", "reason"),
    [
        ([("k", b"v")], -5, 0x00, "bytes after the record's fields"),  # the count: 0
        ([], -1, 0x02, "a varint that does not end"),  # the count: 1, and no bytes left
        ([("k", b"v")], -5, 0x03, "a negative count of headers"),  # the count: -2
        ([("\u00e9", b"v")], -3, 0xFF, "a header key that is not UTF-8"),  # its 2nd byte
        ([("k", b"v")], -2, 0x08, "a header value of 4 bytes"),  # past the record's end
    ],
)
def test_headers_that_do_not_fit_are_errors_even_under_a_good_crc(
    headers: list[tuple[str, bytes]], where: int, byte: int, reason: str
) -> None:
    batch = bytearray(batch_of(7, [(0, 0, None, b"z" * 10, headers)]))
    batch[where] = byte
    answer = with_crc(batch)
    with pytest.raises(CorruptBatch, match=f"the batch at offset 7.*{reason}"):
        columnar.decode(answer, columnar.walk_batches(answer, 0, 100), 0, 100)


def test_values_of_every_size_are_copied_out_of_the_answer() -> None:
    values = [None, b"", b"a", b"b" * 12, b"c" * 13, b"d" * 4000]
    answer = batch_of(0, [(i, 0, v, v, []) for i, v in enumerate(values)])
    walk = columnar.walk_batches(answer, 0, 10)
    batch = columnar.to_arrow(columnar.decode(answer, walk, 0, 10), "t", 0)
    assert batch.column("value").to_pylist() == values
    assert batch.column("key").to_pylist() == values
    assert batch.column("value").type == pa.binary()
