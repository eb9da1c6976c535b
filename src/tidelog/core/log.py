"""The replica's view of its log: what storage holds, plus what it has not persisted yet.

Rules of this file:
- Batches appended since the last `Ready` live in `unstable`; a truncation below them is
  recorded in `truncate_to` and carried out by the caller before the next append.
- The leader-epoch history (epoch, start offset) follows every append and truncation, so
  divergence is always found by epochs, never by the HWM (KIP-101). It reaches one record
  below the first batch held: a log emptied by DeleteRecords or a reset still knows the
  epoch of its last record (Raft's "last included term"), for votes and consistency checks.
- `durable_end_offset` is how far the caller has made the log durable; only that much may
  count toward a quorum (Jepsen NATS 2.12.1).
- The voter-set history (core/membership.py) follows the log as the epoch history does:
  every VOTERS control batch appended adds the set it holds where it lies (a set takes
  effect where it is appended), a truncation removes the sets it cuts, a log start move
  keeps the set in effect at the start, and a reset takes the leader's set there. What
  storage holds (`StoredState.voter_sets`) starts it, after the partition's first set.
"""

from __future__ import annotations

import bisect

from tidelog.core.epochs import EpochEntry, EpochHistory
from tidelog.core.membership import VoterSet, history_of, voters_in_batch
from tidelog.core.storage import LogStorage, StoredState
from tidelog.records import BatchHeader, read_header
from tidelog.types import NO_EPOCH, Epoch, Offset


