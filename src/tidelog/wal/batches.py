"""Building record batches for tools, tests and benchmarks, with kafka-python's builder.

Not on any hot path of the log: the log moves batches as bytes and never builds them.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.records import stamp
from tidelog.types import Epoch, Offset
from tidelog.wal.kafka_records import DefaultRecordBatchBuilder

BATCH_BUILD_BYTES_MAX = 64 * 1024 * 1024


NO_PRODUCER = (-1, -1, -1)


def producer_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int = 0,
    producer: tuple[int, int, int] = NO_PRODUCER,
) -> bytes:
    """One uncompressed batch v2 holding `values` (None: a tombstone) with `keys` (default:
    none), as a producer sends it: the leader stamps offsets and epoch. Record i has
    timestamp `timestamp_ms + i`. `producer` is (producer id, producer epoch, base
    sequence) of an idempotent producer."""
    assert values
    assert keys is None or len(keys) == len(values)
    producer_id, producer_epoch, base_sequence = producer
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=BATCH_BUILD_BYTES_MAX,
    )
    for delta, value in enumerate(values):
        key = None if keys is None else keys[delta]
        metadata = builder.append(
            delta, timestamp=timestamp_ms + delta, key=key, value=value, headers=[]
        )
        assert metadata is not None, "batch over BATCH_BUILD_BYTES_MAX"
    return bytes(builder.build())


def build_batch(
    values: list[bytes], *, base_offset: Offset, epoch: Epoch, timestamp_ms: int = 0
) -> bytes:
    """`producer_batch(values)` stamped with the leader's base offset and epoch."""
    batch = producer_batch(values, timestamp_ms=timestamp_ms)
    return stamp(batch, base_offset=base_offset, epoch=epoch)


def build_batches(
    sizes: list[int],
    *,
    base_offset: int = 0,
    epochs: list[Epoch] | None = None,
    value_bytes: int = 100,
    timestamp_ms: int = 0,
) -> list[bytes]:
    """Consecutive batches of `sizes[i]` records each from `base_offset`, batch i in
    `epochs[i]` (epoch 1 by default), values of `value_bytes` bytes."""
    out: list[bytes] = []
    offset = Offset(base_offset)
    for number, size in enumerate(sizes):
        epoch = epochs[number] if epochs is not None else Epoch(1)
        values = [bytes([65 + (offset + i) % 26]) * value_bytes for i in range(size)]
        out.append(
            build_batch(values, base_offset=offset, epoch=epoch, timestamp_ms=timestamp_ms + offset)
        )
        offset = Offset(offset + size)
    return out
