"""The round that carries out a `Ready`: the one copy, for the broker, the simulator and
the tests.

Rules (the contract of `tidelog.core.Ready`):
1. `write_ready` writes the hard state, a reset or truncation, the batches, the HWM, a new
   log start and the end of a repair; nothing is durable yet (a reset or log start move may
   already be).
2. The caller sends `ready.messages` (they may go before the sync).
3. `storage.sync()`; only then may `ready.messages_after_persist` be sent.
4. `replica.advance(ready)`.
A round is split where its callers differ, the sync: `begin_round` does 1 and 2,
`finish_round` the sending after the sync and 4; the broker syncs in a worker thread in
between, the simulator after a simulated delay, and `run_round` syncs at once (tests).

A replica starts with `open_replica`: its start reads every stored batch (checking each
CRC-32C), and a damaged one is set aside by its storage (`quarantine`) before it starts
again, as a follower with a repair floor (scenario 16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidelog.core.messages import Message, Ready
from tidelog.core.replica import NO_LIVENESS, Liveness, Replica, ReplicaConfig, Rng
from tidelog.core.storage import LogStorage
from tidelog.errors import StorageError
from tidelog.records import read_header
from tidelog.types import Offset
from tidelog.wal.kafka_records import DefaultRecordBatch

APPLY_CHUNK_BYTES = 1 << 20
ApplyRecord = Callable[[int, "bytes | None", "bytes | None"], None]

# Each quarantine cuts the log before its first damaged batch, and the start reads the log
# in offset order: the second start finds no damage below the cut. A bound all the same.
OPEN_ATTEMPTS_MAX = 8


class RepairableStorage(LogStorage, Protocol):
    """Storage that can set aside damage a read found."""

    @property
    def needs_repair(self) -> object:
        """What a read found damaged (None: nothing): every read fails until `quarantine`."""
        ...

    def quarantine(self) -> bool:
        """Set aside the damaged batch a read found and everything after it, durably, and
        record a repair floor. False when no read found damage (or it does not recur)."""
        ...


Send = Callable[[tuple[Message, ...]], None]


def begin_round(replica: Replica, storage: LogStorage, send: Send) -> Ready | None:
    """Take the replica's Ready (None when it has none), write it and send what needs no
    durability. The caller then syncs when `ready.must_sync`, and calls `finish_round`."""
    if not replica.has_ready():
        return None
    ready = replica.ready()
    write_ready(storage, ready)
    send(ready.messages)
    return ready


def finish_round(replica: Replica, ready: Ready, send: Send) -> None:
    """After the sync: send the acknowledgements and votes that promised durable state,
    then let the replica advance."""
    send(ready.messages_after_persist)
    replica.advance(ready)


def run_round(replica: Replica, storage: LogStorage, send: Send) -> Ready | None:
    """A whole round around a sync taken at once; None when the replica had no Ready."""
    ready = begin_round(replica, storage, send)
    if ready is None:
        return None
    if ready.must_sync:
        storage.sync()
    finish_round(replica, ready, send)
    return ready


def write_ready(storage: LogStorage, ready: Ready) -> None:
    """Step 1: hand the Ready's writes to the storage, in order. Syncs nothing."""
    if ready.hard_state is not None:
        storage.save_hard_state(ready.hard_state)
    if ready.reset_to is not None:
        storage.reset(
            start_offset=ready.reset_to,
            prev_epoch=ready.reset_prev_epoch,
            producers=ready.producers,
            voters=ready.reset_voters,
        )
    for lost in ready.given_up:  # ISR mode: committed records given up (unclean election)
        storage.lower_hwm(lost.start_offset)
    if ready.truncate_to is not None:
        storage.truncate_to(offset=ready.truncate_to)
    if ready.batches:
        storage.append(list(ready.batches))
    if ready.hwm is not None:
        storage.save_hwm(ready.hwm)
    if ready.log_start_offset is not None:  # after the HWM it may not pass
        storage.advance_log_start(ready.log_start_offset, producers=ready.producers)
    if ready.repair_floor_cleared:  # durable with the sync, after the data that reached it
        storage.clear_repair_floor()


def open_replica(
    config: ReplicaConfig,
    storage: RepairableStorage,
    rng: Rng,
    liveness: Liveness = NO_LIVENESS,
) -> Replica:
    """A replica on `storage`, after setting aside any damage its start reads find."""
    for _ in range(OPEN_ATTEMPTS_MAX):
        try:
            return Replica(config, storage, rng, liveness)
        except StorageError:
            if not storage.quarantine():
                raise
    raise StorageError(f"still damaged after {OPEN_ATTEMPTS_MAX} repairs")


def apply_committed(replica: Replica, applied_offset: int, apply: ApplyRecord) -> int:
    """Hand `apply` every committed data record at or above `applied_offset`, in offset
    order (commit index, then last applied); returns the new applied offset. The metadata
    log and the group coordinators' logs are state machines fed this way."""
    while True:
        batches = replica.read_committed(Offset(applied_offset), max_bytes=APPLY_CHUNK_BYTES)
        if not batches:
            break
        for batch in batches:
            header = read_header(batch)
            if not header.is_control:
                for offset, key, value in decode_records(batch):
                    if offset >= applied_offset:
                        apply(offset, key, value)
            applied_offset = header.next_offset
    return applied_offset


def decode_records(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of a data batch."""
    return [(record.offset, record.key, record.value) for record in DefaultRecordBatch(batch)]
