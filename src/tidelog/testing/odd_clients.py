"""The simulator's clients that ask what its steady workload never asks, and check the answers.

Rules of this file:
- Each seed draws whether these clients play, and everything they do, from a generator of
  its own (`OddClients.draw`), so a seed where none plays runs as it did before they
  existed, and none plays in the classic fault model (its seeds replay).
- The idempotent producer's odd batches (shared/docs/correctness.md, scenario 17;
  core/producers.py): between two of its batches it sometimes sends a batch whose first
  sequence leaves a gap after its last acknowledged one (it must be refused:
  OutOfOrderSequence, or UnknownProducerId / a fenced epoch; never appended: the checker
  fails if one is ever committed), or its last acknowledged batch again (a retry whose
  answer was lost: it must be answered with the offsets it got the first time, never
  written again), or a batch of a producer id never used before that does not start at
  sequence 0 (it may retry a batch whose record was deleted: it must be refused
  UnknownProducerId, never taken for a mere gap, which the producer would answer by going
  on). Each holds the producer's one slot in flight, so no batch of its own moves the
  expected sequence meanwhile.
- OffsetForLeaderEpoch (KIP-320; the end-offset rule of KIP-101/279): a consumer asks a
  replica that calls itself leader where the epoch of the last batch it read ends, naming
  the newest leader epoch it knows (its metadata's, or the epoch it read if newer: a
  client's leader epoch never goes back) when consumers name epochs (no check-quorum). An
  answer never names an end past the committed history, and never reports as truncated a
  committed record the consumer read: the epoch it read is there and ends at or after its
  position. A leader that may not serve (a new one whose HWM is below its epoch start, a
  deposed one without its lease) holds an HWM that may be below what the consumer read;
  answering from it is the violation this client finds.
- ISR mode with unclean elections (docs/isr.md rule 10): a batch the election lost (`on_cut`,
  or acknowledged by a leader it deposed) is never sent again as a retry, and a retry in
  flight may be written anew; no replica suspect since the election is asked (sim.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tidelog.core.messages import ProduceResult
from tidelog.core.replica import Replica, Role
from tidelog.errors import OutOfOrderSequence, TidelogError
from tidelog.testing.checker import Checker, batch_identity
from tidelog.testing.cluster import Cluster
from tidelog.types import NO_EPOCH, Epoch, NodeId, Offset

ODD_SEEDS_SHARE = 0.5
"""Of the seeds, how many run the odd clients (the others run as they did before)."""
GAP_SHARE = 0.15
"""Of the idempotent producer's new batches, how many are a batch with a sequence gap."""
DUPLICATE_SHARE = 0.15
"""... and how many are its last acknowledged batch again."""
UNKNOWN_SHARE = 0.05
"""... and how many a batch of a new producer id at a sequence above 0."""
UNKNOWN_PRODUCER_ID_BASE = 2000
GAP_MAX = 3
"""The largest gap left after the expected sequence."""
EPOCH_END_SHARE = 0.5
"""Of the consumers' fetches, how many are followed by an OffsetForLeaderEpoch."""


@dataclass(frozen=True, slots=True)
class OddBatch:
    """An odd batch in flight: a gap (`first_offset` None) or a duplicate of the batch first
    written at `first_offset`."""

    kind: str
    first_offset: Offset | None = None
    lost: bool = False  # the batch first written was lost since (an unclean election)


