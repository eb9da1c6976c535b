"""Produce validation (tidelog.protocol.validate): each of Kafka's rules on batches built by
hand, and properties against kafka-python's own reader of record batches."""

from __future__ import annotations

import contextlib
import gzip
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tidelog.errors import InvalidBatch
from tidelog.protocol.codecs import GZIP, LZ4, SNAPPY, ZSTD, CodecError, decompress
from tidelog.protocol.record_walk import (
    _OFFSET_COLUMNS,
    _OFFSET_WIDTHS,
    walk_records,
    walk_uniform_records,
)
from tidelog.protocol.validate import (
    DECOMPRESSED_SIZE_MAX,
    RECORD_ERRORS_MAX,
    BatchRules,
    refuse_request,
    validate_batch,
)
from tidelog.records import ATTR_TIMESTAMP_TYPE, check_batch, read_header
from tidelog.testing.batches import (
    GOOD,
    HOSTILE,
    TIMESTAMP_BASE,
    Hostile,
    batch,
    record,
    records,
    varint,
)

RULES = BatchRules(api_version=8, max_message_bytes=1_048_588, partition_name="t-0")
CODECS = [GZIP, SNAPPY, LZ4, ZSTD]


def refusal_of(records_: bytes | None, rules: BatchRules = RULES) -> InvalidBatch:
    with pytest.raises(InvalidBatch) as caught:
        validate_batch(records_, rules)
    return caught.value


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_each_hostile_batch_is_refused_with_kafkas_error_and_the_reason(hostile: Hostile) -> None:
    refusal = refusal_of(hostile.records, RULES._replace(api_version=hostile.api_version))
    assert refusal.code == hostile.code
    assert hostile.reason in str(refusal)


def test_a_good_uncompressed_batch_is_appended_as_it_came() -> None:
    good = batch(GOOD)
    assert validate_batch(good, RULES) is good


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_of_every_codec_pass(codec: int) -> None:
    good = batch(records(500), codec=codec)
    assert validate_batch(good, RULES) is good


def test_java_clients_framed_snappy_passes() -> None:
    from kafka.codec import snappy_encode  # noqa: PLC0415 - the xerial framing of Java

    framed = snappy_encode(b"".join(records(50)), xerial_blocksize=256)
    assert framed.startswith(b"\x82SNAPPY\x00")
    good = batch(framed, count=50, attributes=SNAPPY, max_timestamp=TIMESTAMP_BASE + 49)
    assert validate_batch(good, RULES) is good


def test_zstd_is_taken_from_produce_v7() -> None:
    good = batch(GOOD, codec=ZSTD)
    assert validate_batch(good, RULES._replace(api_version=7)) is good
    assert refusal_of(good, RULES._replace(api_version=6)).code == "UNSUPPORTED_COMPRESSION_TYPE"


def test_no_records_at_all_are_refused() -> None:
    assert refusal_of(None).code == "INVALID_RECORD"


def test_max_message_bytes_bounds_the_batch_as_sent() -> None:
    good = batch(GOOD)
    assert validate_batch(good, RULES._replace(max_message_bytes=len(good))) is good
    refusal = refusal_of(good, RULES._replace(max_message_bytes=len(good) - 1))
    assert refusal.code == "MESSAGE_TOO_LARGE"
    assert f"is {len(good)} bytes which exceeds the maximum configured value" in str(refusal)


def test_a_compressed_bomb_is_refused_before_it_is_inflated() -> None:
    bomb = gzip.compress(b"\x00" * (DECOMPRESSED_SIZE_MAX + 1))
    refusal = refusal_of(batch(bomb, count=1, attributes=GZIP))
    assert refusal.code == "INVALID_RECORD"
    assert f"decompresses to more than {DECOMPRESSED_SIZE_MAX} bytes" in str(refusal)


