"""Where the control batches of one partition's log lie, so its broker can tell where the
data ends: `data_end(below=hwm)` is the offset after the last data record below the HWM,
which the lag of a consumer group is measured against (a group that read every data
record has lag 0, even when new leaders appended their control batches after it stopped).

Rules of this file:
- Control batches are kept as runs: [start, end) holds only control batches, and two runs
  are never adjacent (a control batch that ends where the next begins joins it). A new
  leader's control batch is one record, and each failover without data in between extends
  the same run, so one run covers any number of them.
- It knows every control batch in [known_from, log end): the owner feeds it each batch it
  appends or scans (`on_batch`, in offset order) and each truncation (`truncate`) and
  reset (`reset`); what lies below `known_from` (segments recovery trusted without
  scanning them) it learns a batch at a time from headers its owner reads (`learn`). A
  header its owner could not read (`cannot_learn`) is not asked for again until
  `known_from` moves.
- At most RUNS_MAX runs, the latest: forgetting the oldest raises `known_from` past it.
- Unknown never means control: `data_end` walks down only over control batches it knows,
  so a lag it yields is never below the true one (it may count a control batch whose
  header it never saw).
- Pure: no IO; its owner (`DiskStorage`) reads the headers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

from tidelog.records import BatchHeader
from tidelog.types import Offset

RUNS_MAX: Final = 16
"""Runs of control batches kept; only the one at the top of the log matters to `data_end`
while the log grows, the others after a truncation removed it."""
HEADER_READS_MAX: Final = 8
"""Batch headers `data_end_offset` reads per call below what is known."""


class Run(NamedTuple):
    """Offsets [start, end) holding control batches only."""

    start: Offset
    end: Offset


class ControlBatches:
    """The runs of control batches of a log from `known_from` on (see the module's rules)."""

    def __init__(self, known_from: Offset) -> None:
        self.known_from = known_from
        self.runs: list[Run] = []
        self.stuck = False  # the header below known_from could not be read

    @property
    def may_learn(self) -> bool:
        """Whether the owner should read the header of the batch below `known_from`."""
        return not self.stuck and len(self.runs) < RUNS_MAX

    def _know_from(self, offset: Offset) -> None:
        if offset != self.known_from:
            self.known_from = offset
            self.stuck = False

    def on_batch(self, header: BatchHeader) -> None:
        """A batch appended (or scanned by recovery) at the end of what is known."""
        if not header.is_control:
            return
        if self.runs and self.runs[-1].end == header.base_offset:
            self.runs[-1] = Run(self.runs[-1].start, header.next_offset)
            return
        assert not self.runs or self.runs[-1].end < header.base_offset, "batches in order"
        self.runs.append(Run(header.base_offset, header.next_offset))
        if len(self.runs) > RUNS_MAX:
            forgotten = self.runs.pop(0)
            self._know_from(Offset(max(self.known_from, forgotten.end)))

    def learn(self, header: BatchHeader) -> None:
        """The header of the batch that ends at `known_from`, read by the owner: it is known
        now (the caller asks `may_learn` first)."""
        assert self.may_learn
        assert header.next_offset == self.known_from, "the batch below what is known"
        if header.is_control:
            if self.runs and self.runs[0].start == header.next_offset:
                self.runs[0] = Run(header.base_offset, self.runs[0].end)
            else:
                self.runs.insert(0, Run(header.base_offset, header.next_offset))
        self._know_from(header.base_offset)

    def cannot_learn(self) -> None:
        """The header of the batch below `known_from` could not be read."""
        self.stuck = True

    def truncate(self, offset: Offset) -> None:
        """The log lost every batch at or above `offset` (a batch boundary)."""
        while self.runs and self.runs[-1].start >= offset:
            self.runs.pop()
        if self.runs and self.runs[-1].end > offset:
            self.runs[-1] = Run(self.runs[-1].start, offset)
        self._know_from(Offset(min(self.known_from, offset)))

    def reset(self, offset: Offset) -> None:
        """The log is empty from `offset` on (emptied, or only now scanned from there)."""
        self.runs.clear()
        self._know_from(offset)
        self.stuck = False

    def data_end(self, below: Offset) -> Offset:
        """The offset after the last batch below `below` that is not a known control batch:
        `below` less the run of control batches it ends in (or runs through)."""
        for run in reversed(self.runs):
            if run.start >= below:
                continue  # above `below` (not committed yet, say)
            return run.start if run.end >= below else below
        return below

    def data_end_offset(
        self,
        below: Offset,
        *,
        log_start_offset: Offset,
        header_before: Callable[[Offset], BatchHeader | None],
    ) -> Offset:
        """`data_end(below)`, at least the log start, reading what it must know: below
        `known_from` the headers of the batches that end where it looks (`header_before`,
        None when one cannot be read), at most HEADER_READS_MAX per call; those right below
        what it knows it keeps, so it reads each of them once."""
        end = Offset(max(self.data_end(below), log_start_offset))
        for _ in range(HEADER_READS_MAX):
            if end == log_start_offset or end > self.known_from:
                return end  # the batch that ends at `end` is known to be data
            learning = end == self.known_from
            if learning and not self.may_learn:
                return end  # unknown: it counts as data
            header = header_before(end)
            if header is None:
                if learning:
                    self.cannot_learn()
                return end
            if learning:
                self.learn(header)
            if not header.is_control:
                return end
            end = Offset(max(header.base_offset, log_start_offset))
        return end
