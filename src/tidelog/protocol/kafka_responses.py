"""Fetch and Produce responses encoded by hand, sans-IO: the two answers on the path of every
record, written around the stored batches without copying them and without building
kafka-python's objects.

Rules of this file:
- Each encoder writes, byte for byte, what kafka-python would encode for the same response
  at that version (tests/test_fetch_path.py and tests/test_produce_response.py compare
  them): v4-v18 for Fetch (FETCH_RAW_VERSIONS), v3-v13 for Produce.
- Record bytes stay as read: a Fetch partition's `records` is a chunk of its own in the
  `RawResponse`, never copied into a header buffer.
- From the flexible versions (Fetch v12, Produce v9) lengths are unsigned varints of
  length + 1 and each structure ends in its tagged fields (KIP-482); a partition's
  CurrentLeader and the response's NodeEndpoints (KIP-951) are tagged fields.
- No throttle, no fetch sessions, no transactions: the last stable offset is the HWM.
  tidelog.protocol.kafka frames the result (`KafkaConnection.send_raw_response`) and
  names these again for its callers.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from tidelog.records import uvarint


def join_batches(batches: Iterable[bytes]) -> bytes:
    """The `records` field of a Fetch partition: stored batches, concatenated as they are."""
    return b"".join(batches)


FETCH_RAW_VERSIONS: Final = (4, 18)
"""The Fetch response versions `encode_fetch_response` writes (all that tidelog serves)."""

FETCH_FLEXIBLE_MIN: Final = 12  # compact lengths and tagged fields (KIP-482)
FETCH_TOPIC_ID_MIN: Final = 13  # topics named by id, in requests and responses (KIP-516)
FETCH_NODE_ENDPOINTS_MIN: Final = 16  # the response's NodeEndpoints tagged field (KIP-951)
PRODUCE_LEADER_HINT_MIN: Final = 10  # CurrentLeader and NodeEndpoints (KIP-951)
PRODUCE_TOPIC_ID_MIN: Final = 13  # topics named by id (KIP-516)
PRODUCE_FLEXIBLE_MIN: Final = 9  # compact lengths and tagged fields (KIP-482)
TOPIC_ID_ZERO: Final = uuid.UUID(int=0)
"""Kafka's Uuid.ZERO_UUID: no topic has it. kafka-python decodes it as None."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# Throttle 0; from v7 top-level error 0 and session 0 (tidelog declines fetch sessions).
_FETCH_TOP_V4 = struct.pack(">i", 0)
_FETCH_TOP_V7 = struct.pack(">ihi", 0, 0, 0)
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, hwm, last stable offset
_I64 = struct.Struct(">q")
_LEADER_AND_EPOCH = struct.Struct(">ii")
_NO_ABORTED = _I32.pack(-1)
_NO_TAGS = b"\x00"  # an empty tagged-field section (flexible versions)
_NULL_COMPACT = b"\x00"  # a null compact array or string
_CURRENT_LEADER_TAG = 1  # FetchResponse PartitionData
_CURRENT_LEADER_PRODUCE_TAG = 0  # ProduceResponse PartitionProduceResponse
_NODE_ENDPOINTS_TAG = 0  # FetchResponse and ProduceResponse, top level


class LeaderAndEpoch(NamedTuple):
    """A partition's current leader as a response names it (KIP-951's CurrentLeader)."""

    leader_id: int
    leader_epoch: int


