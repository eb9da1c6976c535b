"""A replica's follower path: appends from the leader in, answers out (rules 4, 7, 8 of
core/replica.py), the same in both modes.

Rules of this file:
- A follower finds divergence by epochs, never by its HWM (KIP-101/279): it checks the
  record before the append (`_prefix_matches`), cuts its log only where it conflicts
  with the leader's, never a batch it holds and never below its HWM (an append that would
  is refused; ISR mode's unclean recovery alone gives committed records up), and only
  then takes HWM = min(leader HWM, end of the prefix it verified) (KAFKA-14704).
- It answers only once its log is durable (`messages_after_persist`), acknowledging the
  prefix it verified, not its whole log; a corrupt batch is dropped unanswered (the
  leader resends): the CRC of every batch received is checked here (pair assertion).
- A reset to the leader's log start keeps our log when its prefix below the start is the
  leader's; it never drops what we acknowledged or committed (scenarios 19, 24).
- A message of an older epoch changes nothing and is answered with our epoch (KIP-320).
- An append its leader sent after the one it slept on wakes a quiesced follower; a
  `quiesce` one it takes whole, the latest of its leader's term, holding the leader's log
  and HWM, from the node process its node liveness hears, puts it to sleep
  (core/quiesce.py rules 1 and 3).
"""

from __future__ import annotations

import enum

from tidelog.core.membership import decode_voters
from tidelog.core.messages import AppendRequest, AppendResponse, Message, VoteRequest, VoteResponse
from tidelog.core.producers import ProducerStates, decode_entries
from tidelog.core.roles import Role
from tidelog.core.state import ReplicaState
from tidelog.errors import CorruptBatch
from tidelog.records import BatchHeader, check_batch
from tidelog.types import NO_EPOCH, Epoch, Offset


class _Batch(enum.Enum):
    """A leader's batch as a follower finds it in its own log."""

    HELD = "held"  # this very batch is here (or deleted here, below the log start)
    NEW = "new"  # at our log end, or replacing a divergent uncommitted suffix
    CONFLICTS_WITH_COMMITTED = "conflicts"  # never cut: the append is refused


