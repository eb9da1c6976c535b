"""The node's periodic passes over its partitions (every few ticks: notices, cluster truth,
copies) skip the settled ones: a node holding thousands of idle partitions pays for the
ones that changed, not for all of them.

Rules of this file:
- A partition is settled for a pass when it is quiesced (core/quiesce.py) and neither a
  round of its runner nor a metadata command applied here came since the pass last
  looked at it: nothing it reports or is handed can have changed.
- Every `FULL_PASS_EVERY`-th pass looks at every partition all the same: what a pass
  asked for and did not get (a command not committed) is asked again within it.
"""

from __future__ import annotations

from typing import Final, Protocol

from tidelog.protocol.peer import PartitionKey

FULL_PASS_EVERY: Final = 40
"""Passes between two that look at everything (every 10 s at a pass per 250 ms)."""


class Settling(Protocol):
    """What a pass asks of a partition's runner (server/partition.py)."""

    key: PartitionKey
    quiesced: bool
    rounds: int


class SettledPass:
    """One periodic pass's memory of what it looked at (see the rules)."""

    def __init__(self) -> None:
        self.seen: dict[PartitionKey, tuple[int, int]] = {}
        self.passes = 0
        self.version = -1
        self.full = True

    def begin(self, version: int) -> bool:
        """A pass begins, with the metadata applied up to `version`. Returns whether
        anything may have changed since the last pass: a metadata command, or a full
        pass is due (a pass over the metadata image alone may skip itself otherwise)."""
        self.passes += 1
        self.full = self.passes % FULL_PASS_EVERY == 0
        if self.full:
            self.seen.clear()
        changed = self.full or version != self.version
        self.version = version
        return changed

    def settled(self, runner: Settling) -> bool:
        """Whether this pass may skip `runner` (see the rules); else it is marked seen."""
        mark = (runner.rounds, self.version)
        if runner.quiesced and self.seen.get(runner.key) == mark:
            return True
        self.seen[runner.key] = mark
        return False
