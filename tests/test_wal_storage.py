"""Unit tests of the disk log: segments, indexes, checkpoints, reads, rolls, truncation,
retention, and that DiskStorage behaves as MemoryStorage does."""

from __future__ import annotations

import random
import shutil

import pytest

from tidelog.core import membership
from tidelog.core.epochs import EpochEntry
from tidelog.core.membership import ReplicaKey, VoterSet, VoterSetEntry
from tidelog.core.messages import HardState
from tidelog.core.producers import ProducerEntry, SequencedBatch
from tidelog.core.storage import MemoryStorage, StoredState
from tidelog.errors import CorruptBatch, OffsetOutOfRange, StorageError
from tidelog.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    build_control_batch,
    read_header,
)
from tidelog.types import NO_DIRECTORY, DirectoryId, Epoch, NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, OsFileSystem, WalConfig
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.batches import build_batches
from tidelog.wal.index import OFFSET_ENTRY, TIME_ENTRY

SMALL = WalConfig(segment_bytes=1500, index_interval_bytes=200, hwm_checkpoint_interval_ms=0)
E1, E2, E3 = Epoch(1), Epoch(2), Epoch(3)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def open_disk(path: str, config: WalConfig = SMALL, clock: Clock | None = None) -> DiskStorage:
    return DiskStorage(path, clock=clock or Clock(), config=config, fs=OsFileSystem())


def read_all(storage: DiskStorage) -> list[bytes]:
    state = storage.load()
    return storage.read(state.log_start_offset, end_offset=state.log_end_offset, max_bytes=1 << 30)


def ends(batches: list[bytes]) -> list[int]:
    return [read_header(batch).next_offset for batch in batches]


def voter(node: int) -> ReplicaKey:
    return ReplicaKey(NodeId(node), DirectoryId(0x100 + node))


VOTERS_A = VoterSet.of([voter(1), voter(2), voter(3)])
VOTERS_B = VOTERS_A.add(voter(4))
VOTERS_C = VOTERS_B.remove(voter(1))


def voters_batch(base_offset: int, voters: VoterSet, epoch: Epoch = E1) -> bytes:
    """A VOTERS control batch (KIP-853's VotersRecord) of one record at `base_offset`."""
    return membership.voters_batch(voters, base_offset=Offset(base_offset), epoch=epoch)


def test_segments_are_named_by_base_offset_and_roll_at_size(tmp_path: object) -> None:
    batches = build_batches([3] * 12)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        paths = storage.segment_paths()
        assert len(paths) > 2
        assert paths[0].endswith("00000000000000000000.log")
        assert read_all(storage) == batches
    for path in paths:
        size = OsFileSystem().size(path)
        assert size <= SMALL.segment_bytes


def test_roll_at_age_with_the_injected_clock(tmp_path: object) -> None:
    clock = Clock()
    config = WalConfig(segment_ms=100, hwm_checkpoint_interval_ms=0)
    batches = build_batches([1, 1, 1])
    with open_disk(str(tmp_path), config, clock) as storage:
        storage.append(batches[:2])
        assert len(storage.segment_paths()) == 1
        clock.now_ms += 100
        storage.append(batches[2:])
        assert storage.segment_paths()[-1].endswith("00000000000000000002.log")


def test_reopen_returns_the_same_log_and_state(tmp_path: object) -> None:
    batches = build_batches([2] * 10, epochs=[E1] * 4 + [E2] * 3 + [E3] * 3)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.save_hard_state(HardState(E3, NodeId(2)))
        storage.save_hwm(Offset(12))
        storage.sync()
    with open_disk(str(tmp_path)) as storage:
        state = storage.load()
        assert read_all(storage) == batches
        assert state.hard_state == HardState(E3, NodeId(2))
        assert state.hwm == 12
        assert state.log_end_offset == 20
        assert state.epochs == (
            EpochEntry(E1, Offset(0)),
            EpochEntry(E2, Offset(8)),
            EpochEntry(E3, Offset(14)),
        )


