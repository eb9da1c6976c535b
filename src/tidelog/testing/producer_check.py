"""The idempotent producer's state outlives deletions, restarts and resets (scenarios 23,
24): a check over time, reporting to the checker.

`ProducerStateMonitor` remembers, per producer id, the last batch acknowledged to it with
acks=all (its producer epoch, last sequence and offsets). A replica whose committed log
covers that batch (its HWM and its log end are both past the batch's end) knows that
producer at that epoch and sequence or later: it appended the batch, replayed it at a
restart, or took it from a producer snapshot (saved with a new log start, carried by a
reset). A replica that forgot it would write the producer's retry of that batch a second
time, or refuse its next one, should it lead.

Rules of this file:
- Only what the checker saw acknowledged counts, and only a replica's committed log is
  judged: a divergent suffix past its HWM says nothing.
- It reads replicas and never changes them.
- ISR mode with unclean elections (docs/isr.md rule 10): a producer whose acknowledged
  batch the election lost is forgotten (it goes on in a new epoch, `on_cut`, `on_lost`),
  and a replica suspect since the election (checker.py) is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.core.producers import last_sequence_of
from tidelog.records import NO_PRODUCER_ID, read_header
from tidelog.testing.checker import Checker
from tidelog.testing.cluster import Cluster


class Acked(NamedTuple):
    """The last acknowledged batch of a producer."""

    epoch: int
    last_sequence: int
    base_offset: int
    next_offset: int


@dataclass
class ProducerStateMonitor:
    """Each producer's last acknowledged batch is known to every replica whose committed
    log covers it."""

    cluster: Cluster
    checker: Checker
    acked: dict[int, Acked] = field(default_factory=dict)  # producer id -> its last batch

    def __post_init__(self) -> None:
        self.cluster.on_step.append(self.check)

    def on_acked(self, base_offset: int, batch: bytes) -> None:
        header = read_header(batch)
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0:
            return
        known = self.acked.get(header.producer_id)
        if known is not None and known.base_offset >= base_offset:
            return
        self.acked[header.producer_id] = Acked(
            header.producer_epoch,
            last_sequence_of(header),
            base_offset,
            base_offset + header.last_offset_delta + 1,
        )

    def on_cut(self, cut: int) -> None:
        """ISR mode: an unclean election lost the committed records from `cut` on (rule
        10). A producer whose acknowledged batch was lost goes on in a new epoch (its next
        batch leaves a gap: OutOfOrderSequence), and never sends an older batch again."""
        self.acked = {pid: acked for pid, acked in self.acked.items() if acked.next_offset <= cut}

    def on_lost(self, batch: bytes) -> None:
        """ISR mode: a leader an unclean election deposed acknowledged this batch; it may
        be lost (rule 10), and its producer goes on as after `on_cut`."""
        self.acked.pop(read_header(batch).producer_id, None)

    def check(self) -> None:
        for node, replica in self.cluster.live_replicas():
            if node in self.checker.suspects:
                continue  # ISR mode: what it calls committed may be given up (rule 10)
            covered = min(replica.hwm, replica.log.log_end_offset)
            for producer_id, acked in self.acked.items():
                if covered < acked.next_offset:
                    continue
                state = replica.producers.producers.get(producer_id)
                if state is None or not state.batches:
                    known = "nothing"
                elif (state.epoch, state.batches[-1].last_sequence) >= (
                    acked.epoch,
                    acked.last_sequence,
                ):
                    continue
                else:
                    known = f"epoch {state.epoch} sequence {state.batches[-1].last_sequence}"
                self.checker.fail(
                    f"node {node} (HWM {replica.hwm}) knows of producer {producer_id} {known}, "
                    f"below its batch acknowledged at {acked.base_offset} (epoch {acked.epoch}, "
                    f"sequence {acked.last_sequence}): a retry would be written twice"
                )