class ReplicaLog:
    """Reads from storage and from memory; records writes for the next `Ready`."""

    def __init__(self, storage: LogStorage, state: StoredState, first_voters: VoterSet) -> None:
        self.storage = storage
        self.log_start_offset = state.log_start_offset
        self.log_end_offset = state.log_end_offset
        self.durable_end_offset = state.log_end_offset
        self.history = EpochHistory(state.epochs)
        self.voters = history_of(first_voters, state.voter_sets, state.log_start_offset)
        # Storage holds [log_start_offset, stored_end_offset); memory holds the rest.
        self.stored_end_offset = state.log_end_offset
        self.unstable: list[bytes] = []
        self.unstable_ends: list[int] = []
        self.truncate_to: Offset | None = None
        self.reset_to: Offset | None = None
        self.reset_prev_epoch = NO_EPOCH
        self.reset_voters: VoterSet | None = None
        self.start_moved_to: Offset | None = None

    # --- questions ------------------------------------------------------------------
    @property
    def epochs(self) -> tuple[EpochEntry, ...]:
        """The leader-epoch history, oldest first."""
        return self.history.entries

    @property
    def last_epoch(self) -> Epoch:
        return self.history.last_epoch

    def epoch_at(self, offset: Offset) -> Epoch:
        """The epoch of the record at `offset` (NO_EPOCH below the history: a deleted
        record more than one below the first batch held)."""
        assert offset < self.log_end_offset or offset < 0
        return self.history.epoch_at(offset)

    def end_offset_for_epoch(self, epoch: Epoch) -> tuple[Epoch, Offset]:
        """(largest epoch <= `epoch`, the offset where it ends here): Kafka's
        OffsetsForLeaderEpoch answer. Before the first epoch: (NO_EPOCH, first offset)."""
        return self.history.end_offset_for_epoch(epoch, log_end_offset=self.log_end_offset)

    def epoch_start_offset(self, epoch: Epoch) -> Offset | None:
        return self.history.epoch_start_offset(epoch)

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """Whole batches from the one holding `start_offset`, each ending by `end_offset`."""
        out: list[bytes] = []
        size = 0
        if start_offset < self.stored_end_offset:
            stored_end = Offset(min(end_offset, self.stored_end_offset))
            out = self.storage.read(start_offset, end_offset=stored_end, max_bytes=max_bytes)
            size = sum(len(batch) for batch in out)
            reached = read_header(out[-1]).next_offset if out else start_offset
            if reached < self.stored_end_offset or size >= max_bytes:
                return out
            start_offset = self.stored_end_offset
        index = bisect.bisect_right(self.unstable_ends, start_offset)
        while index < len(self.unstable) and self.unstable_ends[index] <= end_offset:
            batch = self.unstable[index]
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
            index += 1
        return out

    # --- changes ----------------------------------------------------------------------
    def append(self, batch: bytes, header: BatchHeader) -> None:
        """Append a stamped batch at the log end; extend the epoch history."""
        assert header.base_offset == self.log_end_offset
        assert header.epoch >= self.last_epoch
        self.history.extend(header)
        if header.is_control:
            voters = voters_in_batch(batch)  # its sender's door checked it can be read
            if voters is not None:
                self.voters.append(header.base_offset, voters)
        self.unstable.append(batch)
        self.unstable_ends.append(header.next_offset)
        self.log_end_offset = header.next_offset

    def truncate(self, offset: Offset) -> None:
        """Remove everything at or above `offset`, a batch boundary."""
        assert offset < self.log_end_offset
        assert offset >= self.log_start_offset
        self.history.truncate(offset)
        self.voters.truncate(offset)
        self.log_end_offset = offset
        self.durable_end_offset = Offset(min(self.durable_end_offset, offset))
        if offset >= self.stored_end_offset:
            index = bisect.bisect_right(self.unstable_ends, offset)
            cut = self.unstable_ends[index - 1] if index > 0 else self.stored_end_offset
            assert cut == offset, "truncation inside a batch"
            del self.unstable[index:]
            del self.unstable_ends[index:]
            return
        self.unstable.clear()
        self.unstable_ends.clear()
        self.stored_end_offset = offset
        self.truncate_to = offset if self.truncate_to is None else min(self.truncate_to, offset)

    def advance_start(self, offset: Offset) -> None:
        """Records below `offset` are gone (DeleteRecords, retention); the caller keeps
        `offset` at most the HWM."""
        assert self.log_start_offset < offset <= self.log_end_offset
        first = self.base_of_batch_at(offset)
        self.history.trim(first)
        self.voters.trim(first)
        self.log_start_offset = offset
        self.start_moved_to = offset

    def base_of_batch_at(self, offset: Offset) -> Offset:
        """The base offset of the batch holding `offset` (the log start may lie inside one);
        `offset` itself at the log end."""
        if offset >= self.log_end_offset:
            return offset
        batches = self.read(offset, end_offset=self.log_end_offset, max_bytes=1)
        return read_header(batches[0]).base_offset if batches else offset

    def reset(self, start_offset: Offset, prev_epoch: Epoch, voters: VoterSet) -> None:
        """Drop everything; the log starts empty at `start_offset` (truncateFullyAndStartAt),
        its last record of `prev_epoch`, `voters` the leader's voter set there."""
        self.unstable.clear()
        self.unstable_ends.clear()
        self.history.reset(start_offset, prev_epoch)
        self.voters.reset(start_offset, voters)
        self.reset_voters = voters
        self.log_start_offset = self.log_end_offset = start_offset
        self.stored_end_offset = self.durable_end_offset = start_offset
        self.reset_to = start_offset
        self.reset_prev_epoch = prev_epoch
        self.truncate_to = self.start_moved_to = None

    def take_unpersisted(
        self,
    ) -> tuple[Offset | None, Offset | None, tuple[bytes, ...], Offset | None]:
        """Hand the pending reset (its epoch before is `reset_prev_epoch`), truncation,
        appends and log start move to a `Ready`; storage now holds them."""
        taken = (self.reset_to, self.truncate_to, tuple(self.unstable), self.start_moved_to)
        self.reset_to = self.truncate_to = self.start_moved_to = None
        self.unstable.clear()
        self.unstable_ends.clear()
        self.stored_end_offset = self.log_end_offset
        return taken

    @property
    def has_unpersisted(self) -> bool:
        return (
            self.truncate_to is not None
            or self.reset_to is not None
            or self.start_moved_to is not None
            or bool(self.unstable)
        )