def test_leader_epoch_checkpoint_is_in_kafka_format(tmp_path: object) -> None:
    with open_disk(str(tmp_path)) as storage:
        storage.append(build_batches([1, 1], epochs=[E1, E3]))
        storage.sync()
    text = (tmp_path / ckpt.LEADER_EPOCH).read_text()  # type: ignore[operator]
    assert text == "0\n2\n1 0\n3 1\n"


def test_read_limits_whole_batches_end_offset_and_max_bytes(tmp_path: object) -> None:
    batches = build_batches([4] * 10)
    size = len(batches[0])
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        assert storage.read(Offset(5), end_offset=Offset(40), max_bytes=1) == [batches[1]]
        assert storage.read(Offset(4), end_offset=Offset(40), max_bytes=3 * size) == batches[1:4]
        assert storage.read(Offset(0), end_offset=Offset(11), max_bytes=1 << 20) == batches[:2]
        assert storage.read(Offset(0), end_offset=Offset(3), max_bytes=1 << 20) == []
        assert storage.read(Offset(40), end_offset=Offset(40), max_bytes=1 << 20) == []
        assert storage.read(Offset(37), end_offset=Offset(40), max_bytes=1) == [batches[9]]


def test_the_last_batch_is_found_without_a_scan_and_still_checked(tmp_path: object) -> None:
    """A read at the log's end takes the last batch's place from memory (no scan from the
    sparse index entry before it), but its header is read from the disk: a damaged one is
    found and never served; after a truncation the batch now last is found again."""
    batches = build_batches([4] * 6)
    one_segment = WalConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    with open_disk(str(tmp_path), one_segment) as storage:
        storage.append(batches)
        segment = storage._local.segments.active
        assert segment.last_batch is not None
        assert segment.last_batch[0] == sum(len(batch) for batch in batches[:-1])
        assert storage.read(Offset(21), end_offset=Offset(24), max_bytes=1) == [batches[5]]
        tail = storage.read_range(Offset(20), end_offset=Offset(24), max_bytes=1)
        assert bytes(tail) == batches[5]
        storage.truncate_to(offset=Offset(16))
        assert segment.last_batch is None  # a truncation forgets it: found by a scan
        assert storage.read(Offset(12), end_offset=Offset(16), max_bytes=1) == [batches[3]]
        storage.append(batches[4:])
        assert storage.read(Offset(20), end_offset=Offset(24), max_bytes=1) == [batches[5]]
        position = segment.last_batch[0]
        with open(segment.log_path, "r+b") as file:  # its base offset, not covered by the CRC
            file.seek(position + 7)
            file.write(b"\x63")
        with pytest.raises(StorageError, match="needs repair"):
            storage.read_range(Offset(20), end_offset=Offset(24), max_bytes=1)
        assert storage.needs_repair is not None


def test_append_checks_framing_and_a_read_checks_the_crc(tmp_path: object) -> None:
    """The leader's door and the follower's core check each batch's CRC before it reaches
    the log, so `append` checks only framing; a batch that rots on the way is still never
    served: the read that meets it fails and marks the log for repair, after a reopen too."""
    batches = build_batches([4] * 4)
    rotten = bytearray(batches[2])
    rotten[-1] ^= 0x01  # a record byte: inside the CRC, outside the framing
    with open_disk(str(tmp_path)) as storage:
        storage.append([*batches[:2], bytes(rotten), batches[3]])
        assert storage.read(Offset(0), end_offset=Offset(8), max_bytes=1 << 20) == batches[:2]
        with pytest.raises(StorageError, match="needs repair: corrupt batch at offset 8"):
            storage.read(Offset(4), end_offset=Offset(16), max_bytes=1 << 20)
        with pytest.raises(StorageError, match="needs repair"):
            storage.append(build_batches([4], base_offset=16))
        assert storage.quarantine()
        assert storage.load().log_end_offset == 8
        assert read_all(storage) == batches[:2]
        with pytest.raises(CorruptBatch, match="bytes"):
            storage.append([batches[2][:-1]])  # framing: its length says one byte more
    with open_disk(str(tmp_path)) as storage:
        storage.append([bytes(rotten), batches[3]])
    with open_disk(str(tmp_path)) as storage:
        assert storage.read(Offset(0), end_offset=Offset(8), max_bytes=1 << 20) == batches[:2]
        with pytest.raises(StorageError, match="corrupt batch at offset 8"):
            read_all(storage)


