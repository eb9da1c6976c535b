"""A replica's clients: produces in and reads out (rules 3 and 5 of core/replica.py).

Rules of this file:
- A produce is taken only by a leader the mode lets take it (`Mode.produce_error`); its
  batch's CRC was checked at the door (protocol/validate.py; the simulator's producer and
  the tests hand valid batches), its framing is checked here. It waits in the queue of
  core/state.py until acknowledged.
- A retried idempotent batch is answered with the offsets it got the first time
  (core/producers.py, scenario 17).
- Clients read only below min(HWM, log end offset); a leader serves only once its HWM
  passed its epoch start (KIP-207) and while the mode says it may (the read lease in
  quorum mode); a follower only once verified against the current leader.
"""

from __future__ import annotations

from tidelog.core.messages import FetchResult, ProduceResult
from tidelog.core.producers import ProducerEntry, SequencedBatch
from tidelog.core.roles import Role
from tidelog.core.state import ACKS_ALL, ACKS_LEADER, ACKS_NONE, ReplicaState
from tidelog.errors import (
    CorruptBatch,
    FencedEpoch,
    InvalidBatch,
    LogDiverged,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    TidelogError,
)
from tidelog.records import BatchHeader, check_framing, stamp
from tidelog.types import NO_EPOCH, Epoch, Offset


