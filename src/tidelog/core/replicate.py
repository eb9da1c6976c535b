"""A replica's replication pipeline: the leader's appends out, the followers' answers in
(rules 3 and 7 of core/replica.py), the same in both modes (core/tracker.py holds each
follower's `Progress`).

Rules of this file:
- A follower is probed (one request, no batches) until an answer to the probe says where
  our logs agree; then appends are pipelined, at most `inflight_appends_max` unanswered.
  A follower behind our log start is reset to it, and a lost reset is sent again as a
  reset (scenarios 19, 20). A heartbeat resends a lost probe and restarts a pipeline
  whose match did not move.
- A follower's match moves only on a successful answer to a request of ours, never on a
  rejection (KAFKA-13141), and never back, except when the follower says it repairs
  (rule 8) or refuses our probe below its match (its copy is lost, scenario 26).
- A probing leader takes only the answer to its probe (requests carry a seq); an answer
  sent before a follower said it lost records counts for nothing, and so does one to a
  request sent before this term began (its `request_sent_ms`): the seqs of an earlier
  run of this node began again at 0, and the follower stamps a fenced request's answer
  with its own, newer epoch. Once the probe of a follower under repair ends, no answer
  to a request sent before that probe counts: the follower may have set damage aside
  again since it sent it (scenario 16, `sim --quiesce --disk`).
- A throttle (`ReplicaConfig.throttle_bytes_per_s`, Kafka's
  leader.replication.throttled.rate) limits the batches sent to copies that do not vote
  (a reassignment's new replicas, a lost copy catching up): each leader tick adds its
  share of the rate to a credit (at most a second's worth saved up), and
  such a copy gets batches only while the credit lasts; probes and heartbeats are never
  held back, nor are voters.
- After every answer the mode hears of it (`Mode.on_append_answered`); the HWM moves
  only where the mode says it may.
"""

from __future__ import annotations

from tidelog.core.membership import encode_voters
from tidelog.core.messages import AppendRequest, AppendResponse, LostCopy
from tidelog.core.producers import encode_entries
from tidelog.core.roles import Role
from tidelog.core.state import ReplicaState
from tidelog.core.tracker import Progress
from tidelog.records import read_header
from tidelog.types import NO_EPOCH, NodeId, Offset