def test_sparse_index_entries_every_interval(tmp_path: object) -> None:
    batches = build_batches([1] * 20)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        index_path = storage.segment_paths()[0].replace(".log", ".index")
    data = OsFileSystem().pread(index_path, 0, 1 << 20)
    entries = list(OFFSET_ENTRY.iter_unpack(data))
    assert entries
    positions = [position for _, position in entries]
    gaps = [b - a for a, b in zip([0, *positions], positions, strict=False)]
    assert all(gap > SMALL.index_interval_bytes for gap in gaps)


def test_stale_or_missing_indexes_are_rebuilt(tmp_path: object) -> None:
    batches = build_batches([1] * 30)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        paths = storage.segment_paths()
    (tmp_path / paths[0].rsplit("/", 1)[1].replace(".log", ".index")).write_bytes(  # type: ignore[operator]
        OFFSET_ENTRY.pack(1, 999_999)
    )
    (tmp_path / paths[1].rsplit("/", 1)[1].replace(".log", ".timeindex")).unlink()  # type: ignore[operator]
    with open_disk(str(tmp_path)) as storage:
        assert read_all(storage) == batches
        for offset in range(30):
            assert storage.read(Offset(offset), end_offset=Offset(30), max_bytes=1) == [
                batches[offset]
            ]
        assert storage.offset_for_timestamp(17) == (17, 17)


def test_offset_for_timestamp(tmp_path: object) -> None:
    batches = build_batches([5] * 10, timestamp_ms=1000)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        assert storage.offset_for_timestamp(0) == (0, 1000)
        assert storage.offset_for_timestamp(1023) == (23, 1023)
        assert storage.offset_for_timestamp(1049) == (49, 1049)
        assert storage.offset_for_timestamp(1050) is None
    with open_disk(str(tmp_path)) as storage:
        assert storage.offset_for_timestamp(1031) == (31, 1031)
        data = OsFileSystem().pread(
            storage.segment_paths()[0].replace(".log", ".timeindex"), 0, 1 << 20
        )
        timestamps = [ts for ts, _ in TIME_ENTRY.iter_unpack(data)]
        assert timestamps == sorted(set(timestamps))


def test_control_batches_never_match_a_timestamp(tmp_path: object) -> None:
    """A new leader's control batch, stamped with its clock, must not shadow the records
    before it, nor be found itself; past the last data record there is none (-1)."""
    data = build_batches([5, 5], timestamp_ms=1000)
    late = build_control_batch(
        base_offset=Offset(10), epoch=Epoch(2), control_type=CONTROL_TYPE_LEADER_CHANGE,
        timestamp_ms=9_999_999,
    )  # fmt: skip
    more = build_batches([5], base_offset=11, epochs=[Epoch(2)], timestamp_ms=2000)
    with open_disk(str(tmp_path)) as storage:
        storage.append([*data, late, *more])
        assert storage.offset_for_timestamp(0) == (0, 1000)
        assert storage.offset_for_timestamp(1007) == (7, 1007)
        assert storage.offset_for_timestamp(1010) == (11, 2011)  # the control batch skipped
        assert storage.offset_for_timestamp(2015) == (15, 2015)
        assert storage.offset_for_timestamp(2016) is None  # only the control batch is later


def test_truncation_across_segments_fixes_indexes_and_epochs(tmp_path: object) -> None:
    batches = build_batches([2] * 20, epochs=[E1] * 10 + [E2] * 10)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        assert len(storage.segment_paths()) > 3
        storage.truncate_to(offset=Offset(14))
        assert storage.load().log_end_offset == 14
        assert storage.load().epochs == (EpochEntry(E1, Offset(0)),)
        assert read_all(storage) == batches[:7]
        replacement = build_batches([3, 3], base_offset=Offset(14), epochs=[E3, E3])
        storage.append(replacement)
        storage.sync()
    with open_disk(str(tmp_path)) as storage:
        assert read_all(storage) == batches[:7] + replacement
        assert storage.load().epochs == (EpochEntry(E1, Offset(0)), EpochEntry(E3, Offset(14)))


