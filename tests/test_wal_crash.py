"""Crashes at every write point, and corruption in the middle versus at the tail.

Crash at every point: a short workload runs on a FaultyFileSystem that cuts the power at
its k-th mutating call, for every k (with and without torn writes). After recovery,
everything a returned sync (or truncation) promised is intact, nothing torn is served, the
log is a batch prefix of what was written, and its voter sets are those its VOTERS batches
tell (with the set in effect at the log start, from below it) or the one a reset left.
"""

from __future__ import annotations

import contextlib
import errno
import random
from dataclasses import dataclass, field

import pytest

from tidelog.core import membership
from tidelog.core.membership import (
    ReplicaKey,
    VoterSet,
    VoterSetEntry,
    VoterSetRecords,
)
from tidelog.core.messages import HardState
from tidelog.core.storage import RepairFloor
from tidelog.errors import StorageError
from tidelog.records import read_header
from tidelog.types import DirectoryId, Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, SimulatedCrash, WalConfig
from tidelog.wal.batches import build_batches
from tidelog.wal.group_sync import sync_logs

CONFIG = WalConfig(
    segment_bytes=900, index_interval_bytes=200, hwm_checkpoint_interval_ms=0, retention_bytes=1
)
DIRECTORY = "/data/topic-0"
OTHER = "/data/other-0"  # a log syncing in a group with it
E1, E2 = Epoch(1), Epoch(2)
RESET_START = Offset(30)


def voters_of(*nodes: int) -> VoterSet:
    return VoterSet.of(ReplicaKey(NodeId(node), DirectoryId(node + 10)) for node in nodes)


def voters_batch(base_offset: int, voters: VoterSet, epoch: Epoch) -> bytes:
    """A VOTERS control batch (KIP-853's VotersRecord) of one record at `base_offset`."""
    return membership.voters_batch(voters, base_offset=Offset(base_offset), epoch=epoch)


RESET_VOTERS = voters_of(2, 3, 4)


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


def workload(fs: FaultyFileSystem, progress: Progress, *, grouped: bool = False) -> None:
    """Writes and syncs of one log; `grouped`: each sync is a group commit with another log
    of the same file system (wal/group_sync.py), which writes too."""
    storage = open_log(fs)
    other = DiskStorage(OTHER, clock=lambda: 0, config=CONFIG, fs=fs) if grouped else None
    others = iter(build_batches([1] * 4, epochs=[E1] * 4))

    def sync() -> None:
        if other is None:
            storage.sync()
            return
        other.append([next(others)])
        assert sync_logs([storage, other]) == [None, None]

    first = build_batches([2, 1, 3, 2, 1, 2], epochs=[E1] * 6)
    first[1] = voters_batch(2, voters_of(1, 2, 3), E1)
    first[4] = voters_batch(8, voters_of(1, 2), E1)  # truncated away
    progress.written += first[:3]  # Before the call: a crash inside may keep some.
    storage.append(first[:3])
    storage.save_hard_state(HardState(E1, NodeId(1)))
    progress.hard_states.append(HardState(E1, NodeId(1)))
    sync()
    progress.durable()
    progress.written += first[3:]
    storage.append(first[3:])
    storage.save_hwm(Offset(6))
    sync()
    progress.durable()
    progress.written = progress.written[:4]  # Before the call: a crash inside may cut.
    storage.truncate_to(offset=Offset(8))
    progress.durable()
    second = build_batches([1, 4, 2], base_offset=8, epochs=[E2] * 3)
    second[0] = voters_batch(8, voters_of(1, 2, 3, 4), E2)
    progress.written += second
    storage.append(second)
    storage.save_hard_state(HardState(E2, None))
    progress.hard_states.append(HardState(E2, None))
    sync()
    progress.durable()
    storage.save_hwm(Offset(15))
    storage.apply_retention(0)
    storage.reset(start_offset=RESET_START, prev_epoch=E2, voters=RESET_VOTERS)
    storage.close()
    progress.durable()


def count_calls(*, grouped: bool = False) -> int:
    fs = FaultyFileSystem(random.Random(0))
    workload(fs, Progress(), grouped=grouped)
    return fs.calls


def prefix_of(batches: list[bytes], log_start: Offset) -> list[bytes]:
    return [batch for batch in batches if read_header(batch).next_offset > log_start]


