"""The leader's view of each follower, as etcd-io/raft's tracker/: one `Progress` each.

Rules of this file:
- `match_offset` is how far the follower's log is verified equal to ours and durable
  there; it only grows within our epoch (what a follower acknowledged in our epoch it
  keeps: a reset drops nothing it acknowledged), and is forgotten only when the follower
  says it lost records (rule 8 of the replica: it repairs), when it refuses our probe with
  a log ending below its match (rule 7: its copy was lost), when it answers from another
  copy (a new directory id, rule 11) or, in ISR mode, when a record
  says its node started again (rule 9 of docs/isr.md: it may have lost its disk). Apart
  from a follower that says it repairs, a probe never goes below a match we know.
- A follower is probed (one request at a time, no batches) until an answer to the probe
  says where our logs agree; then appends are pipelined, at most `inflight_appends_max`
  unanswered. A probe that went below our log start is a reset, and stays one until it is
  answered (scenario 20).
- A heartbeat resends the probe, each copy with its own seq: an answer to the first copy
  or to any later one ends the probe (a network slower than a heartbeat must not starve
  it); an answer to an older request may predate a reset, and is ignored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tidelog.types import DirectoryId, Offset


@dataclass(slots=True)
class Progress:
    """The leader's view of one follower (etcd-io/raft's Progress)."""

    next_offset: Offset
    match_offset: Offset | None = None  # verified and durable on the follower; only grows
    probing: bool = True
    probe_sent: bool = False
    probe_seq: int = -1  # the first request of the current probe
    probe_key: tuple[Offset, bool] | None = None  # (next offset, reset) of the probe sent
    resetting: bool = False  # the probe is a reset to our log start: resent as one
    inflight: deque[Offset] = field(default_factory=deque)
    recent_active: bool = False
    last_ack_tick: int = -(1 << 30)
    contact_sent_ms: int = -(1 << 62)  # when we sent the latest request it answered
    match_at_heartbeat: Offset | None = None
    repairing: bool = False  # it lost records it once held and has not reached them again
    seq_min: int = 0  # answers to older requests predate its repair: ignored
    directory: DirectoryId | None = None  # the copy whose answers these are (KIP-853)
    # The liveness session it answered our quiesce append in (core/quiesce.py, rule 4).
    quiesce_session: int | None = None
    answered_seq: int = -1  # the latest of our requests (seq) it answered, in this term

    def probe(self, next_offset: Offset) -> None:
        """Stop pipelining; ask where our logs agree, from `next_offset`."""
        self.next_offset = next_offset
        self.probing = True
        self.probe_sent = False
        self.probe_key = None
        self.inflight.clear()

    def sent_probe(self, key: tuple[Offset, bool], seq: int) -> None:
        """A probe (next offset, reset) went out as request `seq`."""
        self.probe_sent = True
        if self.probe_key != key:  # a new probe, not a copy of the last
            self.probe_key = key
            self.probe_seq = seq

    def answers_probe(self, seq: int) -> bool:
        """Whether an answer to request `seq` may end the current probe."""
        return seq >= self.probe_seq

    def accept(self, match: Offset, tick: int) -> None:
        """The follower holds our log up to `match`, durably."""
        self.last_ack_tick = tick
        if self.match_offset is None or match > self.match_offset:
            self.match_offset = match  # never back (see the rules of this file)
        while self.inflight and self.inflight[0] <= self.match_offset:
            self.inflight.popleft()
        if self.probing:
            self.probing = self.probe_sent = self.resetting = False
            self.next_offset = self.match_offset
            self.inflight.clear()

    def forget_match(self, next_offset: Offset, seq_min: int) -> None:
        """The follower may hold less than it acknowledged (in ISR mode, its node started
        again): forget its match and every answer to a request before `seq_min`, and probe
        it from `next_offset`; what it answers from now on says where its log is."""
        self.match_offset = None
        self.seq_min = seq_min
        self.probe(next_offset)

    def new_copy(self, directory: DirectoryId, next_offset: Offset, seq_min: int) -> None:
        """The follower answers from another copy of its log (an empty disk): what the
        old copy acknowledged and answered dies with it (`forget_match`); the lease and
        check-quorum count this copy's answers from now on."""
        self.directory = directory
        self.repairing = False
        self.contact_sent_ms = -(1 << 62)
        self.forget_match(next_offset, seq_min)

    def lost_records(self, next_offset: Offset, seq_min: int) -> None:
        """The follower set damaged records aside (it repairs): `forget_match`, and it is
        repairing until it says otherwise."""
        self.repairing = True
        self.forget_match(next_offset, seq_min)

    def in_sync(self, recent_tick: int) -> bool:
        """Acknowledged something since `recent_tick`, and not repairing."""
        return (
            self.match_offset is not None
            and self.last_ack_tick >= recent_tick
            and not self.repairing
        )