class LeaderPipeline(ReplicaState):
    """The leader's appends out: a part of the replica (core/state.py)."""

    def _heartbeat(self) -> None:
        """Tell every follower the HWM; resend a lost probe; restart a stalled pipeline."""
        for peer, progress in self.progress.items():
            if progress.probing:
                progress.probe_sent = False  # resent, as it was (a reset as a reset)
                continue
            assert progress.match_offset is not None
            if (
                progress.match_offset == progress.match_at_heartbeat
                and progress.match_offset < progress.next_offset
            ):
                progress.next_offset = progress.match_offset
                progress.inflight.clear()
            progress.match_at_heartbeat = progress.match_offset
            start = self.log.log_start_offset
            if progress.match_offset < start and progress.match_offset < self.log.base_of_batch_at(
                start
            ):
                # What it lacks is gone here (not even in the batch holding the log start,
                # which we still send): `_send_appends` resets it.
                progress.probe(progress.match_offset)
                continue
            self._send_append(peer, progress.match_offset, ())

    def _appends_due(self) -> bool:
        end = self.log.log_end_offset
        for peer, progress in self.progress.items():
            if progress.probing and not progress.probe_sent:
                return True
            if (
                not progress.probing
                and progress.next_offset < end
                and len(progress.inflight) < self.config.inflight_appends_max
                and not self._held_back(peer, progress)
            ):
                return True
        return False

    def _throttled(self, peer: NodeId, progress: Progress) -> bool:
        """Whether appends to `peer` are throttled: a copy that does not vote, while a
        throttle is set (`ReplicaConfig.throttle_bytes_per_s`)."""
        return self.config.throttle_bytes_per_s is not None and not self.counts(
            peer, progress.directory
        )

    def _held_back(self, peer: NodeId, progress: Progress) -> bool:
        return self.throttle_credit <= 0 and self._throttled(peer, progress)

    def refill_throttle(self) -> None:
        """A tick's worth of the throttle's bytes; at most a second's worth saved up (a
        batch larger than the credit left still goes, and the credit owes it)."""
        rate = self.config.throttle_bytes_per_s
        if rate is None:
            self.throttle_credit = 0.0
            return
        self.throttle_credit = min(self.throttle_credit + rate * self.config.tick_ms / 1000, rate)

    def _send_appends(self) -> None:
        """Send each follower what it lacks, within its window of in-flight appends."""
        end = self.log.log_end_offset
        start = self.log.log_start_offset
        # The first batch we can still send. It differs from the log start only when the
        # start lies inside a batch, and matters only for a follower behind the start:
        # look it up (a storage read) only then.
        behind = any(p.next_offset < start for p in self.progress.values())
        floor = self.log.base_of_batch_at(start) if behind else start
        for peer, progress in self.progress.items():
            if progress.next_offset < floor and not progress.probing:
                progress.probe(progress.next_offset)  # reset it (below)
            if progress.probing:
                if not progress.probe_sent:
                    # What it lacks is gone here: reset it to the first batch we hold. A
                    # reset stays a reset until it is answered (scenario 20).
                    progress.resetting = progress.resetting or progress.next_offset < floor
                    if progress.resetting:
                        progress.next_offset = floor
                    key = (progress.next_offset, progress.resetting)
                    producers = self.producers.snapshot(key[0]) if key[1] else ()
                    seq = self._send_append(
                        peer,
                        key[0],
                        (),
                        reset=key[1],
                        producers=encode_entries(producers),
                        voters=(encode_voters(self.log.voters.at(Offset(key[0] - 1))),)
                        if key[1]
                        else (),
                    )
                    progress.sent_probe(key, seq)
                continue
            throttled = self._throttled(peer, progress)
            while (
                progress.next_offset < end
                and len(progress.inflight) < self.config.inflight_appends_max
                and not (throttled and self.throttle_credit <= 0)
            ):
                max_bytes = self.config.append_bytes_max
                if throttled:  # at least one batch, whatever its size
                    max_bytes = max(1, min(max_bytes, int(self.throttle_credit)))
                batches = self.log.read(
                    Offset(max(progress.next_offset, start)),
                    end_offset=end,
                    max_bytes=max_bytes,
                )
                assert batches, "a follower behind the log end has something to read"
                if throttled:
                    self.throttle_credit -= sum(len(batch) for batch in batches)
                # Checked when appended (and by the disk log when read back); the follower
                # checks them again on receipt (pair assertion): no CRC pass here.
                prev = read_header(batches[0]).base_offset
                self._send_append(peer, prev, tuple(batches))
                progress.next_offset = read_header(batches[-1]).next_offset
                progress.inflight.append(progress.next_offset)

    def _send_append(
        self,
        peer: NodeId,
        prev_offset: Offset,
        batches: tuple[bytes, ...],
        *,
        reset: bool = False,
        producers: tuple[bytes, ...] = (),
        voters: tuple[bytes, ...] = (),
        quiesce: bool = False,
    ) -> int:
        """Send one append (or probe, heartbeat, reset); returns its seq."""
        prev_epoch = self.log.epoch_at(Offset(prev_offset - 1)) if prev_offset > 0 else NO_EPOCH
        self.append_seq += 1
        self.msgs.append(
            AppendRequest(
                self.id,
                peer,
                self.epoch,
                prev_offset,
                prev_epoch,
                batches,
                self.hwm,
                self.now_ms,
                self.log.log_start_offset,
                reset,
                self.append_seq,
                producers,
                voters,
                quiesce,
                self.liveness.incarnation if quiesce else 0,
            )
        )
        return self.append_seq

    def on_append_response(self, msg: AppendResponse) -> None:
        """A follower's answer: the shared pipeline takes it, then the mode hears of it."""
        self._take_append_response(msg)
        self.mode.on_append_answered(msg)

    def _take_append_response(self, msg: AppendResponse) -> None:
        if self.role is not Role.LEADER:
            return
        progress = self.progress[msg.sender]
        progress.recent_active = True
        progress.contact_sent_ms = max(progress.contact_sent_ms, msg.request_sent_ms)
        if msg.request_sent_ms < self.leader_since_ms:
            return  # a request of an earlier term, maybe of an earlier run with other seqs
        if msg.seq < progress.seq_min:
            return  # sent before the follower said it lost records: nothing it says counts
        progress.answered_seq = max(progress.answered_seq, msg.seq)
        if progress.directory != msg.directory:
            if progress.directory is not None:
                self._on_new_copy(progress, msg)  # its contact dates from this copy on
                return
            progress.directory = msg.directory
        if msg.repairing and (not progress.repairing or self._lost_again(progress, msg)):
            self._on_follower_repairing(progress, msg.match_offset)
            return
        progress.repairing = msg.repairing
        if progress.probing and not progress.answers_probe(msg.seq):
            return  # answers the probe only (any copy of it): anything older may predate a reset
        if msg.success:
            self._on_append_accepted(progress, msg.match_offset)
        else:
            self._on_append_rejected(progress, msg)

    def _on_new_copy(self, progress: Progress, msg: AppendResponse) -> None:
        """The follower answers from another copy of its log (a new directory: its disk
        was replaced). The old copy's matches and answers die with it; this copy counts
        only once a voter set names it (membership rule 6). Probe it from its log end.
        The caller hears of a loss when the new copy holds less than the old one did."""
        if progress.match_offset is not None and msg.match_offset < progress.match_offset:
            self.lost_copies.append(LostCopy(msg.sender, progress.match_offset, msg.match_offset))
        next_offset = Offset(min(msg.match_offset, self.log.log_end_offset))
        progress.new_copy(msg.directory, next_offset, seq_min=self.append_seq + 1)

    @staticmethod
    def _lost_again(progress: Progress, msg: AppendResponse) -> bool:
        """A repairing follower's answer to our probe says its log is shorter than what it
        acknowledged: it set damaged records aside again (rule 8)."""
        return (
            progress.probing
            and progress.answers_probe(msg.seq)
            and progress.match_offset is not None
            and msg.match_offset < progress.match_offset
        )

    def _on_follower_repairing(self, progress: Progress, follower_end: Offset) -> None:
        """The follower lost records it acknowledged (rule 8): forget its match and every
        answer to a request sent so far, and probe it again from where it says its log
        ends (or may last agree with ours)."""
        next_offset = Offset(min(follower_end, self.log.log_end_offset))
        progress.lost_records(next_offset, seq_min=self.append_seq + 1)

    def _on_append_accepted(self, progress: Progress, match: Offset) -> None:
        if progress.probing and progress.repairing:
            # The probe's answer says where a repairing follower's log ends now: one to a
            # request sent before it may name records it set aside since (it may repair
            # again, rule 8; scenario 16): nothing older counts any more.
            progress.seq_min = max(progress.seq_min, progress.probe_seq)
        progress.accept(match, self.tick_count)
        if self._maybe_advance_hwm():
            self._complete_produces()

    def _on_append_rejected(self, progress: Progress, msg: AppendResponse) -> None:
        match = progress.match_offset
        if not progress.probing and msg.prev_offset < (match or 0):
            return  # stale: that prefix is verified already
        if match is not None and msg.match_offset < match and not msg.repairing:
            # Its log ended below what it acknowledged (rule 7). An answer to our probe
            # (to a copy sent since the probe began, after that match was taken: taking
            # one ends a probe) proves it lost records: forget its match and probe it
            # from where its log ends. Any other may have been overtaken by later
            # answers: ask at the match.
            if progress.probing and progress.probe_key is not None:
                self.lost_copies.append(LostCopy(msg.sender, match, msg.match_offset))
                progress.forget_match(msg.match_offset, seq_min=self.append_seq + 1)
            else:
                progress.probe(match)
            return
        _, epoch_end = self.log.end_offset_for_epoch(msg.hint_epoch)
        next_offset = min(msg.match_offset, epoch_end, self.log.log_end_offset)
        # Each rejection moves the probe back, down to a reset at worst: no probe loops.
        progress.probe(Offset(max(0, min(next_offset, msg.prev_offset - 1))))
