"""Produce validation: Kafka's rules for a client's records, checked before anything is
appended (sans-IO).

`validate_batch(records, rules)` takes the `records` of one partition of a Produce request
and returns the batch to append, or raises InvalidBatch with Kafka's error code and the
reason; `refuse_request` checks what applies to a whole request. Rules, in Kafka's order
(the error is INVALID_RECORD unless named):

1. The request (Kafka's KafkaApis and ProduceRequest.validateRecords): a transactional batch
   in a request without a transactional id fails the whole request with
   TRANSACTIONAL_ID_AUTHORIZATION_FAILED; acks is -1, 0 or 1 (INVALID_REQUIRED_ACKS). Each
   partition holds exactly one whole batch of magic 2 (a batch shorter than its header is
   CORRUPT_MESSAGE) with a known codec; zstd only from Produce v7
   (UNSUPPORTED_COMPRESSION_TYPE). Kafka ignores a cut-short batch at the end; tidelog
   refuses any byte after the batch.
2. Transactions: tidelog runs no transaction coordinator, so a transactional batch is
   answered as Kafka's coordinator answers a transactional id it does not know:
   INVALID_PRODUCER_ID_MAPPING.
3. The append (UnifiedLog.analyzeAndValidateRecords): base offset 0; no larger than the
   topic's max.message.bytes (MESSAGE_TOO_LARGE); a valid CRC-32C (CORRUPT_MESSAGE).
4. The batch (LogValidator.validateBatch): lastOffsetDelta + 1 == recordsCount > 0; no
   control bit; a producer id (>= 0) comes with a sequence and an epoch >= 0. tidelog's
   core tracks every producer id but -1, so an id below -1 is refused too (Kafka ignores
   it). A batch without a producer id (-1) is not idempotent whatever its sequence and
   epoch say: taken as Kafka takes it (kafkajs writes sequence 0 and epoch 0 there).
5. Every record decodes as Kafka's DefaultRecord.readFrom reads it (after decompression for
   gzip, snappy, lz4 and zstd, to at most max(DECOMPRESSED_SIZE_MAX, max.message.bytes)
   bytes), no bytes are left over, and the offset deltas run 0..n-1.
   Kafka rewrites a compressed batch whose inner offsets are wrong and does not look at
   them in an uncompressed one; tidelog refuses both, as consumers read the offsets as
   written. A negative key or value length is a null, as in Kafka. Two more rules protect
   consumers that read what Kafka's Java reader tolerates differently (kafka-python reads
   record attributes as a varint and header keys as strict UTF-8): record attributes are
   0, as every client writes them (they are unused in magic 2), and header keys are UTF-8
   (the protocol's type for them is a string).
6. Timestamps (LogValidator, the topic's timestamp type being CreateTime): maxTimestamp
   becomes the largest record timestamp (at least -1) and the type CreateTime, and the CRC
   is recomputed when either changes (DefaultRecordBatch.setMaxTimestamp). In a batch a
   client marked LogAppendTime every record has the batch's maxTimestamp; when that is -1
   each record is refused with INVALID_TIMESTAMP (in record_errors).

An uncompressed batch is neither copied nor decoded into objects: its records are checked in
place (tidelog.protocol.record_walk). Messages quote numbers and the partition's name,
never a client's bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from crc32c import crc32c

from tidelog.errors import InvalidBatch
from tidelog.protocol.codecs import CODEC_NAMES, ZSTD, CodecError, decompress
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.record_walk import (
    RECORD_SIZE_MIN,
    UNIFORM_COUNT_MIN,
    MalformedRecord,
    walk_records,
    walk_uniform_records,
)
from tidelog.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_SIZE_MAX,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    read_header,
    set_max_timestamp,
)

ACKS_VALID: Final = (-1, 0, 1)
ZSTD_PRODUCE_VERSION_MIN: Final = 7
DECOMPRESSED_SIZE_MAX: Final = 8 * 1024 * 1024
"""The records of a compressed batch may decompress to max(this, max.message.bytes):
a bound on the memory and time one batch costs (Kafka has none)."""
RECORD_ERRORS_MAX: Final = 100
"""The most record errors one answer lists (Kafka lists them all)."""
TIMESTAMP_MAX: Final = 2**63 - 1
_BATCH_LENGTH: Final = struct.Struct(">i")
_BATCH_LENGTH_POSITION: Final = 8
_MAGIC_POSITION: Final = 16
_ATTRIBUTES_LOW_POSITION: Final = 22  # the low byte of the big-endian attributes


class BatchRules(NamedTuple):
    """What the validation of one partition's batch depends on."""

    api_version: int  # of the Produce request
    max_message_bytes: int  # the topic's max.message.bytes
    partition_name: str  # "topic-partition", as Kafka's messages name it


