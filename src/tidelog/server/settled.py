"""The node's periodic passes over its partitions (every NOTICE round: leader notices,
cluster truth, ISR records) look at the partitions awake, not at thousands of idle ones.

Rules of this file:
- A quiesced partition (core/quiesce.py) changes nothing it reports or is handed while it
  sleeps: its role, epoch, HWM, voters and in-sync replicas stay as they were when it
  quiesced. So a pass looks at the partitions awake, and at each one that quiesced since
  the last pass, once, as it is asleep.
- Every pass after a metadata command was applied here, and every `FULL_PASS_EVERY`-th
  pass, looks at every partition: what the image changed, or what a pass asked for and
  did not get (a command not committed), is looked at again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol, TypeVar

from tidelog.protocol.peer import PartitionKey

FULL_PASS_EVERY: Final = 40
"""Passes between two that look at everything (every 10 s at a pass per 250 ms)."""


class Sleeper(Protocol):
    """What a pass asks of a partition's runner (server/partition.py)."""

    key: PartitionKey
    quiesced: bool


R = TypeVar("R", bound=Sleeper)


class NoticePass:
    """Which partitions this round's passes look at (see the rules)."""

    def __init__(self) -> None:
        self.fell_asleep: set[PartitionKey] = set()  # quiesced since the last pass
        self.passes = 0
        self.version = -1

    def quiesced(self, key: PartitionKey) -> None:
        """The partition `key` fell asleep: the next pass looks at it once more."""
        self.fell_asleep.add(key)

    def runners(
        self, runners: Mapping[PartitionKey, R], awake: Mapping[PartitionKey, R], version: int
    ) -> list[R]:
        """The partitions this round's passes look at, with the metadata applied up to
        `version`: every one of `runners`, or those `awake` and those that fell asleep
        since the last pass."""
        self.passes += 1
        full = self.passes % FULL_PASS_EVERY == 0 or version != self.version
        self.version = version
        fell_asleep, self.fell_asleep = self.fell_asleep, set()
        if full:
            return list(runners.values())
        chosen = [runner for key, runner in awake.items() if runners.get(key) is runner]
        for key in fell_asleep:
            runner = runners.get(key)
            if runner is not None and runner.quiesced:
                chosen.append(runner)
        return chosen
