"""Record batch v2 headers: checks, stamping, and the control batch a new leader writes."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from tidelog.errors import CorruptBatch
from tidelog.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    build_control_batch,
    check_batch,
    iter_batches,
    leader_change_message,
    stamp,
)
from tidelog.testing.sim import build_batch
from tidelog.types import Epoch, Offset


def test_stamping_keeps_the_crc_valid() -> None:
    batch = stamp(build_batch(b"v", records=4), base_offset=Offset(100), epoch=Epoch(7))
    header = check_batch(batch)
    assert (header.base_offset, header.epoch, header.next_offset) == (100, 7, 104)
    assert [r.offset for r in DefaultRecordBatch(batch)] == [100, 101, 102, 103]


def test_control_batch_is_valid_and_read_as_control_by_kafka_python() -> None:
    batch = build_control_batch(
        base_offset=Offset(5),
        epoch=Epoch(3),
        control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=1234,
    )
    header = check_batch(batch)
    assert header.is_control
    assert (header.base_offset, header.epoch, header.records_count) == (5, 3, 1)
    decoded = DefaultRecordBatch(batch)
    assert decoded.is_control_batch
    assert decoded.validate_crc()


def test_a_leader_change_record_carries_kraft_s_leader_change_message() -> None:
    """The value KRaft writes: LeaderChangeMessage v0, flexible (a client that reads a
    value from every control record finds one, longer than a transaction marker's)."""
    value = leader_change_message(2, (1, 2, 3), (2, 3))
    assert value == (
        struct.pack(">hi", 0, 2)
        + b"\x04" + b"".join(struct.pack(">i", n) + b"\x00" for n in (1, 2, 3))
        + b"\x03" + b"".join(struct.pack(">i", n) + b"\x00" for n in (2, 3))
        + b"\x00"
    )  # fmt: skip
    batch = build_control_batch(
        base_offset=Offset(0),
        epoch=Epoch(1),
        control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=0,
        value=value,
    )
    (record,) = list(DefaultRecordBatch(batch))
    assert record.key == struct.pack(">hh", 0, CONTROL_TYPE_LEADER_CHANGE)
    assert record.value == value
    assert len(record.value) > 6  # an EndTransactionMarker's size


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:30], "30 bytes left"),
        (lambda b: b[:16] + b"\x01" + b[17:], "magic 1"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC-32C mismatch"),
        (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], "shorter than a header"),
    ],
)
def test_damaged_batches_are_refused_with_the_reason(damage, reason) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CorruptBatch, match=reason):
        check_batch(damage(build_batch(b"value")))


def test_iter_batches_walks_a_concatenation() -> None:
    first = stamp(build_batch(b"a"), base_offset=Offset(0), epoch=Epoch(1))
    second = stamp(build_batch(b"b", records=2), base_offset=Offset(1), epoch=Epoch(1))
    found = [(position, h.base_offset) for position, h in iter_batches(first + second)]
    assert found == [(0, 0), (len(first), 1)]