def expected_voter_sets(
    written: list[bytes], recovered: list[bytes], log_start: Offset
) -> tuple[VoterSetEntry, ...]:
    """The voter sets of a recovered log, as MemoryStorage keeps them: its VOTERS batches
    and the set in effect at its first batch from those below its start (retention deleted
    only written batches); after the reset, the set it left."""
    if log_start == RESET_START:
        return (VoterSetEntry(Offset(RESET_START - 1), RESET_VOTERS),)
    records = VoterSetRecords()
    below = [batch for batch in written if read_header(batch).next_offset <= log_start]
    for batch in below + recovered:
        records.on_batch(batch, read_header(batch).base_offset)
    records.trim(read_header(recovered[0]).base_offset if recovered else log_start)
    return records.entries


def common_prefix(a: list[bytes], b: list[bytes]) -> list[bytes]:
    count = 0
    while count < min(len(a), len(b)) and a[count] == b[count]:
        count += 1
    return a[:count]


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "group-commit"])
@pytest.mark.parametrize("tear", [False, True])
def test_crash_at_every_write_point(tear: bool, grouped: bool) -> None:
    total = count_calls(grouped=grouped)
    assert total > 40
    for crash_at in range(1, total + 2):
        fs = FaultyFileSystem(random.Random(crash_at), crash_at_call=crash_at)
        progress = Progress()
        with contextlib.suppress(SimulatedCrash):
            workload(fs, progress, grouped=grouped)
        fs.crash(tear=tear)
        storage = open_log(fs)
        state = storage.load()
        assert storage.needs_repair is None, crash_at
        assert state.repair_floor is None, crash_at
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
        assert state.voter_sets == expected_voter_sets(
            progress.written, recovered, state.log_start_offset
        ), crash_at
        assert state.hwm <= state.log_end_offset
        storage.close()


def synced_log(sizes: list[int], hwm: int) -> tuple[FaultyFileSystem, list[bytes], list[str]]:
    fs = FaultyFileSystem(random.Random(7))
    storage = open_log(fs)
    batches = build_batches(sizes)
    storage.save_hard_state(HardState(E1, NodeId(1)))
    storage.append(batches)
    storage.save_hwm(Offset(hwm))
    storage.close()
    return fs, batches, storage.segment_paths()


def base_of(path: str) -> Offset:
    return Offset(int(path.rsplit("/", 1)[1][:20]))


def quarantined(fs: FaultyFileSystem, cut: int) -> list[str]:
    return fs.listdir(f"{DIRECTORY}/quarantine/{cut:020d}")


def test_corruption_a_read_finds_is_never_served_and_is_set_aside() -> None:
    fs, batches, paths = synced_log([2] * 12, hwm=24)
    assert len(paths) > 2
    position = len(batches[0]) + 70  # Inside the records of the batch at offset 2.
    fs.flip_bit(paths[0], position)
    damaged = fs.pread(paths[0], 0, fs.size(paths[0]))
    storage = open_log(fs)  # Below the recovery point: recovery trusts the segment.
    assert storage.read(Offset(0), end_offset=Offset(24), max_bytes=1) == [batches[0]]
    with pytest.raises(StorageError, match=r"offset 2 in .*00000000000000000000\.log"):
        storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20)
    assert storage.needs_repair is not None
    assert storage.needs_repair.offset == 2
    assert storage.needs_repair.segment_path == paths[0]
    with pytest.raises(StorageError, match="needs repair"):
        storage.read(Offset(20), end_offset=Offset(24), max_bytes=1 << 20)
    with pytest.raises(StorageError, match="needs repair"):
        storage.append(build_batches([1], base_offset=24))

    assert storage.quarantine()
    state = storage.load()
    assert (state.log_end_offset, state.hwm, storage.needs_repair) == (2, 2, None)
    assert state.repair_floor == RepairFloor(E1, Offset(24))  # what it held and may have acked
    assert storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20) == batches[:1]
    # The damaged bytes and every later segment are kept, where dump-log can read them.
    later = [name.rsplit("/", 1)[1] for name in paths[1:]]
    assert quarantined(fs, 2) == sorted(["00000000000000000002.log", *later, *index_names(later)])
    tail = fs.pread(f"{DIRECTORY}/quarantine/{2:020d}/00000000000000000002.log", 0, 1 << 20)
    assert tail == damaged[len(batches[0]) :]
    storage.close()
    reopened = open_log(fs)
    assert reopened.load().repair_floor == RepairFloor(E1, Offset(24))
    assert reopened.load().log_end_offset == 2


