"""The real disk log on a fault-injecting file system, for the simulator.

Each simulated node keeps its partition's log in a `DiskStorage` on its own
`FaultyFileSystem`. A simulated crash is a power cut: every byte and name not yet synced is
lost, and half the crashes also tear the last unsynced write at a random byte. The node
then recovers its log from what survived, exactly as it would from a real disk.
"""

from __future__ import annotations

import random

from tidelog.core.messages import HardState
from tidelog.core.storage import StoredState
from tidelog.types import Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, WalConfig

# Small segments and a dense index, so that rolling, the index and truncation across
# segments are exercised by short runs.
SIM_WAL_CONFIG = WalConfig(
    segment_bytes=2048,
    index_interval_bytes=128,
    retention_ms=None,
    hwm_checkpoint_interval_ms=0,
)
TEAR_PROBABILITY = 0.5


class SimDiskStorage:
    """A node's disk: LogStorage over DiskStorage, plus `crash()`."""

    def __init__(self, node: NodeId, rng: random.Random) -> None:
        self.rng = rng
        self.fs = FaultyFileSystem(rng)
        self.directory = f"/data/node-{node}/topic-0"
        self.log = self.open()

    def open(self) -> DiskStorage:
        return DiskStorage(self.directory, clock=lambda: 0, config=SIM_WAL_CONFIG, fs=self.fs)

    def crash(self) -> None:
        """Power cut, then recovery of what the disk kept."""
        self.fs.crash(tear=self.rng.random() < TEAR_PROBABILITY)
        self.log = self.open()

    # --- LogStorage -----------------------------------------------------------------
    def load(self) -> StoredState:
        return self.log.load()

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        return self.log.read(start_offset, end_offset=end_offset, max_bytes=max_bytes)

    def save_hard_state(self, hard_state: HardState) -> None:
        self.log.save_hard_state(hard_state)

    def truncate_to(self, *, offset: Offset) -> None:
        self.log.truncate_to(offset=offset)

    def append(self, batches: list[bytes]) -> None:
        self.log.append(batches)

    def save_hwm(self, hwm: Offset) -> None:
        self.log.save_hwm(hwm)

    def advance_log_start(self, offset: Offset) -> None:
        self.log.advance_log_start(offset)

    def reset(self, *, start_offset: Offset, prev_epoch: Epoch) -> None:
        self.log.reset(start_offset=start_offset, prev_epoch=prev_epoch)

    def sync(self) -> None:
        self.log.sync()


def disk_storage(node: NodeId, rng: random.Random) -> SimDiskStorage:
    return SimDiskStorage(node, rng)