def _refusal(code: ErrorCode, message: str) -> InvalidBatch:
    return InvalidBatch(code.name, message)


# ---------------------------------------------------------------------- requests -------
def is_transactional(records: bytes | None) -> bool:
    """Whether a partition's first batch is a v2 batch with the transactional bit
    (Kafka's RequestUtils.hasTransactionalRecords looks at first batches only)."""
    return (
        records is not None
        and len(records) > _ATTRIBUTES_LOW_POSITION
        and records[_MAGIC_POSITION] == MAGIC_V2
        and bool(records[_ATTRIBUTES_LOW_POSITION] & ATTR_TRANSACTIONAL)
    )


def refuse_request(
    *, acks: int, transactional_id: str | None, records: Iterable[bytes | None]
) -> InvalidBatch | None:
    """The error every partition of a Produce request gets, or None when the request as a
    whole is acceptable (each partition's batch is checked by `validate_batch`)."""
    if transactional_id is None and any(map(is_transactional, records)):
        return _refusal(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "Transactional records need a transactional id (and transactions are not "
            "supported by this broker)",
        )
    if acks not in ACKS_VALID:
        return _refusal(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}: use -1 (all), 0 or 1")
    return None


# ---------------------------------------------------------------------- batches --------
def validate_batch(records: bytes | None, rules: BatchRules) -> bytes:
    """The batch to append for one partition of a Produce request: `records` itself, or a
    copy with its max timestamp fixed up. Raises InvalidBatch (rules 1-6 of this module)."""
    batch = records or b""
    header = _check_request(batch, rules)
    if header.attributes & ATTR_TRANSACTIONAL:
        raise _refusal(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"Transactional records in topic partition {rules.partition_name}: this broker "
            "has no transaction coordinator, so no transactional id is known to it",
        )
    _check_append(batch, header, rules)
    _check_header(header, rules)
    largest_delta = _check_records(batch, header, rules)
    return _with_timestamps(batch, header, largest_delta, rules)


def _check_request(batch: bytes, rules: BatchRules) -> BatchHeader:
    """Rule 1: exactly one whole batch of magic 2 and a known codec."""
    version = rules.api_version
    if len(batch) < LOG_OVERHEAD:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch "
            "per partition",
        )
    size = LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(batch, _BATCH_LENGTH_POSITION)[0]
    if size < HEADER_SIZE:
        raise _refusal(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record batch is corrupt (the size {size} is smaller than the minimum allowed "
            f"overhead {HEADER_SIZE})",
        )
    if size > len(batch):
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one whole record "
            f"batch per partition: the batch declares {size} bytes, {len(batch)} are present",
        )
    header = read_header(batch)
    if header.magic != MAGIC_V2:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record "
            f"batches with magic version {MAGIC_V2}",
        )
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec not in CODEC_NAMES:
        raise _refusal(ErrorCode.INVALID_RECORD, f"Unknown compression type id: {codec}")
    if codec == ZSTD and version < ZSTD_PRODUCE_VERSION_MIN:
        raise _refusal(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    if size < len(batch):
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly "
            f"one record batch per partition: {len(batch) - size} bytes follow the batch",
        )
    return header


def _check_append(batch: bytes, header: BatchHeader, rules: BatchRules) -> None:
    """Rule 3: base offset 0, max.message.bytes, CRC-32C."""
    name = rules.partition_name
    if header.base_offset != 0:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"The baseOffset of the record batch in the append to {name} should be 0, but "
            f"it is {header.base_offset}",
        )
    size_max = min(rules.max_message_bytes, BATCH_SIZE_MAX)
    if len(batch) > size_max:
        raise _refusal(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size in the append to {name} is {len(batch)} bytes which "
            f"exceeds the maximum configured value of {size_max}.",
        )
    if crc32c(memoryview(batch)[CRC_START:]) != header.crc:
        raise _refusal(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record is corrupt (stored crc = {header.crc}) in topic partition {name}.",
        )