@pytest.mark.parametrize(
    ("producer_id", "epoch", "sequence"),
    # (-1, 0, 0) and (-1, -1, 4): no producer id, so not idempotent whatever else the batch
    # says; kafkajs's producer writes (-1, 0, 0) when it is not idempotent, and Kafka takes it.
    [(-1, -1, -1), (0, 0, 0), (7, 3, 2**31 - 1), (-1, 0, 0), (-1, -1, 4)],
)
def test_sane_producer_fields_pass(producer_id: int, epoch: int, sequence: int) -> None:
    good = batch(GOOD, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    assert validate_batch(good, RULES) is good


def test_a_missing_max_timestamp_is_fixed_up_with_a_new_crc() -> None:
    given_ = batch([record(0, timestamp_delta=5), record(1, timestamp_delta=9)], max_timestamp=-1)
    fixed = validate_batch(given_, RULES)
    header = check_batch(fixed)  # the CRC is right again
    assert header.max_timestamp == TIMESTAMP_BASE + 9
    assert header._replace(max_timestamp=-1, crc=0) == read_header(given_)._replace(crc=0)
    assert fixed[61:] == given_[61:]


def test_records_without_timestamps_make_max_timestamp_minus_one() -> None:
    untimed = [record(i, timestamp_delta=0) for i in range(3)]  # each at -1: no timestamp
    given_ = batch(untimed, base_timestamp=-1, max_timestamp=TIMESTAMP_BASE)
    assert check_batch(validate_batch(given_, RULES)).max_timestamp == -1


def test_a_log_append_time_batch_becomes_create_time_with_its_max_timestamp() -> None:
    given_ = batch(GOOD, attributes=ATTR_TIMESTAMP_TYPE, max_timestamp=TIMESTAMP_BASE + 50)
    header = check_batch(validate_batch(given_, RULES))
    assert header.attributes & ATTR_TIMESTAMP_TYPE == 0
    assert header.max_timestamp == TIMESTAMP_BASE + 50


def test_log_append_time_without_a_time_lists_each_record() -> None:
    refusal = refusal_of(batch(GOOD, attributes=ATTR_TIMESTAMP_TYPE, max_timestamp=-1))
    assert [index for index, _ in refusal.record_errors] == [0, 1, 2]
    assert all("LogAppendTime" in message for _, message in refusal.record_errors)


def test_record_errors_are_bounded() -> None:
    many = batch(records(RECORD_ERRORS_MAX + 5), attributes=ATTR_TIMESTAMP_TYPE, max_timestamp=-1)
    refusal = refusal_of(many)
    assert len(refusal.record_errors) == RECORD_ERRORS_MAX
    assert f"the first {RECORD_ERRORS_MAX} of {RECORD_ERRORS_MAX + 5} listed" in str(refusal)


def test_a_timestamp_beyond_64_bits_is_refused() -> None:
    refusal = refusal_of(batch([record(0, timestamp_delta=2**63 - 1)], max_timestamp=0))
    assert refusal.code == "INVALID_TIMESTAMP"


def test_keys_values_and_headers_of_every_length_class_pass() -> None:
    """Lengths of one, two and three varint bytes, nulls and headers, so the inline and
    the general decoding paths are both taken; offset deltas past 8192 likewise."""
    sizes = [0, 1, 63, 64, 8191, 8192, 20_000]
    body = [
        record(i, b"v" * sizes[i % 7], key=None if i % 3 else b"k" * sizes[(i + 1) % 7],
               headers=[(b"h", None), (b"", b"x" * (i % 70))] if i % 5 == 0 else (),
               timestamp_delta=-(i * 1000) if i % 2 else i * 100_000)
        for i in range(9000)
    ]  # fmt: skip
    good = batch(body, max_timestamp=TIMESTAMP_BASE + 8998 * 100_000)
    assert validate_batch(good, RULES._replace(max_message_bytes=2**31 - 1)) is good


def test_negative_lengths_other_than_minus_one_are_nulls_as_in_kafka() -> None:
    odd = b"\x00\x00\x00\x05\x07\x00"  # attributes, timestamp, offset, key -3, value -4, no headers
    good = batch([bytes([len(odd) * 2]) + odd], max_timestamp=TIMESTAMP_BASE)
    assert validate_batch(good, RULES) is good


def test_a_transactional_batch_without_a_transactional_id_fails_the_request() -> None:
    transactional = next(h for h in HOSTILE if h.name == "transactional bit").records
    refusal = refuse_request(acks=-1, transactional_id=None, records=[batch(GOOD), transactional])
    assert refusal is not None
    assert refusal.code == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert refuse_request(acks=-1, transactional_id="tx", records=[transactional]) is None


@pytest.mark.parametrize("acks", [-2, 2, 5])
def test_acks_other_than_minus_one_zero_and_one_are_refused(acks: int) -> None:
    refusal = refuse_request(acks=acks, transactional_id=None, records=[batch(GOOD)])
    assert refusal is not None
    assert refusal.code == "INVALID_REQUIRED_ACKS"


@pytest.mark.parametrize("acks", [-1, 0, 1])
def test_valid_acks_pass(acks: int) -> None:
    assert refuse_request(acks=acks, transactional_id=None, records=[batch(GOOD), None]) is None


# ---------------------------------------------------------------------- properties -----
headers_ = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=9))),
                    max_size=3)  # fmt: skip
a_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.integers(-(2**40), 2**40),
    headers_,
)


Part = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]


def kafka_python_batch(parts: list[Part], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for offset, (key, value, delta, headers) in enumerate(parts):
        builder.append(offset, timestamp=TIMESTAMP_BASE + delta, key=key, value=value,
                       headers=[(k, v) for k, v in headers])  # fmt: skip
    return bytes(builder.build())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(a_record, min_size=1, max_size=40), st.sampled_from([0, *CODECS]))