def test_truncation_below_the_checkpointed_hwm_is_a_bug(tmp_path: object) -> None:
    with open_disk(str(tmp_path)) as storage:
        storage.append(build_batches([2] * 5))
        storage.save_hwm(Offset(6))
        storage.sync()
        with pytest.raises(AssertionError, match="checkpointed HWM"):
            storage.truncate_to(offset=Offset(4))


def test_truncation_must_be_at_a_batch_boundary(tmp_path: object) -> None:
    with open_disk(str(tmp_path)) as storage:
        storage.append(build_batches([2] * 5))
        with pytest.raises(AssertionError, match="boundary"):
            storage.truncate_to(offset=Offset(3))


def test_retention_by_size_never_passes_the_hwm(tmp_path: object) -> None:
    config = WalConfig(segment_bytes=1500, retention_bytes=1, hwm_checkpoint_interval_ms=0)
    batches = build_batches([3] * 12)
    with open_disk(str(tmp_path), config) as storage:
        storage.append(batches)
        storage.sync()
        segments = len(storage.segment_paths())
        assert storage.apply_retention(0) == 0
        storage.save_hwm(Offset(20))
        storage.sync()
        deleted = storage.apply_retention(0)
        assert 0 < deleted < segments - 1
        start = storage.load().log_start_offset
        assert 0 < start <= 20
        # The history keeps the epoch of the record before the log start.
        assert storage.load().epochs == (EpochEntry(E1, Offset(start - 1)),)
        with pytest.raises(OffsetOutOfRange):
            storage.read(Offset(0), end_offset=Offset(36), max_bytes=1 << 20)
    with open_disk(str(tmp_path), config) as storage:
        assert storage.load().log_start_offset == start
        assert read_all(storage) == [b for b in batches if read_header(b).next_offset > start]


def test_retention_by_age(tmp_path: object) -> None:
    config = WalConfig(segment_bytes=1500, retention_ms=100, hwm_checkpoint_interval_ms=0)
    batches = build_batches([3] * 12, timestamp_ms=10_000)
    with open_disk(str(tmp_path), config) as storage:
        storage.append(batches)
        storage.save_hwm(Offset(36))
        storage.sync()
        assert storage.apply_retention(10_050) == 0
        deleted = storage.apply_retention(20_000)
        assert deleted == len(storage.segment_paths()) + deleted - 1
        assert storage.segment_paths()[0] == storage.segment_paths()[-1]


def test_advance_log_start_is_checkpointed_and_bounded_by_hwm(tmp_path: object) -> None:
    batches = build_batches([3] * 12, epochs=[E1] * 6 + [E2] * 6)
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.save_hwm(Offset(30))
        storage.sync()
        with pytest.raises(OffsetOutOfRange):
            storage.advance_log_start(Offset(31))
        storage.advance_log_start(Offset(19))
        state = storage.load()
        assert state.log_start_offset == 19
        # From the record before the batch holding the log start (18..20) on.
        assert state.epochs == (EpochEntry(E1, Offset(17)), EpochEntry(E2, Offset(18)))
        assert storage.read(Offset(19), end_offset=Offset(36), max_bytes=1) == [batches[6]]
    with open_disk(str(tmp_path)) as storage:
        assert storage.load().log_start_offset == 19
        assert storage.load().epochs == (EpochEntry(E1, Offset(17)), EpochEntry(E2, Offset(18)))


def test_flush_interval_mode_skips_fsyncs_until_the_interval_passes(tmp_path: object) -> None:
    clock = Clock()
    fs = FaultyFileSystem(random.Random(0))
    config = WalConfig(flush_interval_ms=50, hwm_checkpoint_interval_ms=0)
    storage = DiskStorage("/data/p", clock=clock, config=config, fs=fs)
    storage.append(build_batches([1]))
    storage.sync()
    fs.crash()
    assert DiskStorage("/data/p", clock=clock, config=config, fs=fs).load().log_end_offset == 0
    storage = DiskStorage("/data/p", clock=clock, config=config, fs=fs)
    storage.append(build_batches([1]))
    clock.now_ms += 50
    storage.sync()
    fs.crash()
    assert DiskStorage("/data/p", clock=clock, config=config, fs=fs).load().log_end_offset == 1