def _check_header(header: BatchHeader, rules: BatchRules) -> None:
    """Rule 4: offsets against the count, no control bit, producer fields."""
    name = rules.partition_name
    last, count = header.last_offset_delta, header.records_count
    if last + 1 <= 0:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Batch has an invalid offset range: [0, {last}] in topic partition {name}",
        )
    if count <= 0:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Invalid reported count for record batch: {count} in topic partition {name}",
        )
    if last + 1 != count:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {last}] and count of records {count} in "
            f"topic partition {name}",
        )
    if header.attributes & ATTR_CONTROL:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Clients are not allowed to write control records in topic partition {name}",
        )
    _check_producer(header, name)


def _check_producer(header: BatchHeader, name: str) -> None:
    producer, sequence = header.producer_id, header.base_sequence
    if producer >= 0 and sequence < 0:
        reason = f"Invalid sequence number {sequence}"
    elif producer >= 0 and header.producer_epoch < 0:
        reason = f"Invalid producer epoch {header.producer_epoch}"
    elif producer < NO_PRODUCER_ID:
        reason = "Invalid producer id"
    else:
        return
    raise _refusal(
        ErrorCode.INVALID_RECORD,
        f"{reason} in record batch with producerId {producer} in topic partition {name}",
    )


def _check_records(batch: bytes, header: BatchHeader, rules: BatchRules) -> int:
    """Rule 5: the records decode; the largest timestamp delta among them."""
    name = rules.partition_name
    codec = header.attributes & ATTR_COMPRESSION_MASK
    records, start = batch, HEADER_SIZE
    if codec:
        size_max = min(max(DECOMPRESSED_SIZE_MAX, rules.max_message_bytes), BATCH_SIZE_MAX)
        try:
            records = decompress(codec, batch[HEADER_SIZE:], size_max=size_max)
        except CodecError as error:
            raise _refusal(
                ErrorCode.INVALID_RECORD,
                f"Failed to decompress the {CODEC_NAMES[codec]} record stream in topic "
                f"partition {name}: {error}",
            ) from None
        start = 0
    count = header.records_count
    if count > (len(records) - start) // RECORD_SIZE_MIN:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"{count} records cannot fit in {len(records) - start} bytes of records in "
            f"topic partition {name}",
        )
    if count >= UNIFORM_COUNT_MIN:
        largest = walk_uniform_records(records, start, count)
        if largest is not None:
            return largest
    try:
        return walk_records(records, start, count)
    except MalformedRecord as malformed:
        raise _refusal(
            ErrorCode.INVALID_RECORD,
            f"Record {malformed.index} of the batch in topic partition {name}: {malformed.reason}",
        ) from None


def _with_timestamps(
    batch: bytes, header: BatchHeader, largest_delta: int, rules: BatchRules
) -> bytes:
    """Rule 6: `batch`, or a copy with timestamp type CreateTime and its max timestamp."""
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if log_append_time and header.max_timestamp == NO_TIMESTAMP:
        raise _log_append_time_refusal(header.records_count)
    largest = header.max_timestamp if log_append_time else header.base_timestamp + largest_delta
    if largest > TIMESTAMP_MAX:
        raise _refusal(
            ErrorCode.INVALID_TIMESTAMP,
            f"A record's timestamp {largest} does not fit in 64 bits in topic partition "
            f"{rules.partition_name}",
        )
    max_timestamp = max(NO_TIMESTAMP, largest)
    if max_timestamp == header.max_timestamp and not log_append_time:
        return batch
    return set_max_timestamp(batch, max_timestamp=max_timestamp)


def _log_append_time_refusal(count: int) -> InvalidBatch:
    listed = min(count, RECORD_ERRORS_MAX)
    reason = (
        "Invalid timestamp type in message. Producer should not set timestamp type to "
        "LogAppendTime."
    )
    return InvalidBatch(
        ErrorCode.INVALID_TIMESTAMP.name,
        "One or more records have been rejected due to invalid timestamp"
        + (f" (the first {listed} of {count} listed)" if listed < count else ""),
        tuple((index, reason) for index in range(listed)),
    )