def index_names(logs: list[str]) -> list[str]:
    return [log.replace(".log", suffix) for log in logs for suffix in (".index", ".timeindex")]


def test_corruption_recovery_finds_below_the_hwm_is_set_aside() -> None:
    fs, batches, paths = synced_log([2] * 12, hwm=24)
    last = paths[-1]
    base = base_of(last)
    fs.flip_bit(last, 80)  # The first batch of the active segment, which recovery scans.
    storage = open_log(fs)
    state = storage.load()
    assert storage.needs_repair is None
    assert (state.log_end_offset, state.hwm) == (base, base)
    # The batches after the damaged one still read in order to the end: the end is known.
    assert state.repair_floor == RepairFloor(E1, Offset(24))
    assert storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20) == batches[: base // 2]
    assert quarantined(fs, base) == [f"{base:020d}.log"]
    assert fs.size(last) == 0  # the damaged segment now ends where the damage began


def test_damage_that_hides_how_far_the_log_reached_leaves_its_end_unknown() -> None:
    fs, _batches, paths = synced_log([2] * 12, hwm=20)
    last = paths[-1]
    fs.flip_bit(last, 9)  # The length of the active segment's first batch: framing breaks.
    storage = open_log(fs)
    assert storage.load().repair_floor == RepairFloor(E1, None)
    assert storage.load().log_end_offset == base_of(last)


def test_a_log_cut_short_below_its_hwm_is_damage() -> None:
    fs, batches, paths = synced_log([2] * 12, hwm=24)
    last = paths[-1]
    fs.truncate(last, len(batches[-1]) * 2)  # Whole batches, but fewer than were committed.
    fs.fsync(last)
    storage = open_log(fs)
    state = storage.load()
    assert state.log_end_offset == base_of(last) + 4
    assert state.hwm == state.log_end_offset
    assert state.repair_floor == RepairFloor(E1, None)  # how far it went is unknown


def test_the_floor_is_forgotten_once_the_log_reached_it() -> None:
    fs, _batches, paths = synced_log([2] * 12, hwm=24)
    fs.flip_bit(paths[-1], 80)
    storage = open_log(fs)
    base = storage.load().log_end_offset
    storage.append(build_batches([2] * ((24 - base) // 2), base_offset=base))
    storage.clear_repair_floor()
    storage.sync()
    fs.crash()
    assert open_log(fs).load().repair_floor is None


@pytest.mark.parametrize("segment", [-2, -1], ids=["found-by-a-read", "found-by-recovery"])
def test_a_crash_at_every_write_point_of_a_repair_leaves_it_done_or_to_do(segment: int) -> None:
    """Below the recovery point a read finds the damage; in the active segment, recovery."""

    def damaged() -> FaultyFileSystem:
        fs, _batches, paths = synced_log([2] * 12, hwm=24)
        fs.flip_bit(paths[segment], 80)
        return fs

    def repair(fs: FaultyFileSystem) -> None:
        storage = open_log(fs)
        with contextlib.suppress(StorageError):
            storage.read(Offset(0), end_offset=Offset(24), max_bytes=1 << 20)
        storage.quarantine()

    probe = damaged()
    before = probe.calls
    repair(probe)
    calls = probe.calls - before
    assert calls > 10
    expected = open_log(probe).load()
    assert expected.repair_floor == RepairFloor(E1, Offset(24))
    for crash_at in range(1, calls + 1):
        fs = damaged()
        fs.crash_at_call = fs.calls + crash_at
        with contextlib.suppress(SimulatedCrash):
            repair(fs)
        fs.crash(tear=True)
        repair(fs)  # Found again by recovery or by the read, or done already.
        state = open_log(fs).load()
        assert state.repair_floor == expected.repair_floor, crash_at
        assert state.log_end_offset == expected.log_end_offset, crash_at
        assert state.hwm <= state.log_end_offset, crash_at


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


def test_after_a_failed_fsync_only_what_the_last_sync_made_durable_is_trusted() -> None:
    """fsyncgate: the failed fsync's bytes still show, yet reopen cuts them."""
    fs = FaultyFileSystem(random.Random(0))
    storage = open_log(fs)
    batches = build_batches([2, 3])
    storage.append(batches[:1])
    storage.sync()
    storage.append(batches[1:])
    fs.fail_next_sync(errno.EIO)
    with pytest.raises(OSError, match="fsync failed") as failed:
        storage.sync()
    assert failed.value.errno == errno.EIO
    assert fs.size(storage.segment_paths()[-1]) == sum(map(len, batches))  # still shown

    reopened = storage.reopen()

    assert reopened.load().log_end_offset == 2
    assert reopened.read(Offset(0), end_offset=Offset(5), max_bytes=1 << 20) == batches[:1]


def test_a_failed_group_commit_fails_every_log_of_it_and_trusts_none_of_it() -> None:
    """One sync of the file system for two logs fails: both get the error, and each
    reopens cut back to its last completed sync."""
    fs = FaultyFileSystem(random.Random(0))
    logs = [open_log(fs), DiskStorage(OTHER, clock=lambda: 0, config=CONFIG, fs=fs)]
    batches = build_batches([2, 3])
    for log in logs:
        log.append(batches[:1])
    assert sync_logs(logs) == [None, None]
    for log in logs:
        log.append(batches[1:])
    fs.fail_next_sync(errno.EIO)

    errors = sync_logs(logs)

    assert [getattr(error, "errno", None) for error in errors] == [errno.EIO, errno.EIO]
    for log in logs:
        assert log.synced_end_offset == 2
        reopened = log.reopen()
        assert reopened.load().log_end_offset == 2
        assert reopened.read(Offset(0), end_offset=Offset(5), max_bytes=1 << 20) == batches[:1]


def lazy_logs(fs: FaultyFileSystem, first_id: int) -> list[DiskStorage]:
    """Two new logs opened lazily (the broker's new partitions), of ids `first_id` and the
    next."""
    ids = iter([DirectoryId(first_id), DirectoryId(first_id + 1)])
    return [
        DiskStorage(
            path, clock=lambda: 0, config=CONFIG, fs=fs, lazy=True,
            new_directory_id=lambda: next(ids),
        )
        for path in (DIRECTORY, OTHER)
    ]  # fmt: skip


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "group-commit"])
def test_a_lazy_new_log_is_durable_with_its_first_sync_and_whole_before(grouped: bool) -> None:
    """A new directory opened lazily syncs nothing at once: a crash before its first sync
    leaves a directory that opens as new; its first sync, alone or in a group, makes its
    id durable."""
    fs = FaultyFileSystem(random.Random(0))
    assert [log.directory_id for log in lazy_logs(fs, 11)] == [11, 12]
    fs.crash()
    again = DiskStorage(DIRECTORY, clock=lambda: 0, config=CONFIG, fs=fs)
    assert again.log_end_offset == 0 and again.directory_id not in (11, 12)

    fs = FaultyFileSystem(random.Random(0))
    opened = lazy_logs(fs, 21)
    if grouped:
        assert sync_logs(opened) == [None, None]
    else:
        for log in opened:
            log.sync()
    fs.crash()
    found = [DiskStorage(p, clock=lambda: 0, config=CONFIG, fs=fs) for p in (DIRECTORY, OTHER)]
    assert [log.directory_id for log in found] == [21, 22]


def test_a_full_disk_fails_writes_and_reopening_until_space_returns() -> None:
    fs = FaultyFileSystem(random.Random(3))
    storage = open_log(fs)
    batches = build_batches([2, 3, 1])
    storage.append(batches[:1])
    storage.sync()
    fs.fill_up(until_freed=True)
    with pytest.raises(OSError, match="No space left") as full:
        storage.append(batches[1:2])  # a short write: part of the batch is there
    assert full.value.errno == errno.ENOSPC
    with pytest.raises(OSError, match="No space left"):
        storage.reopen()  # recovery rewrites the indexes: no room yet

    fs.free_space()
    reopened = storage.reopen()

    assert reopened.load().log_end_offset == 2
    reopened.append(batches[1:])
    reopened.sync()
    assert reopened.read(Offset(0), end_offset=Offset(6), max_bytes=1 << 20) == batches