def run_same_script(storage: DiskStorage | MemoryStorage) -> list[object]:
    """A script of LogStorage calls; what a replica would see at each step."""
    seen: list[object] = []
    first = build_batches([2, 3, 1, 4], epochs=[E1, E1, E2, E2])
    storage.append(first)
    storage.save_hard_state(HardState(E2, NodeId(1)))
    storage.sync()
    seen.append(storage.load())
    seen.append(storage.read(Offset(3), end_offset=Offset(10), max_bytes=1))
    seen.append(storage.read(Offset(0), end_offset=Offset(6), max_bytes=1 << 20))
    storage.truncate_to(offset=Offset(5))
    storage.append(build_batches([2, 2], base_offset=Offset(5), epochs=[E3, E3]))
    storage.save_hwm(Offset(7))
    storage.sync()
    seen.append(storage.load())
    seen.append(storage.read(Offset(0), end_offset=Offset(9), max_bytes=1 << 20))
    run_voters_script(storage, seen)
    return seen


def run_voters_script(storage: DiskStorage | MemoryStorage, seen: list[object]) -> None:
    """The voter sets through appends, a truncation below one, a log start moved past one
    (the set in effect at the new start stays) and resets with and without a set."""
    storage.append(
        [voters_batch(9, VOTERS_A, E3), *build_batches([3], base_offset=10, epochs=[E3])]
    )
    storage.append(
        [voters_batch(13, VOTERS_B, E3), *build_batches([2], base_offset=14, epochs=[E3])]
    )
    storage.sync()
    seen.append(storage.load())
    storage.truncate_to(offset=Offset(13))
    seen.append(storage.load())
    storage.append(
        [voters_batch(13, VOTERS_C, E3), *build_batches([2], base_offset=14, epochs=[E3])]
    )
    storage.save_hwm(Offset(16))
    storage.sync()
    seen.append(storage.load())
    storage.advance_log_start(Offset(15))
    storage.sync()
    seen.append(storage.load())
    seen.append(storage.read(Offset(15), end_offset=Offset(16), max_bytes=1 << 20))
    storage.append([voters_batch(16, VOTERS_A, E3)])
    storage.save_hwm(Offset(17))
    storage.advance_log_start(Offset(17))  # the log end: the log holds no batch
    storage.sync()
    seen.append(storage.load())
    storage.reset(start_offset=Offset(30), prev_epoch=E3, voters=VOTERS_A)
    seen.append(storage.load())
    storage.append([voters_batch(30, VOTERS_B, E3)])
    storage.sync()
    seen.append(storage.load())
    storage.reset(start_offset=Offset(40), prev_epoch=E3)
    seen.append(storage.load())


def test_disk_storage_behaves_as_memory_storage(tmp_path: object) -> None:
    with open_disk(str(tmp_path)) as disk:
        memory = MemoryStorage(disk.directory_id)
        seen = run_same_script(disk)
        assert seen == run_same_script(memory)
    voter_sets = [state.voter_sets for state in seen if isinstance(state, StoredState)]
    assert voter_sets[-8:] == [
        (VoterSetEntry(Offset(9), VOTERS_A), VoterSetEntry(Offset(13), VOTERS_B)),
        (VoterSetEntry(Offset(9), VOTERS_A),),
        (VoterSetEntry(Offset(9), VOTERS_A), VoterSetEntry(Offset(13), VOTERS_C)),
        (VoterSetEntry(Offset(13), VOTERS_C),),
        (VoterSetEntry(Offset(16), VOTERS_A),),
        (VoterSetEntry(Offset(29), VOTERS_A),),
        (VoterSetEntry(Offset(29), VOTERS_A), VoterSetEntry(Offset(30), VOTERS_B)),
        (),
    ]


