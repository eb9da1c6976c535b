"""Crashes at every write point, and corruption in the middle versus at the tail.

Crash at every point: a short workload runs on a FaultyFileSystem that cuts the power at
its k-th mutating call, for every k (with and without torn writes). After recovery,
everything a returned sync (or truncation) promised is intact, nothing torn is served, and
the log is a batch prefix of what was written.
"""

from __future__ import annotations

import contextlib
import errno
import random
from dataclasses import dataclass, field

import pytest

from tidelog.core.messages import HardState
from tidelog.errors import StorageError
from tidelog.records import read_header
from tidelog.types import Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, SimulatedCrash, WalConfig
from tidelog.wal.batches import build_batches

CONFIG = WalConfig(
    segment_bytes=900, index_interval_bytes=200, hwm_checkpoint_interval_ms=0, retention_bytes=1
)
DIRECTORY = "/data/topic-0"
E1, E2 = Epoch(1), Epoch(2)


@dataclass
class Progress:
    """What the workload has written, and what its completed syncs promised."""

    written: list[bytes] = field(default_factory=list)
    promised: list[bytes] = field(default_factory=list)
    hard_states: list[HardState] = field(default_factory=lambda: [HardState(Epoch(0), None)])

    def durable(self) -> None:
        self.promised = list(self.written)
        self.hard_states = self.hard_states[-1:]


def open_log(fs: FaultyFileSystem) -> DiskStorage:
    return DiskStorage(DIRECTORY, clock=lambda: 0, config=CONFIG, fs=fs)


def workload(fs: FaultyFileSystem, progress: Progress) -> None:
    storage = open_log(fs)
    first = build_batches([2, 1, 3, 2, 1, 2], epochs=[E1] * 6)
    progress.written += first[:3]  # Before the call: a crash inside may keep some.
    storage.append(first[:3])
    storage.save_hard_state(HardState(E1, NodeId(1)))
    progress.hard_states.append(HardState(E1, NodeId(1)))
    storage.sync()
    progress.durable()
    progress.written += first[3:]
    storage.append(first[3:])
    storage.save_hwm(Offset(6))
    storage.sync()
    progress.durable()
    storage.truncate_to(offset=Offset(8))
    progress.written = progress.written[:4]
    progress.durable()
    second = build_batches([1, 4, 2], base_offset=8, epochs=[E2] * 3)
    progress.written += second
    storage.append(second)
    storage.save_hard_state(HardState(E2, None))
    progress.hard_states.append(HardState(E2, None))
    storage.sync()
    progress.durable()
    storage.save_hwm(Offset(15))
    storage.apply_retention(0)
    storage.close()
    progress.durable()


def count_calls() -> int:
    fs = FaultyFileSystem(random.Random(0))
    workload(fs, Progress())
    return fs.calls


def prefix_of(batches: list[bytes], log_start: Offset) -> list[bytes]:
    return [batch for batch in batches if read_header(batch).next_offset > log_start]


def common_prefix(a: list[bytes], b: list[bytes]) -> list[bytes]:
    count = 0
    while count < min(len(a), len(b)) and a[count] == b[count]:
        count += 1
    return a[:count]


@pytest.mark.parametrize("tear", [False, True])
def test_crash_at_every_write_point(tear: bool) -> None:
    total = count_calls()
    assert total > 40
    for crash_at in range(1, total + 2):
        fs = FaultyFileSystem(random.Random(crash_at), crash_at_call=crash_at)
        progress = Progress()
        with contextlib.suppress(SimulatedCrash):
            workload(fs, progress)
        fs.crash(tear=tear)
        storage = open_log(fs)
        state = storage.load()
        assert storage.needs_repair is None, crash_at
        recovered = storage.read(
            state.log_start_offset, end_offset=state.log_end_offset, max_bytes=1 << 30
        )
        promised = prefix_of(progress.promised, state.log_start_offset)
        written = prefix_of(progress.written, state.log_start_offset)
        assert recovered[: len(common_prefix(promised, written))] == common_prefix(
            promised, written
        ), crash_at
        assert recovered in (promised[: len(recovered)], written[: len(recovered)]), crash_at
        assert state.hard_state in progress.hard_states, crash_at
        assert state.hwm <= state.log_end_offset
        storage.close()


def synced_log(sizes: list[int], hwm: int) -> tuple[FaultyFileSystem, list[bytes], list[str]]:
    fs = FaultyFileSystem(random.Random(7))
    storage = open_log(fs)
    batches = build_batches(sizes)
    storage.append(batches)
    storage.save_hwm(Offset(hwm))
    storage.close()
    return fs, batches, storage.segment_paths()


