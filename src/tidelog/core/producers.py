"""Idempotent producers: the sequence state of each producer id, derived from the log.

Rules of this file (Kafka's ProducerStateManager, correctness.md scenario 17):
- The state is a function of the log: every replica updates it on every append and undoes
  it on truncation, so a new leader deduplicates exactly as the old one did.
- Per producer id, the last `BATCHES_KEPT` batches are kept (first and last sequence,
  offsets). A retried batch that matches one of them is a duplicate: it is answered with
  the offsets it got the first time, and not appended again.
- Within one producer epoch the next batch must start right after the last sequence
  (sequences wrap at 2**31); a gap is OutOfOrderSequence. An older producer epoch is fenced;
  a newer one starts at sequence 0.
- What the log no longer shows is kept as a snapshot at the log start (Kafka's producer
  snapshot, Raft's snapshot of the state machine): whenever the log start moves
  (DeleteRecords, retention, a follower following its leader's), storage saves, with it,
  each producer's last batch below it (`snapshot`); a reset carries the leader's snapshot to
  the follower. A replica starts from the snapshot, then replays its log (`restore`). So a
  retry whose first copy was deleted is still recognised (scenario 24), across restarts,
  resets and leader changes, and never written twice.
- Should a producer still be unknown (its state evicted past PRODUCERS_MAX), a batch not
  starting at sequence 0 may be retrying a batch that is already in the log, so it is
  refused with UnknownProducerId (Kafka's UNKNOWN_PRODUCER_ID) rather than written twice.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.errors import (
    InvalidProducerEpoch,
    OutOfOrderSequence,
    TidelogError,
    UnknownProducerId,
)
from tidelog.records import NO_PRODUCER_ID, BatchHeader
from tidelog.types import Offset

BATCHES_KEPT = 5
SEQUENCE_MODULUS = 1 << 31
PRODUCERS_MAX = 100_000
PRODUCER_EPOCH_MAX = (1 << 15) - 1  # Kafka's producer epoch is an int16
# One snapshot entry on the wire: producer id, epoch, first and last sequence, offsets.
ENTRY_WIRE = struct.Struct(">qiiiqq")


class SequencedBatch(NamedTuple):
    first_sequence: int
    last_sequence: int
    base_offset: Offset
    next_offset: Offset


class ProducerEntry(NamedTuple):
    """One producer in a snapshot: its epoch and its last batch below the log start."""

    producer_id: int
    epoch: int
    batch: SequencedBatch


def encode_entries(entries: Iterable[ProducerEntry]) -> tuple[bytes, ...]:
    """Each entry as ENTRY_WIRE bytes (a reset's `producers`)."""
    return tuple(ENTRY_WIRE.pack(e.producer_id, e.epoch, *e.batch) for e in entries)


def decode_entries(blobs: Sequence[bytes], *, below: Offset) -> tuple[ProducerEntry, ...] | None:
    """The entries a leader sent, or None when any is malformed (hostile input: the message
    is dropped). Each must name a batch wholly below `below`, the offset reset to."""
    if len(blobs) > PRODUCERS_MAX:
        return None
    entries = []
    for blob in blobs:
        if len(blob) != ENTRY_WIRE.size:
            return None
        producer_id, epoch, first, last, base, end = ENTRY_WIRE.unpack(blob)
        entry = ProducerEntry(
            producer_id, epoch, SequencedBatch(first, last, Offset(base), Offset(end))
        )
        if not entry_is_valid(entry, below=below):
            return None
        entries.append(entry)
    return tuple(entries)


def entry_is_valid(entry: ProducerEntry, *, below: Offset) -> bool:
    """Whether an entry read from the network or a disk can be true."""
    first, last, base, end = entry.batch
    return (
        entry.producer_id >= 0
        and 0 <= entry.epoch <= PRODUCER_EPOCH_MAX
        and 0 <= first < SEQUENCE_MODULUS
        and 0 <= last < SEQUENCE_MODULUS
        and 0 <= base < end <= below
    )


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[SequencedBatch] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


def last_sequence_of(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


class ProducerStates:
    """What each idempotent producer has written, as far as the log shows."""

    def __init__(self) -> None:
        self.producers: dict[int, _Producer] = {}

    def check(self, header: BatchHeader) -> SequencedBatch | TidelogError | None:
        """Before a leader appends: the earlier copy of a duplicate, an error, or None."""
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return None
        producer = self.producers.get(header.producer_id)
        if producer is None or header.producer_epoch > producer.epoch:
            if header.base_sequence == 0:
                return None  # a new producer, or a new epoch: its sequences start afresh
            if producer is None:
                return UnknownProducerId(
                    f"producer {header.producer_id} is not known here (sequence "
                    f"{header.base_sequence}): its earlier batches may be deleted"
                )
            return OutOfOrderSequence(
                f"producer {header.producer_id}: a new epoch {header.producer_epoch} starts "
                f"at sequence {header.base_sequence}, not 0"
            )
        if header.producer_epoch < producer.epoch:
            return InvalidProducerEpoch(
                f"producer {header.producer_id} epoch {header.producer_epoch} is fenced "
                f"by epoch {producer.epoch}"
            )
        last = last_sequence_of(header)
        for batch in producer.batches:
            if (batch.first_sequence, batch.last_sequence) == (header.base_sequence, last):
                return batch
        expected = (producer.batches[-1].last_sequence + 1) % SEQUENCE_MODULUS
        if producer.batches and header.base_sequence != expected:
            return OutOfOrderSequence(
                f"producer {header.producer_id}: sequence {header.base_sequence}, "
                f"expected {expected}"
            )
        return None

    def on_append(self, header: BatchHeader) -> None:
        """A batch was appended to the log (by a leader or a follower)."""
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return
        producer = self.producers.get(header.producer_id)
        if producer is None or header.producer_epoch > producer.epoch:
            if producer is None and len(self.producers) >= PRODUCERS_MAX:
                self.producers.pop(next(iter(self.producers)))  # forget the oldest
            producer = _Producer(header.producer_epoch)
            self.producers[header.producer_id] = producer
        producer.batches.append(
            SequencedBatch(
                header.base_sequence,
                last_sequence_of(header),
                header.base_offset,
                header.next_offset,
            )
        )

    def snapshot(self, log_start: Offset) -> tuple[ProducerEntry, ...]:
        """What must outlive the records below `log_start`: per producer, its last batch
        wholly below it (the log shows the rest)."""
        entries = []
        for producer_id, producer in self.producers.items():
            below = [batch for batch in producer.batches if batch.next_offset <= log_start]
            if below:
                entries.append(ProducerEntry(producer_id, producer.epoch, below[-1]))
        return tuple(entries)

    def restore(self, entries: Iterable[ProducerEntry]) -> None:
        """Start from a snapshot (before replaying the log above it)."""
        for producer_id, epoch, batch in entries:
            producer = _Producer(epoch)
            producer.batches.append(batch)
            self.producers[producer_id] = producer

    def truncate(self, offset: Offset) -> None:
        """The log lost everything at or above `offset`: forget those batches."""
        for producer_id in list(self.producers):
            batches = self.producers[producer_id].batches
            while batches and batches[-1].next_offset > offset:
                batches.pop()
            if not batches:
                del self.producers[producer_id]