@dataclass
class OddClients:
    """The odd batches the idempotent producer sends, and the OffsetForLeaderEpoch asker."""

    cluster: Cluster
    checker: Checker
    rng: random.Random
    in_flight: dict[int, OddBatch] = field(default_factory=dict)
    last_acked: tuple[bytes, Offset] | None = None  # the producer's last batch, as written
    gaps: int = 0
    duplicates: int = 0
    unknowns: int = 0
    epoch_ends: int = 0

    @classmethod
    def draw(cls, seed: int, cluster: Cluster, checker: Checker) -> OddClients | None:
        """This seed's odd clients, or None (a seed where they do not play)."""
        rng = random.Random(f"odd clients {seed}")
        return cls(cluster, checker, rng) if rng.random() < ODD_SEEDS_SHARE else None

    # ------------------------------------------------------------ the producer ------
    def pick(self) -> str | None:
        """What the idempotent producer sends instead of a new batch: "gap", "duplicate",
        "unknown", or None (its next batch)."""
        roll = self.rng.random()
        if roll < GAP_SHARE:
            return "gap"
        roll -= GAP_SHARE
        if roll < DUPLICATE_SHARE:
            return "duplicate" if self.last_acked is not None else None
        return "unknown" if roll - DUPLICATE_SHARE < UNKNOWN_SHARE else None

    def unknown_producer(self) -> tuple[int, int, int]:
        """(producer id, epoch, first sequence) of a producer never seen, not at sequence 0."""
        return UNKNOWN_PRODUCER_ID_BASE + self.unknowns, 0, self.rng.randint(1, GAP_MAX)

    def gap_sequence(self, expected: int) -> int:
        return expected + self.rng.randint(1, GAP_MAX)

    def sent(self, request_id: int, kind: str, batch: bytes) -> None:
        if kind in ("gap", "unknown"):
            self.gaps += kind == "gap"
            self.unknowns += kind == "unknown"
            why = "a batch with a sequence gap" if kind == "gap" else "an unknown producer's batch"
            self.checker.refused[batch_identity(batch)] = why
            self.in_flight[request_id] = OddBatch(kind)
        else:
            assert self.last_acked is not None
            self.duplicates += 1
            self.in_flight[request_id] = OddBatch(kind, self.last_acked[1])

    def answered(self, node: NodeId, result: ProduceResult) -> bool:
        """Check the answer to an odd batch; False when the request was not one."""
        odd = self.in_flight.pop(result.request_id, None)
        if odd is None:
            return False
        if odd.lost:
            return True  # the new leader lacks the first copy: written again is right
        if odd.kind == "unknown" and isinstance(result.error, OutOfOrderSequence):
            self.checker.fail(
                f"node {node} answered an unknown producer's batch OutOfOrderSequence "
                "(UnknownProducerId expected: its earlier batches may be deleted)"
            )
        if result.error is not None:
            return True  # refused, or not the leader: either way nothing was written
        if odd.first_offset is None:
            self.checker.fail(
                f"node {node} accepted an idempotent batch ({odd.kind}) at offset "
                f"{result.base_offset}: it must be refused"
            )
        elif result.base_offset != odd.first_offset:
            self.checker.fail(
                f"node {node} wrote a retried idempotent batch again at {result.base_offset} "
                f"(first written at {odd.first_offset})"
            )
        return True

    def acked(self, batch: bytes, base_offset: Offset, *, lost: bool = False) -> None:
        """The producer's batch was acknowledged; `lost`: by a leader an unclean election
        deposed (rule 10), so it is never sent again as a retry."""
        self.last_acked = None if lost else (batch, base_offset)

    def on_cut(self, cut: int) -> None:
        """An unclean election lost the committed records from `cut` on: a batch first
        written there is never sent again as a retry, and one in flight may be written
        again (ISR mode, rule 10)."""
        if self.last_acked is not None and self.last_acked[1] >= cut:
            self.last_acked = None
        for request_id, odd in self.in_flight.items():
            if odd.first_offset is not None and odd.first_offset >= cut:
                self.in_flight[request_id] = OddBatch(odd.kind, odd.first_offset, lost=True)

    def new_producer_epoch(self) -> None:
        self.last_acked = None  # a batch of an older producer epoch is fenced, not a retry

    # ------------------------------------------------------------ OffsetForLeaderEpoch
    def ask_epoch_end(
        self,
        node: NodeId,
        replica: Replica,
        read: tuple[Offset, Epoch],
        *,
        name_epoch: bool,
    ) -> None:
        """A consumer that read up to `read` = (position, epoch of its last batch) asks
        the leader `node` where that epoch ends, and checks the answer."""
        position, last_epoch = read
        if replica.role is not Role.LEADER or last_epoch == NO_EPOCH or position == 0:
            return
        if replica.isr is not None and not name_epoch:
            # ISR mode holds no lease: a deposed leader not yet told answers from its own
            # log, as Kafka's does; only a client naming its leader epoch is fenced from
            # it (KIP-320), so only such a client is judged.
            return
        if self.rng.random() >= EPOCH_END_SHARE:
            return
        try:
            epoch, end = replica.end_offset_for_epoch(
                last_epoch,
                # a client's leader epoch never goes back (KIP-320): it read `last_epoch`
                current_leader_epoch=max(self.metadata_epoch(), last_epoch) if name_epoch else None,
                now_ms=self.cluster.clock_ms(node),
            )
        except TidelogError:
            return  # fenced, not serving: retriable
        self.epoch_ends += 1
        asked = f"leader {node} answered OffsetForLeaderEpoch({last_epoch}) with ({epoch}, {end})"
        if end > self.checker.committed_end:
            self.checker.fail(f"{asked}: past the committed end {self.checker.committed_end}")
        deleted = position <= replica.log.log_start_offset
        if epoch != NO_EPOCH and not deleted and (epoch != last_epoch or end < position):
            self.checker.fail(
                f"{asked}: a consumer read committed records of epoch {last_epoch} up to "
                f"{position}, reported truncated"
            )

    def metadata_epoch(self) -> Epoch:
        """The newest leader epoch among the live leaders (what a metadata request says);
        in ISR mode among every live replica too, since a follower's epoch is the one of
        the controller's record it took (the leader of that epoch may be down, and a
        deposed leader not yet told of it answers from its own log)."""
        leaders = [
            r.epoch
            for _, r in self.cluster.live_replicas()
            if r.role is Role.LEADER or r.isr is not None
        ]
        return max(leaders, default=NO_EPOCH)