@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-cut"])
def test_a_reset_log_keeps_the_epoch_of_the_record_before_it(crash: bool) -> None:
    """A follower reset to its leader's log start holds no record, yet the epoch of the
    record before it is durable on return: its votes and consistency checks need it."""
    fs = FaultyFileSystem(random.Random(0))
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    storage.append(build_batches([3] * 4, epochs=[E1] * 4))
    storage.sync()
    storage.reset(start_offset=Offset(40), prev_epoch=E2)
    assert storage.load().epochs == (EpochEntry(E2, Offset(39)),)
    if crash:
        fs.crash(tear=False)
    else:
        storage.close()
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    state = again.load()
    assert (state.log_start_offset, state.log_end_offset, state.hwm) == (40, 40, 40)
    assert state.epochs == (EpochEntry(E2, Offset(39)),)
    again.append(build_batches([3], base_offset=Offset(40), epochs=[E2]))
    assert again.load().epochs == (EpochEntry(E2, Offset(39)),)


def test_memory_storage_keeps_the_last_epoch_of_an_emptied_log() -> None:
    storage = MemoryStorage()
    storage.append(build_batches([3, 3], epochs=[E1, E2]))
    storage.save_hwm(Offset(6))
    storage.advance_log_start(Offset(6))
    storage.sync()
    storage.crash()
    assert storage.load().epochs == (EpochEntry(E2, Offset(5)),)
    storage.reset(start_offset=Offset(9), prev_epoch=Epoch(3))
    assert storage.load().epochs == (EpochEntry(Epoch(3), Offset(8)),)


SNAPSHOT = (
    ProducerEntry(77, 0, SequencedBatch(4, 4, Offset(3), Offset(6))),
    ProducerEntry(88, 2, SequencedBatch(0, 2, Offset(6), Offset(9))),
)


@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "crash"])
def test_the_producer_snapshot_is_saved_with_the_log_start(crash: bool) -> None:
    """DeleteRecords, retention and a reset save the idempotent producers' snapshot at the
    new log start, durably on return; moving the log start without one keeps the last."""
    fs = FaultyFileSystem(random.Random(0))
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    storage.append(build_batches([3] * 6, epochs=[E1] * 6))
    storage.save_hwm(Offset(18))
    storage.sync()
    storage.advance_log_start(Offset(9), producers=SNAPSHOT)
    storage.advance_log_start(Offset(12))  # no snapshot given: the last one stays
    assert storage.load().producers == SNAPSHOT
    if crash:
        fs.crash(tear=False)
    else:
        storage.close()
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert (again.load().log_start_offset, again.load().producers) == (12, SNAPSHOT)
    again.reset(start_offset=Offset(40), prev_epoch=E2, producers=SNAPSHOT[1:])
    again.close()
    third = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert third.load().producers == SNAPSHOT[1:]


def test_a_producer_snapshot_that_cannot_be_right_is_refused(tmp_path: object) -> None:
    storage = open_disk(str(tmp_path))
    storage.append(build_batches([3], epochs=[E1]))
    storage.save_hwm(Offset(3))
    storage.sync()
    storage.advance_log_start(Offset(3), producers=SNAPSHOT[:1])
    storage.close()
    path = f"{tmp_path}/{ckpt.PRODUCERS}"
    with open(path, "w") as file:
        file.write("0\n1\n77 0 4 4 6 3\n")  # a batch that ends before it begins
    with pytest.raises(StorageError, match="impossible row"):
        open_disk(str(tmp_path))


def test_memory_storage_keeps_the_producer_snapshot_until_a_crash_takes_it() -> None:
    storage = MemoryStorage()
    storage.append(build_batches([3, 3], epochs=[E1, E1]))
    storage.save_hwm(Offset(6))
    storage.sync()
    storage.advance_log_start(Offset(6), producers=SNAPSHOT)
    storage.crash()  # not synced: gone with the log start
    assert (storage.load().log_start_offset, storage.load().producers) == (0, ())
    storage.advance_log_start(Offset(6), producers=SNAPSHOT)
    storage.sync()
    storage.crash()
    assert storage.load().producers == SNAPSHOT


