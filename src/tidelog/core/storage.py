"""The storage a replica reads, and the in-memory implementation the simulator uses.

The replica only reads storage (`load`, `read`); the caller writes it while carrying out a
`Ready` (`save_hard_state`, `truncate_to`, `append`, `sync`). Nothing written counts as durable
until `sync()` returns. The disk implementation lives in `tidelog.wal`.

Storage decides what is damaged; the replica decides what may happen then. A storage that
finds a damaged batch it had made durable sets it and everything after it aside, and
remembers what it held before as a `RepairFloor` (`StoredState.repair_floor`) until the
replica says its log reached it again (`clear_repair_floor`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tidelog.core.epochs import EpochEntry, EpochHistory
from tidelog.core.membership import VoterSet, VoterSetEntry, VoterSetRecords
from tidelog.core.messages import HardState
from tidelog.core.producers import ProducerEntry
from tidelog.errors import StorageError
from tidelog.records import read_header
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId, Offset


class RepairFloor(NamedTuple):
    """How far a log reached before its storage set a damaged part of it aside: its last
    record was of `epoch` and it ended at `end_offset` (None when the damage hid how far).

    A replica may have acknowledged all of it, so until its own durable log is at least as
    up to date again (`reached_by`), it votes as if it still held that log, does not
    campaign, and tells its leader it is repairing (scenarios 14 and 16)."""

    epoch: Epoch
    end_offset: Offset | None

    def reached_by(self, last_epoch: Epoch, end_offset: Offset) -> bool:
        """Whether a log ending at `end_offset`, its last record of `last_epoch`, is at least
        as up to date as the floor (Raft §5.4.1's comparison). With an unknown end only a
        later epoch is: its leader held every record committed before it."""
        if last_epoch != self.epoch:
            return last_epoch > self.epoch
        return self.end_offset is not None and end_offset >= self.end_offset


def later_floor(first: RepairFloor | None, second: RepairFloor | None) -> RepairFloor | None:
    """The more up to date of two floors (an unknown end beats any offset of its epoch)."""
    if first is None or second is None:
        return first or second
    return max(first, second, key=lambda f: (f.epoch, f.end_offset is None, f.end_offset or 0))


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a replica recovers from its storage when it starts."""

    hard_state: HardState
    hwm: Offset
    log_start_offset: Offset
    log_end_offset: Offset
    epochs: tuple[EpochEntry, ...]
    repair_floor: RepairFloor | None = None
    # The idempotent producers' snapshot at the log start (core/producers.py).
    producers: tuple[ProducerEntry, ...] = ()
    # The id of the directory that holds this copy (KIP-853), made with the directory: a
    # copy on an empty disk has a new one (core/membership.py).
    directory_id: DirectoryId = NO_DIRECTORY
    # The voter sets the log holds (core/membership.py's `VoterSetRecords`): derived from
    # its VOTERS control batches, as the epochs are from its batches.
    voter_sets: tuple[VoterSetEntry, ...] = ()


class LogStorage(Protocol):
    """The log of one partition as the replica and its driver see it."""

    def load(self) -> StoredState:
        """The durable state to start from. The hwm is at most the log end offset."""
        ...

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """Whole batches from the one holding `start_offset`, each ending at or before
        `end_offset`, up to `max_bytes` (but at least one batch when one qualifies)."""
        ...

    def save_hard_state(self, hard_state: HardState) -> None: ...

    def truncate_to(self, *, offset: Offset) -> None:
        """Remove every batch at or above `offset`, which is a batch boundary."""
        ...

    def append(self, batches: list[bytes]) -> None:
        """Append stamped, checked batches at the log end."""
        ...

    def save_hwm(self, hwm: Offset) -> None: ...

    def lower_hwm(self, offset: Offset) -> None:
        """Lower the saved HWM (and any checkpoint of it, durably) to `offset`, so a
        truncation may cut below the old one: only for records an ISR-mode replica gives
        up after an unclean election (`Ready.given_up`, docs/isr.md rule 10)."""
        ...

    def advance_log_start(
        self, offset: Offset, *, producers: tuple[ProducerEntry, ...] | None = None
    ) -> None:
        """Make `offset` (at most the saved HWM) the log start; drop what lies wholly below.
        `producers` is the producer snapshot at `offset`, saved no later than the log start
        (None: keep the one saved last)."""
        ...

    def reset(
        self,
        *,
        start_offset: Offset,
        prev_epoch: Epoch,
        producers: tuple[ProducerEntry, ...] | None = None,
        voters: VoterSet | None = None,
    ) -> None:
        """Drop the whole log and start it empty at `start_offset`, which becomes the log
        start and the HWM (a follower behind its leader's log start). `prev_epoch` is the
        epoch of the record at start_offset - 1: the epoch history keeps it (`EpochHistory.reset`);
        `producers` is the leader's producer snapshot there, `voters` its voter set there
        (None: the partition's first; `VoterSetRecords.reset`)."""
        ...

    def clear_repair_floor(self) -> None:
        """The replica's durable log reached the repair floor again: forget the floor,
        durably with the next `sync()` (after the data that reached it)."""
        ...

    def sync(self) -> None:
        """Make everything written so far durable."""
        ...


def initial_state(epochs: tuple[EpochEntry, ...] = ()) -> StoredState:
    return StoredState(
        hard_state=HardState(epoch=Epoch(0), voted_for=None),
        hwm=Offset(0),
        log_start_offset=Offset(0),
        log_end_offset=Offset(0),
        epochs=epochs,
    )


FIRST_DIRECTORY = DirectoryId(1)
"""The directory id of a MemoryStorage made without one."""


@dataclass(slots=True)
class _MemoryLog:
    batches: list[bytes]
    ends: list[int]
    hard_state: HardState
    hwm: Offset
    log_start: Offset = field(default_factory=lambda: Offset(0))
    epochs: EpochHistory = field(default_factory=EpochHistory)
    repair_floor: RepairFloor | None = None
    damaged: set[Offset] = field(default_factory=set)  # bases of batches that rotted
    producers: tuple[ProducerEntry, ...] = ()
    voters: VoterSetRecords = field(default_factory=VoterSetRecords)

    def copy(self) -> _MemoryLog:
        return _MemoryLog(
            list(self.batches),
            list(self.ends),
            self.hard_state,
            self.hwm,
            self.log_start,
            self.epochs.copy(),
            self.repair_floor,
            set(self.damaged),
            self.producers,
            self.voters.copy(),
        )

    @property
    def end(self) -> Offset:
        return Offset(self.ends[-1]) if self.ends else self.log_start

    def cut_damaged(self, cut: Offset, floor: RepairFloor) -> None:
        """Drop the batch at `cut` and everything after it; remember `floor`."""
        index = bisect.bisect_right(self.ends, cut)
        del self.batches[index:]
        del self.ends[index:]
        self.epochs.truncate(cut)
        self.voters.truncate(cut)
        self.log_start = Offset(min(self.log_start, cut))
        self.hwm = Offset(min(self.hwm, cut))
        self.damaged = {base for base in self.damaged if base < cut}
        self.repair_floor = later_floor(self.repair_floor, floor)


class MemoryStorage:
    """A LogStorage in memory that forgets, on `crash()`, everything not yet synced, and
    whose batches can rot (`corrupt`) as a disk's do, to be set aside by `quarantine`."""

    def __init__(self, directory_id: DirectoryId = FIRST_DIRECTORY) -> None:
        self.directory_id = directory_id  # a new MemoryStorage is a new, empty directory
        empty = _MemoryLog([], [], HardState(Epoch(0), None), Offset(0))
        self._working = empty
        self._durable = empty.copy()
        self.needs_repair: Offset | None = None  # the base of a rotten batch a read found

    # --- LogStorage ---------------------------------------------------------------------
    def load(self) -> StoredState:
        log = self._working
        end = log.end
        return StoredState(
            hard_state=log.hard_state,
            hwm=Offset(min(max(log.hwm, log.log_start), end)),
            log_start_offset=log.log_start,
            log_end_offset=end,
            epochs=log.epochs.entries,
            repair_floor=log.repair_floor,
            directory_id=self.directory_id,
            voter_sets=log.voters.entries,
            producers=log.producers,
        )

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """As `LogStorage.read`; a rotten batch raises StorageError and is never returned."""
        log = self._working
        assert start_offset >= log.log_start, "read below the log start"
        index = bisect.bisect_right(log.ends, start_offset)
        out: list[bytes] = []
        size = 0
        while index < len(log.batches) and log.ends[index] <= end_offset:
            batch = log.batches[index]
            if out and size + len(batch) > max_bytes:
                break
            base = read_header(batch).base_offset
            if base in log.damaged:
                self.needs_repair = base
                raise StorageError(f"needs repair: corrupt batch at offset {base}")
            out.append(batch)
            size += len(batch)
            index += 1
        return out

    def save_hard_state(self, hard_state: HardState) -> None:
        self._working.hard_state = hard_state

    def truncate_to(self, *, offset: Offset) -> None:
        log = self._working
        index = bisect.bisect_right(log.ends, offset)
        if index < len(log.batches):
            assert read_header(log.batches[index]).base_offset == offset, "not a batch boundary"
        del log.batches[index:]
        del log.ends[index:]
        log.epochs.truncate(offset)
        log.voters.truncate(offset)

    def append(self, batches: list[bytes]) -> None:
        log = self._working
        for batch in batches:
            header = read_header(batch)
            end = log.ends[-1] if log.ends else log.log_start
            assert header.base_offset == end, "append leaves a gap"
            log.epochs.extend(header)
            log.voters.on_batch(batch, header.base_offset)
            log.batches.append(batch)
            log.ends.append(header.next_offset)

    def save_hwm(self, hwm: Offset) -> None:
        self._working.hwm = hwm

    def lower_hwm(self, offset: Offset) -> None:
        self._working.hwm = Offset(min(self._working.hwm, offset))

    def advance_log_start(
        self, offset: Offset, *, producers: tuple[ProducerEntry, ...] | None = None
    ) -> None:
        log = self._working
        assert offset <= log.hwm, "log start past the HWM"
        if offset <= log.log_start:
            return
        log.log_start = offset
        if producers is not None:
            log.producers = producers
        index = bisect.bisect_right(log.ends, offset)
        del log.batches[:index]
        del log.ends[:index]
        first = read_header(log.batches[0]).base_offset if log.batches else offset
        log.epochs.trim(first)
        log.voters.trim(first)

    def reset(
        self,
        *,
        start_offset: Offset,
        prev_epoch: Epoch,
        producers: tuple[ProducerEntry, ...] | None = None,
        voters: VoterSet | None = None,
    ) -> None:
        log = self._working
        if producers is not None:
            log.producers = producers
        log.voters.reset(start_offset, voters)
        log.batches.clear()
        log.ends.clear()
        log.log_start = start_offset
        log.hwm = start_offset
        log.epochs.reset(start_offset, prev_epoch)

    def clear_repair_floor(self) -> None:
        self._working.repair_floor = None

    def sync(self) -> None:
        self._durable = self._working.copy()

    # --- damage -------------------------------------------------------------------------
    def quarantine(self) -> bool:
        """Set aside the rotten batch a read found (`needs_repair`) and everything after
        it, durably at once: the log ends before it, the HWM at most there, and the repair
        floor records how far the log reached. False when no read found one."""
        cut = self.needs_repair
        if cut is None:
            return False
        self.needs_repair = None
        working = self._working
        floor = RepairFloor(working.epochs.last_epoch, working.end)
        for log in (self._working, self._durable):
            log.cut_damaged(cut, floor)
        return True

    # --- for the simulator --------------------------------------------------------------
    def crash(self) -> None:
        """Lose everything written since the last sync, as a power cut would."""
        self._working = self._durable.copy()

    def corrupt(self, offset: Offset) -> None:
        """The batch holding `offset` rots on the medium (synced or not): reads of it fail."""
        log = self._working
        index = bisect.bisect_right(log.ends, offset)
        assert log.log_start <= offset < log.end, "corrupt a batch the log holds"
        base = read_header(log.batches[index]).base_offset
        self._working.damaged.add(base)
        self._durable.damaged.add(base)

    def voted_for(self) -> NodeId | None:
        return self._working.hard_state.voted_for
