"""Kafka record batches (magic v2) at the level of their 61-byte header.

A batch is the unit on the wire, on disk and in replication; tidelog moves it as bytes and
never decodes its records on a hot path. This module reads and stamps headers, checks the
CRC-32C, and builds the one batch tidelog writes itself: the control batch a new leader
appends at the start of its epoch.

Header layout (big-endian), Kafka's DefaultRecordBatch:
    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordsCount i32 | records...
The CRC covers byte 21 (attributes) to the end, so baseOffset and partitionLeaderEpoch can be
overwritten by the leader without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from tidelog.errors import CorruptBatch
from tidelog.types import Epoch, Offset

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count.
MAGIC_V2 = 2
CRC_START = 21
BATCH_SIZE_MAX = 64 * 1024 * 1024

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

# Control record types (Kafka: 0 abort, 1 commit, 2 KRaft leader change, 6 KRaft voters).
CONTROL_TYPE_LEADER_CHANGE = 2
CONTROL_TYPE_VOTERS = 6

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_POSITION = 12
_CRC = struct.Struct(">I")
_CRC_POSITION = 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_POSITION = 21
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_POSITION = 35


class BatchHeader(NamedTuple):
    """The decoded 61-byte header of one record batch."""

    base_offset: Offset
    batch_length: int
    epoch: Epoch
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def next_offset(self) -> Offset:
        """The offset after the last one the batch covers: [base_offset, next_offset)."""
        return Offset(self.base_offset + self.last_offset_delta + 1)

    @property
    def last_offset(self) -> Offset:
        return Offset(self.base_offset + self.last_offset_delta)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at `position` without checking anything."""
    return BatchHeader._make(_HEADER.unpack_from(buf, position))


def crc_of(buf: bytes | bytearray | memoryview, position: int, size_bytes: int) -> int:
    """The CRC-32C of the batch at `position`, over the part the header's crc covers."""
    view = memoryview(buf)[position + CRC_START : position + size_bytes]
    return int(crc32c(view))


def check_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode and verify the batch at `position`: framing, magic, offsets and CRC-32C.

    Raises CorruptBatch with what is wrong.
    """
    header = check_framing(buf, position)
    actual = crc_of(buf, position, header.size_bytes)
    if actual != header.crc:
        raise CorruptBatch(
            f"CRC-32C mismatch at offset {header.base_offset}: "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


def check_framing(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the batch header at `position` and check its framing (not its CRC)."""
    available = len(buf) - position
    if available < HEADER_SIZE:
        raise CorruptBatch(f"{available} bytes left, a batch header needs {HEADER_SIZE}")
    header = read_header(buf, position)
    if header.magic != MAGIC_V2:
        raise CorruptBatch(f"magic {header.magic} at byte {position}, expected {MAGIC_V2}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"batch length {header.batch_length} is shorter than a header")
    if header.size_bytes > BATCH_SIZE_MAX:
        raise CorruptBatch(f"batch of {header.size_bytes} bytes exceeds {BATCH_SIZE_MAX}")
    if header.size_bytes > available:
        raise CorruptBatch(f"batch of {header.size_bytes} bytes, only {available} present")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptBatch(f"negative lastOffsetDelta {header.last_offset_delta}")
    return header


def stamp(batch: bytes | bytearray, *, base_offset: Offset, epoch: Epoch) -> bytes:
    """A copy of `batch` with the leader's base offset and epoch written into its header.

    Both fields lie outside the CRC, so the CRC stays valid.
    """
    out = bytearray(batch)
    _OFFSET.pack_into(out, 0, base_offset)
    _EPOCH.pack_into(out, _EPOCH_POSITION, epoch)
    return bytes(out)


def set_max_timestamp(batch: bytes, *, max_timestamp: int) -> bytes:
    """A copy of `batch` with timestamp type CreateTime, `max_timestamp`, and its CRC
    recomputed: Kafka's DefaultRecordBatch.setMaxTimestamp(CREATE_TIME, max_timestamp)."""
    out = bytearray(batch)
    attributes = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_POSITION)[0]
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_POSITION, attributes & ~ATTR_TIMESTAMP_TYPE)
    _MAX_TIMESTAMP.pack_into(out, _MAX_TIMESTAMP_POSITION, max_timestamp)
    _CRC.pack_into(out, _CRC_POSITION, crc_of(out, 0, len(out)))
    return bytes(out)


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in a concatenation; CRCs too unless `verify` is
    False (the framing is always checked)."""
    check = check_batch if verify else check_framing
    position = 0
    end = len(buf)
    while position < end:
        header = check(buf, position)
        yield position, header
        position += header.size_bytes


def _varint(value: int) -> bytes:
    """Zigzag varint, as Kafka's records use."""
    return uvarint((value << 1) ^ (value >> 63))