def test_a_directory_keeps_its_id_and_an_empty_one_gets_a_new_one(tmp_path: object) -> None:
    """KIP-853's directory id: made with the directory, durable, kept by every reopen; a
    log on an empty directory (a replaced disk) is a new copy with a new id."""
    path = f"{tmp_path}/p"
    with open_disk(path) as first:
        made = first.load().directory_id
    assert made != NO_DIRECTORY
    assert (tmp_path / "p" / ckpt.DIRECTORY_ID).read_text() == f"0\n1\n{made}\n"  # type: ignore[operator]
    with open_disk(path) as again:
        assert again.load().directory_id == made
    shutil.rmtree(path)
    with open_disk(path) as replaced:
        assert replaced.load().directory_id not in (made, NO_DIRECTORY)
    (tmp_path / "p" / ckpt.DIRECTORY_ID).write_text("0\n1\n0\n")  # type: ignore[operator]
    with pytest.raises(StorageError, match="directory-id holds 0"):
        open_disk(path)


def test_voter_sets_survive_a_restart_in_their_checkpoint(tmp_path: object) -> None:
    """The voter sets of the VOTERS batches come back from the checkpoint (segments below the
    recovery point are not scanned) and from recovery's scan of the rest."""
    batches = [
        voters_batch(0, VOTERS_A),
        *build_batches([3] * 5, base_offset=1),
        voters_batch(16, VOTERS_B),
        *build_batches([3] * 5, base_offset=17),
        voters_batch(32, VOTERS_C),
    ]
    expected = (
        VoterSetEntry(Offset(0), VOTERS_A),
        VoterSetEntry(Offset(16), VOTERS_B),
        VoterSetEntry(Offset(32), VOTERS_C),
    )
    with open_disk(str(tmp_path)) as storage:
        storage.append(batches)
        storage.sync()
        assert len(storage.segment_paths()) > 2
        assert storage.load().voter_sets == expected
    rows = [
        f"{offset} {node} {0x100 + node}"
        for offset, nodes in ((0, [1, 2, 3]), (16, [1, 2, 3, 4]), (32, [2, 3, 4]))
        for node in nodes
    ]
    text = (tmp_path / ckpt.VOTERS).read_text()  # type: ignore[operator]
    assert text == "\n".join(["0", "10", *rows]) + "\n"
    with open_disk(str(tmp_path)) as again:
        assert again.load().voter_sets == expected


def test_a_voters_checkpoint_that_cannot_be_right_is_refused(tmp_path: object) -> None:
    open_disk(str(tmp_path)).close()
    path = tmp_path / ckpt.VOTERS  # type: ignore[operator]
    for text, error in [
        ("0\n2\n5 1 7\n4 2 7\n", "do not rise"),
        ("0\n2\n5 1 7\n5 1 8\n", "one key per node"),
        ("0\n1\n5 -1 7\n", "impossible row"),
        ("0\n1\n5 1\n", "malformed"),
    ]:
        path.write_text(text)
        with pytest.raises(StorageError, match=error):
            open_disk(str(tmp_path))


@pytest.mark.parametrize("tear", [False, True], ids=["clean", "torn"])
def test_a_power_cut_takes_an_unsynced_voter_set_with_its_batch(tear: bool) -> None:
    fs = FaultyFileSystem(random.Random(1))
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    storage.append([*build_batches([3]), voters_batch(3, VOTERS_A)])
    storage.sync()
    storage.append([voters_batch(4, VOTERS_B), *build_batches([3], base_offset=5)])
    assert storage.load().voter_sets[-1] == VoterSetEntry(Offset(4), VOTERS_B)
    fs.crash(tear=tear)
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert again.load().voter_sets == (VoterSetEntry(Offset(3), VOTERS_A),)
    assert again.load().log_end_offset == 4
    again.append([voters_batch(4, VOTERS_C)])
    again.sync()
    fs.crash(tear=tear)
    third = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert third.load().voter_sets == (
        VoterSetEntry(Offset(3), VOTERS_A),
        VoterSetEntry(Offset(4), VOTERS_C),
    )


@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-cut"])
def test_a_truncation_below_a_voter_set_removes_it_durably(crash: bool) -> None:
    fs = FaultyFileSystem(random.Random(2))
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    batches = [voters_batch(0, VOTERS_A), *build_batches([3] * 6, base_offset=1)]
    batches += [voters_batch(19, VOTERS_B), *build_batches([3] * 6, base_offset=20)]
    storage.append(batches)
    storage.sync()
    storage.truncate_to(offset=Offset(19))
    assert storage.load().voter_sets == (VoterSetEntry(Offset(0), VOTERS_A),)
    if crash:
        fs.crash(tear=True)
    else:
        storage.close()
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert again.load().log_end_offset == 19
    assert again.load().voter_sets == (VoterSetEntry(Offset(0), VOTERS_A),)
    assert ckpt.read_voters(fs, "/data/t-0") == [VoterSetEntry(Offset(0), VOTERS_A)]