def test_what_kafka_python_writes_passes_with_its_max_timestamp(parts, codec) -> None:  # type: ignore[no-untyped-def]
    written = kafka_python_batch(parts, codec)
    accepted = validate_batch(written, RULES)
    assert check_batch(accepted).max_timestamp == TIMESTAMP_BASE + max(d for _, _, d, _ in parts)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(a_record, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 20),
)
def test_damaged_records_with_a_valid_crc_are_refused_or_read_as_kafka_python_reads_them(
    parts,
    damage,
    cut,  # type: ignore[no-untyped-def]
) -> None:
    """Whatever bytes the records hold, the validation refuses them with InvalidBatch or
    accepts a batch kafka-python reads whole: the count, offsets 0..n-1, nothing left."""
    written = bytearray(kafka_python_batch(parts, 0))
    for position, value in damage:
        written[61 + position % (len(written) - 61)] = value
    damaged = batch(bytes(written[61 : len(written) - cut]), count=len(parts))
    try:
        accepted = validate_batch(damaged, RULES)
    except InvalidBatch as refusal:
        assert refusal.code == "INVALID_RECORD"
        return
    read = list(DefaultRecordBatch(accepted))
    assert [r.offset for r in read] == list(range(len(parts)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=200))
def test_decompressing_any_bytes_returns_or_raises_codec_error(codec: int, data: bytes) -> None:
    with contextlib.suppress(CodecError):
        assert len(decompress(codec, data, size_max=1 << 16)) <= 1 << 16


def test_the_walk_stops_at_the_end_of_the_buffer_whatever_the_count() -> None:
    body = b"".join(records(4))
    assert walk_records(body, 0, 4) == 3
    with pytest.raises(ValueError, match="premature EOF"):
        walk_records(body, 0, 5)
    with pytest.raises(ValueError, match="records still remaining"):
        walk_records(body, 0, 3)


def test_the_first_hostile_catalogue_entry_holds_exactly_its_one_fault() -> None:
    """The catalogue's count mismatch differs from a good batch in lastOffsetDelta only,
    and its CRC is valid: the validation, not the CRC, has to catch it."""
    hostile = HOSTILE[1].records
    good = batch(GOOD)
    check_batch(hostile)
    assert struct.unpack_from(">i", hostile, 23) == (0,)
    assert hostile[:17] + hostile[21:23] + hostile[27:] == good[:17] + good[21:23] + good[27:]


# ---------------------------------------------------------------------- the column check
def test_the_offset_delta_columns_are_the_varints_of_the_indices() -> None:
    for width, first, end in _OFFSET_WIDTHS:
        encoded = [varint(i) for i in range(first, end)]
        assert {len(e) for e in encoded} == {width}
        for i, column in enumerate(_OFFSET_COLUMNS[width]):
            assert column == bytes(e[i] for e in encoded)


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 9000),
    key_size=st.one_of(st.none(), st.integers(0, 70)),
    value_size=st.one_of(st.none(), st.integers(0, 200)),
    damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2),
    timestamp_step=st.integers(-64, 200),
    rising_span=st.integers(0, 9000),
)
def test_the_column_check_agrees_with_the_walk(  # type: ignore[no-untyped-def]
    *, count, key_size, value_size, damage, timestamp_step, rising_span
) -> None:
    """On uniform records, damaged or not: the column check returns what the walk returns,
    or None; it never accepts what the walk refuses. Timestamps jump about, or rise over
    `rising_span` ms (past 63 ms their deltas take two bytes)."""
    key = None if key_size is None else b"k" * key_size
    value = None if value_size is None else b"v" * value_size
    deltas = [
        i * rising_span // count if timestamp_step % 2 else (i % 3) * timestamp_step
        for i in range(count)
    ]
    body = bytearray(
        b"".join(record(i, value, key=key, timestamp_delta=d) for i, d in enumerate(deltas))
    )
    for position, byte in damage:
        body[position % len(body)] = byte
    try:
        walked: int | None = walk_records(bytes(body), 0, count)
    except ValueError:
        walked = None
    checked = walk_uniform_records(bytes(body), 0, count)
    assert checked is None or checked == walked
    rising = deltas == sorted(deltas) and deltas[-1] < 8192  # two bytes at most
    if not damage and (rising or max(map(abs, deltas)) < 64):
        assert checked == walked == max(deltas)


@pytest.mark.parametrize(
    ("deltas", "largest"),
    [
        ([0] * 30 + [5], 5),  # the latest last: the usual case
        ([50] + [0] * 30, 50),  # the largest before the last records
        ([-64, -3, -64], -3),
        ([0] * 20 + [64] + [0] * 20, None),  # 64 takes two varint bytes: the walk decides
        (list(range(0, 300, 3)), 297),  # rising past 63: one-byte, then two-byte deltas
        ([0, 5, 64, 8191], 8191),
        ([0, 5, 64, 30], None),  # one byte after two
        ([0, 5, -65], None),  # a two-byte negative delta
    ],
)
def test_the_column_check_finds_the_largest_timestamp_delta(
    deltas: list[int], largest: int | None
) -> None:
    body = b"".join(record(i, b"v", timestamp_delta=d) for i, d in enumerate(deltas))
    assert walk_uniform_records(body, 0, len(deltas)) == largest
    assert walk_records(body, 0, len(deltas)) == max(deltas)