class ClientRequests(ReplicaState):
    """Produces in, reads out: a part of the replica (core/state.py)."""

    # ================================================================== produces ========
    def propose(self, request_id: int, batch: bytes, *, acks: int) -> None:
        """A producer's record batch. Its completion comes out in a later `Ready`."""
        assert not self.ready_outstanding
        assert acks in (ACKS_NONE, ACKS_LEADER, ACKS_ALL)
        error = self.mode.produce_error(acks)
        header: BatchHeader | None = None
        if error is None:
            try:
                # The door (protocol/validate.py) checked its CRC; its framing is checked
                # again here, so no header this core reads can lie about its size.
                header = check_framing(batch)
            except CorruptBatch as corrupt:
                error = corrupt
            if header is not None and header.is_control:  # the leader writes those alone
                error = InvalidBatch("INVALID_RECORD", "a producer's batch is a control batch")
        if error is not None or header is None:
            self.completions.append(ProduceResult(request_id, None, None, error))
            return
        earlier = self.producers.check(header)
        if isinstance(earlier, TidelogError):
            self.completions.append(ProduceResult(request_id, None, None, earlier))
            return
        if isinstance(earlier, SequencedBatch):
            # A retried batch: answer with the offsets it got the first time (scenario 17).
            self._await_produce(
                request_id, earlier.base_offset, earlier.next_offset, acks, retried=True
            )
            return
        base = self.log.log_end_offset
        stamped = stamp(batch, base_offset=base, epoch=self.epoch)
        header = header._replace(base_offset=base, epoch=self.epoch)
        self.log.append(stamped, header)
        self.producers.on_append(header)
        self._await_produce(request_id, base, header.next_offset, acks)

    # ================================================================== reads ===========
    def fetch(
        self,
        offset: Offset,
        *,
        max_bytes: int,
        last_fetched_epoch: Epoch | None = None,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> FetchResult:
        """Committed batches from `offset` on: only below min(HWM, log end offset).

        `current_leader_epoch` is the epoch the reader believes current (KIP-320): an older
        one is fenced; `last_fetched_epoch` is the epoch of the last record it read.
        """
        bounds = self.fetch_bounds(
            offset,
            last_fetched_epoch=last_fetched_epoch,
            current_leader_epoch=current_leader_epoch,
            now_ms=now_ms,
        )
        if bounds.error is not None:
            return bounds
        batches = self.log.read(offset, end_offset=bounds.hwm, max_bytes=max_bytes)
        return FetchResult(tuple(batches), bounds.hwm, bounds.log_start_offset)

    def fetch_bounds(
        self,
        offset: Offset,
        *,
        last_fetched_epoch: Epoch | None = None,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> FetchResult:
        """What `fetch` checks, without reading: its error, or the end of what it may
        read (`hwm`, the min of HWM and log end offset). A caller that reads the stored
        batches itself (the broker, from its files) reads only below that end."""
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        error = self._fencing_error(current_leader_epoch) or self._read_error(
            offset, last_fetched_epoch, now_ms
        )
        return FetchResult((), readable_end, self.log.log_start_offset, error)

    def end_offset_for_epoch(
        self,
        leader_epoch: Epoch,
        *,
        current_leader_epoch: Epoch | None = None,
        now_ms: int | None = None,
    ) -> tuple[Epoch, Offset]:
        """OffsetForLeaderEpoch for a client (KIP-320): the largest epoch <= `leader_epoch`
        this log holds and the offset where it ends, never past what clients may read;
        (NO_EPOCH, -1) when the log holds no epoch that old. Raises what a fetch would
        (a fenced or unknown current epoch, not serving)."""
        error = self._fencing_error(current_leader_epoch) or self._serving_error(now_ms)
        if error is not None:
            raise error
        epoch, end = self.log.end_offset_for_epoch(leader_epoch)
        if epoch == NO_EPOCH:
            return NO_EPOCH, Offset(-1)
        return epoch, Offset(min(end, self.hwm, self.log.log_end_offset))

    def latest_offset(self, *, now_ms: int | None = None) -> Offset:
        """The "latest" offset clients may see (the HWM); raises while it is not known.

        `now_ms` is the caller's clock now (default: the time of the last tick)."""
        error = self._serving_error(now_ms)
        if error is not None:
            raise error
        return Offset(min(self.hwm, self.log.log_end_offset))

    def delete_records(self, offset: Offset) -> Offset:
        """DeleteRecords on the leader: move the log start to `offset`, which must not pass
        the HWM (retention never deletes uncommitted records). Followers follow with the
        next append. Returns the new log start (Kafka's low watermark)."""
        assert not self.ready_outstanding
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        if offset > readable_end:
            raise OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
        # Only what is durable here: a log start beyond our own synced log would outlive
        # a crash that takes the records below it.
        offset = Offset(min(offset, self.log.durable_end_offset))
        if offset > self.log.log_start_offset:
            self.log.advance_start(offset)
        return self.log.log_start_offset

    def note_log_start(self, offset: Offset) -> None:
        """Storage already deleted everything below `offset` (its retention by time or
        size, never past the HWM): the log starts there now."""
        assert not self.ready_outstanding
        assert offset <= self.hwm
        if offset > self.log.log_start_offset:
            self.log.advance_start(offset)
            self.log.start_moved_to = None  # storage did it: nothing to carry out

    def producer_snapshot(self, log_start: Offset) -> tuple[ProducerEntry, ...]:
        """What storage saves with a log start it moves itself (retention): the idempotent
        producers' snapshot there (core/producers.py)."""
        return self.producers.snapshot(log_start)

    def has_read_lease(self, now_ms: int | None = None) -> bool:
        """Whether the leader may serve reads now (`now_ms`: the caller's clock; default
        the time of the last tick): in quorum mode, a majority answered within the lease
        (Raft §8); in ISR mode, while it leads."""
        return self.mode.has_read_lease(now_ms)

    def high_watermark(self) -> Offset:
        """`status().hwm` alone, without building the whole status (a round's hot path)."""
        return self.hwm

    def read_committed(self, start_offset: Offset, *, max_bytes: int) -> list[bytes]:
        """Whole committed batches from the one holding `start_offset` (below the HWM), up
        to `max_bytes` but at least one when one qualifies: a state machine's input."""
        end = Offset(min(self.hwm, self.log.log_end_offset))
        if start_offset >= end:
            return []
        return self.log.read(start_offset, end_offset=end, max_bytes=max_bytes)

    # ================================================================== read checks =====
    def _serving_error(self, now_ms: int | None) -> TidelogError | None:
        """Why this replica cannot serve reads now, or None."""
        refused = self.mode.serving_error()
        if refused is not None:
            return refused
        if self.role is Role.LEADER:
            if self.hwm <= self.epoch_start_offset:
                return OffsetNotAvailable("the new leader's HWM has not reached its epoch")
            if not self.has_read_lease(now_ms):
                return NotLeader(None)
            return None
        if self.role is Role.FOLLOWER and self.follower_synced:
            return None
        return NotLeader(self.leader_id)

    def _fencing_error(self, current_leader_epoch: Epoch | None) -> TidelogError | None:
        if current_leader_epoch is None or current_leader_epoch == self.epoch:
            return None
        if current_leader_epoch < self.epoch:
            return FencedEpoch(current_leader_epoch, self.epoch)
        return OffsetNotAvailable(f"epoch {current_leader_epoch} is not known here yet")

    def _read_error(
        self, offset: Offset, last_fetched_epoch: Epoch | None, now_ms: int | None
    ) -> TidelogError | None:
        error = self._serving_error(now_ms)
        if error is not None:
            return error
        readable_end = Offset(min(self.hwm, self.log.log_end_offset))
        if offset < self.log.log_start_offset:
            return OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
        if offset > readable_end:
            if self.role is Role.FOLLOWER:
                return OffsetNotAvailable(f"offset {offset} is above this follower's HWM")
            if offset > self.log.log_end_offset:
                return OffsetOutOfRange(offset, self.log.log_start_offset, readable_end)
            return None  # between HWM and log end: nothing committed to give yet
        if last_fetched_epoch is not None and offset > 0:
            epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
            # Our epoch history may begin after the reader's position (records deleted, or
            # a reset): nothing there to judge by.
            unknown = epoch == NO_EPOCH and offset <= end
            if not unknown and (epoch != last_fetched_epoch or end < offset):
                return LogDiverged(epoch, end)
        return None