@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-cut"])
def test_a_reset_log_keeps_the_voter_set_before_it(crash: bool) -> None:
    """A follower reset to its leader's log start holds no VOTERS batch, yet the leader's
    voter set there is durable on return (at the offset before the start); a reset
    without one leaves none (the partition's first set is in effect)."""
    fs = FaultyFileSystem(random.Random(0))
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    storage.append([voters_batch(0, VOTERS_A), *build_batches([3] * 4, base_offset=1)])
    storage.sync()
    storage.reset(start_offset=Offset(40), prev_epoch=E2, voters=VOTERS_B)
    assert storage.load().voter_sets == (VoterSetEntry(Offset(39), VOTERS_B),)
    if crash:
        fs.crash(tear=False)
    else:
        storage.close()
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert again.load().voter_sets == (VoterSetEntry(Offset(39), VOTERS_B),)
    again.append(build_batches([3], base_offset=Offset(40), epochs=[E2]))
    again.sync()
    assert again.load().voter_sets == (VoterSetEntry(Offset(39), VOTERS_B),)
    again.reset(start_offset=Offset(50), prev_epoch=E2)
    if crash:
        fs.crash(tear=False)
    else:
        again.close()
    third = DiskStorage("/data/t-0", clock=lambda: 0, config=SMALL, fs=fs)
    assert third.load().voter_sets == ()


@pytest.mark.parametrize("found_by_recovery", [False, True], ids=["synced", "found-by-recovery"])
@pytest.mark.parametrize("move", ["retention", "delete-records"])
def test_the_voter_set_at_the_log_start_outlives_the_segment_of_its_batch(
    move: str, found_by_recovery: bool
) -> None:
    """The log start moves past the VOTERS batch of the set in effect there, and the
    segment that held it is deleted: the set stays, durably on return. When recovery found
    that batch (on the disk, but no sync of this log covered it), the checkpoint lags: the
    log start move must write it before the segment goes."""
    fs = FaultyFileSystem(random.Random(0))
    config = WalConfig(segment_bytes=1500, index_interval_bytes=200, retention_bytes=1)
    storage = DiskStorage("/data/t-0", clock=lambda: 0, config=config, fs=fs)
    batches = [*build_batches([3] * 4), voters_batch(12, VOTERS_A)]
    batches += [*build_batches([3] * 8, base_offset=13), voters_batch(37, VOTERS_B)]
    batches += build_batches([3] * 8, base_offset=38)
    storage.append(batches)
    if found_by_recovery:
        storage.release()  # unsynced, yet on the disk (as a torn power cut may leave it)
        storage = DiskStorage("/data/t-0", clock=lambda: 0, config=config, fs=fs)
        assert ckpt.read_voters(fs, "/data/t-0") == []
    else:
        storage.sync()
    paths = storage.segment_paths()
    assert len(paths) > 3
    holding = max(path for path in paths if int(path.rsplit("/", 1)[1][:20]) <= 37)
    storage.save_hwm(Offset(62))
    if move == "retention":
        assert storage.apply_retention(0) > 0
    else:
        storage.advance_log_start(Offset(50))
    start = storage.load().log_start_offset
    assert start > 38
    assert holding not in storage.segment_paths()
    assert not fs.exists(holding)
    assert storage.load().voter_sets == (VoterSetEntry(Offset(37), VOTERS_B),)
    assert ckpt.read_voters(fs, "/data/t-0") == [VoterSetEntry(Offset(37), VOTERS_B)]
    if found_by_recovery:
        storage.release()  # no power cut: this log never synced those batches
    else:
        fs.crash(tear=True)
    again = DiskStorage("/data/t-0", clock=lambda: 0, config=config, fs=fs)
    assert again.load().log_start_offset == start
    assert again.load().voter_sets == (VoterSetEntry(Offset(37), VOTERS_B),)
