"""The real disk log on a fault-injecting file system, for the simulator.

Each simulated node keeps its partition's log in a `DiskStorage` on its own
`FaultyFileSystem`. A simulated crash is a power cut: every byte and name not yet synced is
lost, and half the crashes also tear the last unsynced write at a random byte. The node
then recovers its log from what survived, exactly as it would from a real disk.

Disk faults on top (`fail_next_sync`, `fill_up`, `corrupt_committed_batch`): an fsync that
fails with EIO, a write that fails with ENOSPC, and a flipped bit in a committed batch.
A bit is flipped only below the HWM checkpointed on disk, in the bytes the CRC-32C covers
(from the CRC field on): that batch was synced, so the log must find it corrupt when it
reads it (or recovers it) and never serve it; a batch above that HWM may be a torn tail,
which recovery cuts as unsynced, so flipping there would model a loss, not a corruption.
A log that finds such a batch marks itself for repair (`needs_repair`); the simulator then
sets the damage aside (`quarantine`) and restarts the node's replica, as the broker does.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator

from tidelog.core.membership import VoterSet
from tidelog.core.messages import HardState
from tidelog.core.producers import ProducerEntry
from tidelog.core.storage import StoredState
from tidelog.records import HEADER_SIZE, read_header
from tidelog.types import DirectoryId, Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, RepairNeeded, WalConfig
from tidelog.wal import checkpoint as ckpt

# Small segments and a dense index, so that rolling, the index and truncation across
# segments are exercised by short runs.
SIM_WAL_CONFIG = WalConfig(
    segment_bytes=2048,
    index_interval_bytes=128,
    retention_ms=None,
    hwm_checkpoint_interval_ms=0,
)
TEAR_PROBABILITY = 0.5
Snapshot = Callable[[Offset], tuple[ProducerEntry, ...]]
CRC_POSITION = 17  # the CRC field: it and everything after it are covered by the CRC check


class SimDiskStorage:
    """A node's disk: LogStorage over DiskStorage, plus `crash()` and the disk faults."""

    def __init__(
        self, node: NodeId, rng: random.Random, config: WalConfig = SIM_WAL_CONFIG
    ) -> None:
        self.rng = rng
        self.node = node
        self.fs = FaultyFileSystem(rng)
        self.directory = f"/data/node-{node}/topic-0"
        self.config = config
        self.log = self.open()

    def open(self) -> DiskStorage:
        return DiskStorage(
            self.directory,
            clock=lambda: 0,
            config=self.config,
            fs=self.fs,
            new_directory_id=lambda: DirectoryId(self.node),  # never wiped: one per node
        )

    def crash(self) -> None:
        """Power cut, then recovery of what the disk kept."""
        self.fs.crash(tear=self.rng.random() < TEAR_PROBABILITY)
        self.log = self.open()

    def retain(self, snapshot: Snapshot) -> Offset | None:
        """Retention by size (`retention_bytes`), never at or above the saved HWM; the
        producer snapshot at the new log start is `snapshot(start)`."""
        if not self.log.apply_retention(wall_ms=0, snapshot=snapshot):
            return None
        return self.log.log_start_offset

    @property
    def needs_repair(self) -> RepairNeeded | None:
        return self.log.needs_repair

    def quarantine(self) -> bool:
        return self.log.quarantine()

    # --- disk faults ------------------------------------------------------------------
    def fail_next_sync(self) -> None:
        self.fs.fail_next_sync()

    def fill_up(self) -> None:
        self.fs.fill_up()

    def corrupt_committed_batch(self, rng: random.Random | None = None) -> bool:
        """Flip one bit of a random batch below the checkpointed HWM, in the bytes its CRC
        covers (see the module's docstring), drawn from `rng` (the node's by default).
        False when no such batch exists."""
        rng = rng or self.rng
        hwm = ckpt.read_offset(self.fs, self.directory, ckpt.HWM) or Offset(0)
        start = ckpt.read_offset(self.fs, self.directory, ckpt.LOG_START_OFFSET) or Offset(0)
        batches = [
            (path, position, size)
            for path, position, base, size, next_offset in self.stored_batches()
            if base >= start and next_offset <= hwm
        ]
        if not batches:
            return False
        path, position, size = rng.choice(batches)
        self.fs.flip_bit(path, position + rng.randrange(CRC_POSITION, size), rng.randrange(8))
        return True

    def stored_batches(self) -> Iterator[tuple[str, int, Offset, int, Offset]]:
        """(segment path, position, base offset, size, next offset) of each whole batch."""
        for path in self.log.segment_paths():
            end = self.fs.size(path)
            position = 0
            while position + HEADER_SIZE <= end:
                header = read_header(self.fs.pread(path, position, HEADER_SIZE))
                if header.size_bytes < HEADER_SIZE or position + header.size_bytes > end:
                    break
                yield path, position, header.base_offset, header.size_bytes, header.next_offset
                position += header.size_bytes

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

    def lower_hwm(self, offset: Offset) -> None:
        self.log.lower_hwm(offset)

    def advance_log_start(
        self, offset: Offset, *, producers: tuple[ProducerEntry, ...] | None = None
    ) -> None:
        self.log.advance_log_start(offset, producers=producers)

    def reset(
        self,
        *,
        start_offset: Offset,
        prev_epoch: Epoch,
        producers: tuple[ProducerEntry, ...] | None = None,
        voters: VoterSet | None = None,
    ) -> None:
        self.log.reset(
            start_offset=start_offset, prev_epoch=prev_epoch, producers=producers, voters=voters
        )

    def clear_repair_floor(self) -> None:
        self.log.clear_repair_floor()

    def sync(self) -> None:
        self.log.sync()


def disk_storage(node: NodeId, rng: random.Random) -> SimDiskStorage:
    return SimDiskStorage(node, rng)


def wal_config(*, retention_bytes: int | None) -> WalConfig:
    """The simulator's disk log settings, with retention by size when given."""
    return dataclasses.replace(SIM_WAL_CONFIG, retention_bytes=retention_bytes)