class NodeEndpoint(NamedTuple):
    """A broker's address as a response names it (KIP-951's NodeEndpoints; no rack)."""

    node_id: int
    host: str
    port: int


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response; `records` are whole stored batches, as read.
    `current_leader` is written from v12 (flexible) when given."""

    partition_index: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview
    current_leader: LeaderAndEpoch | None = None


FetchedTopic = tuple[str | uuid.UUID, list[FetchedPartition]]
"""A topic of a Fetch response: its name, or from v13 its id, and its partitions."""


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already encoded as chunks (header excluded): the broker writes them as
    they are, so record bytes read from a segment file are never copied into a frame."""

    chunks: list[bytes | memoryview]
    error_codes: tuple[int, ...] = ()  # the partitions' error codes other than NONE

    @property
    def size_bytes(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


def encode_fetch_response(
    version: int, topics: list[FetchedTopic], node_endpoints: Sequence[NodeEndpoint] = ()
) -> RawResponse:
    """A Fetch response body of `version` (v4-v18), byte for byte what kafka-python
    encodes, with each partition's records as a chunk of its own. No throttle, no
    top-level error, session 0, no aborted transactions; the last stable offset is the HWM
    (no transactions). From v12 (flexible) lengths are unsigned varints of length + 1 and
    each structure ends in its tagged fields: a partition's CurrentLeader when given, the
    response's `node_endpoints` (v16+) when any."""
    assert FETCH_RAW_VERSIONS[0] <= version <= FETCH_RAW_VERSIONS[1]
    assert not node_endpoints or version >= FETCH_NODE_ENDPOINTS_MIN
    flexible = version >= FETCH_FLEXIBLE_MIN
    head = bytearray(_FETCH_TOP_V7 if version >= 7 else _FETCH_TOP_V4)
    head += _count(len(topics), flexible=flexible)
    chunks: list[bytes | memoryview] = []
    errors: list[int] = []
    for key, partitions in topics:
        head += _fetch_topic_key(version, key) + _count(len(partitions), flexible=flexible)
        for part in partitions:
            if part.error_code:
                errors.append(part.error_code)
            assert flexible or part.current_leader is None  # a tagged field: v12+
            head += _fetch_partition_head(version, part)
            if part.records:
                chunks.append(bytes(head))
                chunks.append(part.records)
                head = bytearray()
            if flexible:
                head += _current_leader_tags(part.current_leader)
        if flexible:
            head += _NO_TAGS
    if flexible:
        head += _node_endpoints_tags(node_endpoints)
    chunks.append(bytes(head))
    return RawResponse(chunks, tuple(errors))


def _count(count: int, *, flexible: bool) -> bytes:
    """An array's length: INT32, or COMPACT (unsigned varint of length + 1)."""
    return uvarint(count + 1) if flexible else _I32.pack(count)


def _string(text: str, *, flexible: bool) -> bytes:
    encoded = text.encode()
    return (uvarint(len(encoded) + 1) if flexible else _I16.pack(len(encoded))) + encoded


def _fetch_topic_key(version: int, key: str | uuid.UUID) -> bytes:
    """A Fetch response topic's name (v4-v12) or id (v13+)."""
    if version >= FETCH_TOPIC_ID_MIN:
        assert isinstance(key, uuid.UUID)
        return key.bytes
    assert isinstance(key, str)
    return _string(key, flexible=version >= FETCH_FLEXIBLE_MIN)


def _fetch_partition_head(version: int, part: FetchedPartition) -> bytes:
    """A Fetch response partition up to its records, their length included."""
    flexible = version >= FETCH_FLEXIBLE_MIN
    head = _PARTITION_V4.pack(
        part.partition_index, part.error_code, part.high_watermark, part.high_watermark
    )
    if version >= 5:
        head += _I64.pack(part.log_start_offset)
    head += _NULL_COMPACT if flexible else _NO_ABORTED
    if version >= 11:
        head += _I32.pack(-1)  # preferred read replica: none
    size = len(part.records)
    # COMPACT_RECORDS from v12: an unsigned varint of the length + 1 (0 would be null).
    return head + (uvarint(size + 1) if flexible else _I32.pack(size))


def _tagged(tag: int, value: bytes) -> bytes:
    """A tagged-field section holding one field."""
    return b"\x01" + uvarint(tag) + uvarint(len(value)) + value


def _current_leader_tags(leader: LeaderAndEpoch | None, tag: int = _CURRENT_LEADER_TAG) -> bytes:
    """The tagged fields of a partition naming its current leader (Fetch's tag, or
    Produce's), or none."""
    if leader is None:
        return _NO_TAGS
    return _tagged(tag, _LEADER_AND_EPOCH.pack(*leader) + _NO_TAGS)


def _node_endpoints_tags(endpoints: Sequence[NodeEndpoint]) -> bytes:
    if not endpoints:
        return _NO_TAGS
    value = bytearray(uvarint(len(endpoints) + 1))
    for node in endpoints:
        value += _I32.pack(node.node_id) + _string(node.host, flexible=True)
        value += _I32.pack(node.port) + _NULL_COMPACT + _NO_TAGS  # rack: null
    return _tagged(_NODE_ENDPOINTS_TAG, bytes(value))


_PRODUCED_V3 = struct.Struct(">ihqq")  # index, error, base offset, log append time


class ProducedPartition(NamedTuple):
    """One partition of a Produce response. `record_errors` and `error_message` are written
    from v8, `current_leader` from v10 (tagged) when given."""

    partition_index: int
    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None
    current_leader: LeaderAndEpoch | None = None


ProducedTopic = tuple[str | uuid.UUID, list[ProducedPartition]]
"""A topic of a Produce response: its name, or from v13 its id, and its partitions."""


def encode_produce_response(
    version: int, topics: list[ProducedTopic], node_endpoints: Sequence[NodeEndpoint] = ()
) -> RawResponse:
    """A Produce response body of `version` (v3-v13), byte for byte what kafka-python
    encodes, without building its objects (a Produce is answered on the path of every
    acknowledged write). No log append time (-1), no throttle."""
    assert 3 <= version <= 13
    assert not node_endpoints or version >= PRODUCE_LEADER_HINT_MIN
    flexible = version >= PRODUCE_FLEXIBLE_MIN
    out = bytearray(_count(len(topics), flexible=flexible))
    errors: list[int] = []
    for key, partitions in topics:
        if version >= PRODUCE_TOPIC_ID_MIN:
            assert isinstance(key, uuid.UUID)
            out += key.bytes
        else:
            assert isinstance(key, str)
            out += _string(key, flexible=flexible)
        out += _count(len(partitions), flexible=flexible)
        for part in partitions:
            if part.error_code:
                errors.append(part.error_code)
            out += _PRODUCED_V3.pack(part.partition_index, part.error_code, part.base_offset, -1)
            if version >= 5:
                out += _I64.pack(part.log_start_offset)
            if version >= 8:
                out += _count(len(part.record_errors), flexible=flexible)
                for batch_index, message in part.record_errors:
                    out += _I32.pack(batch_index) + _nullable_string(message, flexible=flexible)
                    if flexible:
                        out += _NO_TAGS
                out += _nullable_string(part.error_message, flexible=flexible)
            if flexible:
                leader = part.current_leader if version >= PRODUCE_LEADER_HINT_MIN else None
                out += _current_leader_tags(leader, _CURRENT_LEADER_PRODUCE_TAG)
        if flexible:
            out += _NO_TAGS
    out += _I32.pack(0)  # throttle time
    if flexible:
        out += _node_endpoints_tags(node_endpoints)
    return RawResponse([bytes(out)], tuple(errors))


def _nullable_string(text: str | None, *, flexible: bool) -> bytes:
    if text is None:
        return _NULL_COMPACT if flexible else _I16.pack(-1)
    return _string(text, flexible=flexible)