def test_corruption_below_the_hwm_needs_repair_and_is_never_served() -> None:
    fs, batches, paths = synced_log([2] * 12, hwm=24)
    assert len(paths) > 2
    position = len(batches[0]) + 70  # Inside the records of the batch at offset 2.
    fs.flip_bit(paths[0], position)
    storage = open_log(fs)
    assert storage.read(Offset(0), end_offset=Offset(24), max_bytes=1) == [batches[0]]
    with pytest.raises(StorageError, match=r"offset 2 in .*00000000000000000000\.log"):
        storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20)
    assert storage.needs_repair is not None
    assert storage.needs_repair.offset == 2
    assert storage.needs_repair.segment_path == paths[0]
    with pytest.raises(StorageError, match="needs repair"):
        storage.read(Offset(20), end_offset=Offset(24), max_bytes=1 << 20)


def test_corruption_below_the_hwm_found_by_recovery_needs_repair() -> None:
    fs, _batches, paths = synced_log([2] * 12, hwm=24)
    last = paths[-1]
    fs.flip_bit(last, 80)  # The first batch of the active segment, which recovery scans.
    storage = open_log(fs)
    assert storage.needs_repair is not None
    assert storage.needs_repair.segment_path == last
    base = int(last.rsplit("/", 1)[1][:20])
    assert storage.needs_repair.offset == base
    with pytest.raises(StorageError, match=f"offset {base} in {last}"):
        storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20)
    assert fs.size(last) > 0  # Nothing was cut: the bytes wait for the repair.


def test_corruption_at_the_tail_is_cut_and_the_log_reopens_cleanly() -> None:
    fs, batches, paths = synced_log([2] * 12, hwm=20)
    tail_position = fs.size(paths[-1]) - len(batches[-1])
    fs.flip_bit(paths[-1], tail_position + 70)
    storage = open_log(fs)
    assert storage.needs_repair is None
    state = storage.load()
    assert state.log_end_offset == 22
    assert storage.read(Offset(0), end_offset=Offset(22), max_bytes=1 << 20) == batches[:11]
    storage.append(build_batches([3], base_offset=22))
    storage.close()
    storage = open_log(fs)
    assert storage.load().log_end_offset == 25
    assert storage.needs_repair is None


def test_torn_tail_on_a_real_disk_is_cut(tmp_path: object) -> None:
    directory = str(tmp_path)
    batches = build_batches([2] * 3)
    with DiskStorage(directory, clock=lambda: 0, config=CONFIG) as storage:
        storage.append(batches)
        path = storage.segment_paths()[-1]
    with open(path, "r+b") as file:
        file.truncate(len(batches[0]) + 30)
    with DiskStorage(directory, clock=lambda: 0, config=CONFIG) as storage:
        assert storage.load().log_end_offset == 2
        assert storage.read(Offset(0), end_offset=Offset(6), max_bytes=1 << 20) == batches[:1]


def test_a_failed_fsync_promises_nothing() -> None:
    """fsyncgate: after EIO the written batches are not durable, and a crash loses them."""
    fs = FaultyFileSystem(random.Random(0))
    storage = open_log(fs)
    batches = build_batches([2, 3])
    storage.append(batches[:1])
    storage.sync()
    storage.append(batches[1:])
    fs.fail_next_sync()
    with pytest.raises(OSError, match="fsync") as error:
        storage.sync()
    assert error.value.errno == errno.EIO
    fs.crash()
    storage = open_log(fs)
    assert storage.load().log_end_offset == 2
    assert storage.read(Offset(0), end_offset=Offset(5), max_bytes=1 << 20) == batches[:1]


def test_a_full_disk_fails_the_write_part_way_and_the_crash_cuts_it() -> None:
    fs = FaultyFileSystem(random.Random(3))
    storage = open_log(fs)
    batches = build_batches([2, 3])
    storage.append(batches[:1])
    storage.sync()
    fs.fill_up()
    with pytest.raises(OSError, match="full disk") as error:
        storage.append(batches[1:])
    assert error.value.errno == errno.ENOSPC
    fs.crash()
    storage = open_log(fs)
    assert storage.read(Offset(0), end_offset=Offset(5), max_bytes=1 << 20) == batches[:1]
    storage.append(batches[1:])  # Each fault fires once: the disk has room again.
    assert storage.load().log_end_offset == 5