class FollowerPath(ReplicaState):
    """The leader's appends in: a part of the replica (core/state.py)."""

    def on_append_request(self, msg: AppendRequest) -> None:
        if self.role is not Role.FOLLOWER or self.leader_id != msg.sender:
            self.become_follower(msg.epoch, msg.sender)
        self.mode.on_leader_contact()
        latest = msg.seq >= self.leader_seq
        self.leader_seq = max(self.leader_seq, msg.seq)
        if msg.seq > self.quiesce_append_seq:
            # An append sent after the one we slept on wakes us (one sent before, late,
            # does not: our leader counts our promise); a `quiesce` one may put us back.
            self.quiesced = False
        elif self.quiesced:
            # Still, its lease runs from now: released, we vote only once node liveness
            # heard the leader's node after it (core/quiesce.py rule 3).
            self.quiesce_pings = self.liveness.pings_taken(msg.sender)
        try:
            headers = [check_batch(batch) for batch in msg.batches]
        except CorruptBatch:
            return  # damaged in flight: drop it; the leader resends (pair assertion)
        if msg.reset:
            self._reset_to_leader_start(msg)
            return
        if not self._prefix_matches(msg.prev_offset, msg.prev_epoch):
            hint_offset, hint_epoch = self._divergence_hint(msg.prev_offset, msg.prev_epoch)
            self._answer(msg, False, hint_offset, hint_epoch)
            return
        end = self._append_from_leader(msg.prev_offset, msg.batches, headers)
        if end is None:
            return  # it cannot be right (it would cut committed records): no answer
        self.mode.on_follower_appended(end)
        self.follower_synced = True
        # Truncation is done; only now take the leader's HWM, bounded by the verified
        # prefix (KAFKA-14704).
        self._raise_hwm(Offset(min(msg.hwm, end)))
        self._follow_log_start(msg.log_start_offset)
        self._answer(msg, True, end, NO_EPOCH)
        if (
            msg.quiesce
            and self.config.quiesce
            and latest
            and self.liveness.is_live(msg.sender)
            and self.liveness.incarnation_of(msg.sender) == msg.incarnation
            and self.hwm == end == self.log.log_end_offset
        ):
            # The leader's whole log is ours, its latest word, and its node process is
            # the one node liveness hears (core/quiesce.py rule 1): sleep, promising no
            # vote while node liveness hears that node in this session.
            self.quiesced = True
            self.quiesce_append_seq = msg.seq
            self.quiesce_session = self.liveness.session(msg.sender)
            self.quiesce_pings = self.liveness.pings_taken(msg.sender)

    def _answer(self, msg: AppendRequest, success: bool, offset: Offset, epoch: Epoch) -> None:
        """Answer an append once our log is durable (rule 2), echoing its time and seq."""
        self.msgs_after_persist.append(
            AppendResponse(
                self.id,
                msg.sender,
                self.epoch,
                success,
                msg.prev_offset,
                offset,
                epoch,
                msg.sent_ms,
                msg.seq,
                self.repair_floor is not None,
                self.key.directory,
                self.liveness.session(msg.sender),
            )
        )

    def _reset_to_leader_start(self, msg: AppendRequest) -> None:
        """The leader no longer holds what we lack: its log begins at `start` now.

        Everything below `start` is committed. We keep our log when its prefix below
        `start` is the leader's: when our HWM reaches `start`, or when our record at
        start - 1 is of the leader's epoch there (the log matching property); records we
        acknowledged in this epoch are always kept so (scenario 19). Otherwise nothing we
        hold from start - 1 on is the leader's: we drop it all and start empty at `start`,
        remembering the epoch of the record before it (scenario 19, Raft's snapshot)."""
        start = msg.prev_offset
        entries = decode_entries(msg.producers, below=start) or ()  # checked at the door
        committed_here = start <= max(self.hwm, self.log.log_start_offset)
        if not committed_here and not (
            start <= self.log.log_end_offset
            and self.log.epoch_at(Offset(start - 1)) == msg.prev_epoch
        ):
            self.log.reset(start, msg.prev_epoch, decode_voters(msg.voters[0]))  # door-checked
            # What the deleted records told of the idempotent producers (scenario 24).
            self.producers = ProducerStates()
            self.producers.restore(entries)
            self.hwm = start
        self.follower_synced = True
        self._raise_hwm(start)
        self._follow_log_start(msg.log_start_offset)
        self._answer(msg, True, start, NO_EPOCH)

    def _follow_log_start(self, leader_log_start: Offset) -> None:
        """Records the leader deleted (DeleteRecords, retention) go here too, within our HWM."""
        target = Offset(min(leader_log_start, self.hwm, self.log.durable_end_offset))
        if target > self.log.log_start_offset:
            self.log.advance_start(target)

    def _prefix_matches(self, prev_offset: Offset, prev_epoch: Epoch) -> bool:
        """The consistency check: our record at prev_offset - 1 is of prev_epoch.

        Below our HWM the record is committed, so every later leader holds it at the same
        offset: it is checked where we still know its epoch, else trusted (it may be
        deleted here, and the leader may have deleted its epoch too)."""
        if prev_offset > self.log.log_end_offset:
            return False
        if prev_offset <= 0:
            return True
        ours = self.log.epoch_at(Offset(prev_offset - 1))
        if prev_offset <= max(self.log.log_start_offset, self.hwm) and ours == NO_EPOCH:
            return True
        return ours == prev_epoch

    def _divergence_hint(self, prev_offset: Offset, prev_epoch: Epoch) -> tuple[Offset, Epoch]:
        """Where our log may last agree with the leader's: the end of our largest epoch
        <= prev_epoch, bounded by prev_offset and our log end (KIP-279)."""
        _, epoch_end = self.log.end_offset_for_epoch(prev_epoch)
        offset = Offset(min(prev_offset, self.log.log_end_offset, epoch_end))
        epoch = self.log.epoch_at(Offset(offset - 1)) if offset > 0 else NO_EPOCH
        return offset, epoch

    def _append_from_leader(
        self, prev_offset: Offset, batches: tuple[bytes, ...], headers: list[BatchHeader]
    ) -> Offset | None:
        """Append the leader's batches after the verified prefix; cut only on conflict.

        Returns the end of the prefix now known to match the leader's log, or None when the
        append cannot be taken as it is (a batch conflicting with a committed one here, or
        batches that do not follow each other): a follower never cuts committed records
        (rule 4), so it refuses the append and changes nothing.
        """
        first_new: int | None = None
        end = prev_offset
        for index, header in enumerate(headers):
            if header.base_offset != end:
                return None
            end = header.next_offset
            if first_new is None:
                taken = self._compare_batch(header)
                if taken is _Batch.CONFLICTS_WITH_COMMITTED:
                    return None
                if taken is _Batch.NEW:
                    first_new = index
        if first_new is not None:
            base = headers[first_new].base_offset
            if base < self.log.log_end_offset:  # a divergent, uncommitted suffix
                self.log.truncate(base)
                self.producers.truncate(base)
            for batch, header in zip(batches[first_new:], headers[first_new:], strict=True):
                self.log.append(batch, header)
                self.producers.on_append(header)
        return end

    def _compare_batch(self, header: BatchHeader) -> _Batch:
        """The leader's batch against our log (the log matching property: the same offset
        and epoch mean the same batch and the same log before it)."""
        log = self.log
        if header.next_offset <= log.log_start_offset:
            return _Batch.HELD  # wholly below our log start: committed and deleted here
        if header.base_offset >= log.log_end_offset:
            return _Batch.NEW
        # The log start may lie inside this batch: ask its epoch at a record we have.
        held = Offset(max(header.base_offset, log.log_start_offset))
        if held < log.log_end_offset and log.epoch_at(held) == header.epoch:
            return _Batch.HELD
        if header.base_offset < max(self.hwm, log.log_start_offset):
            if self.mode.gives_up(header):  # ISR mode's unclean recovery only
                return _Batch.NEW
            return _Batch.CONFLICTS_WITH_COMMITTED
        return _Batch.NEW

    def _on_lower_epoch(self, msg: Message) -> None:
        """A message from an older epoch changes nothing; tell its sender the epoch."""
        if isinstance(msg, AppendRequest):
            self.msgs.append(
                AppendResponse(
                    self.id,
                    msg.sender,
                    self.epoch,
                    False,
                    msg.prev_offset,
                    self.log.log_end_offset,
                    self.log.last_epoch,
                    msg.sent_ms,
                    msg.seq,
                    self.repair_floor is not None,
                    self.key.directory,
                )
            )
        elif isinstance(msg, VoteRequest):
            self.msgs.append(
                VoteResponse(
                    self.id, msg.sender, self.epoch, False, msg.pre_vote, self.key.directory
                )
            )