def uvarint(value: int) -> bytes:
    """Unsigned varint, as Kafka's flexible message versions use (and, of a zigzag-encoded
    value, its records)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def leader_change_message(
    leader_id: int, voters: tuple[int, ...], granting: tuple[int, ...]
) -> bytes:
    """Kafka's LeaderChangeMessage v0 (flexible), as KRaft writes it as the value of a
    LEADER_CHANGE control record: Version int16, LeaderId int32, Voters and GrantingVoters
    (compact arrays of VoterId int32, each with empty tagged fields), empty tagged fields."""

    def voter_array(nodes: tuple[int, ...]) -> bytes:
        return uvarint(len(nodes) + 1) + b"".join(
            struct.pack(">i", node) + uvarint(0) for node in nodes
        )

    return (
        struct.pack(">hi", 0, leader_id) + voter_array(voters) + voter_array(granting) + uvarint(0)
    )


def build_control_batch(
    *,
    base_offset: Offset,
    epoch: Epoch,
    control_type: int,
    timestamp_ms: int,
    value: bytes | None = None,
) -> bytes:
    """One control batch holding one control record of `control_type` with `value`.

    A new leader appends one of type LEADER_CHANGE at the start of its epoch (the no-op of
    Raft §8 and KIP-207), its value a LeaderChangeMessage as KRaft writes it, so a client
    that reads a value from every control record finds one. Consumers skip control
    batches, as they skip transaction markers.
    """
    key = struct.pack(">hh", 0, control_type)
    encoded_value = _varint(-1) if value is None else _varint(len(value)) + value
    body = (
        b"\x00"  # record attributes
        + _varint(0)  # timestampDelta
        + _varint(0)  # offsetDelta
        + _varint(len(key))
        + key
        + encoded_value
        + _varint(0)  # no headers
    )
    record = _varint(len(body)) + body
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(record)
    out = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            epoch,
            MAGIC_V2,
            0,
            ATTR_CONTROL,
            0,
            timestamp_ms,
            timestamp_ms,
            NO_PRODUCER_ID,
            -1,
            NO_SEQUENCE,
            1,
        )
    )
    out += record
    _CRC.pack_into(out, _CRC_POSITION, crc_of(out, 0, len(out)))
    return bytes(out)


def read_uvarint(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """An unsigned varint at `position`: its value and the position after it. Raises
    ValueError past the end or beyond 5 bytes."""
    value = shift = 0
    while True:
        if position >= len(buf) or shift > 28:
            raise ValueError("a varint past the end or too long")
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def read_varint(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """A zigzag varint at `position`: its value and the position after it."""
    raw, position = read_uvarint(buf, position)
    return (raw >> 1) ^ -(raw & 1), position


def control_record(batch: bytes) -> tuple[int, bytes | None] | None:
    """The type and value of the first record of an uncompressed control batch (the ones
    tidelog writes, `build_control_batch`); None for any other batch. Raises ValueError
    for a control batch whose record cannot be read."""
    header = read_header(batch)
    if not header.is_control or header.attributes & ATTR_COMPRESSION_MASK:
        return None
    try:
        return _first_record(memoryview(batch))
    except struct.error as error:
        raise ValueError(f"a control record cut short: {error}") from error


def _first_record(view: memoryview) -> tuple[int, bytes | None]:
    """The type and value of the record after the batch header at the start of `view`."""
    _, position = read_varint(view, HEADER_SIZE)  # record length
    position += 1  # record attributes
    _, position = read_varint(view, position)  # timestampDelta
    _, position = read_varint(view, position)  # offsetDelta
    key_length, position = read_varint(view, position)
    if key_length < 4:
        raise ValueError(f"a control record key of {key_length} bytes")
    _, control_type = struct.unpack_from(">hh", view, position)
    position += key_length
    value_length, position = read_varint(view, position)
    if value_length < 0:
        return control_type, None
    if position + value_length > len(view):
        raise ValueError("a control record value past the end of its batch")
    return control_type, bytes(view[position : position + value_length])
