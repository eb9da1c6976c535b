"""Where a partition's round fsyncs (server/disk_health.py `Syncs`): on the loop for a small
round when no sync of the node is in a thread and none on the loop was slow lately, with the
peers' messages flushed first; in a worker thread otherwise, in a group commit (the rounds
that ask while a group syncs are synced together next, wal/group_sync.py)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tidelog.core.messages import HardState
from tidelog.server.disk_health import (
    SYNC_INLINE_BACKOFF_S,
    SYNC_INLINE_BYTES_MAX,
    SYNC_INLINE_SLOW_S,
    Syncs,
)
from tidelog.types import Epoch
from tidelog.wal import DiskStorage, OsFileSystem
from tidelog.wal.batches import build_batches


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Storage:
    """Records where each sync ran; a sync takes `took` seconds of the fake clock, and
    waits for `gate` when one is set (a sync still in its thread)."""

    def __init__(self, clock: Clock, events: list[str]) -> None:
        self.clock = clock
        self.events = events
        self.took = 0.0
        self.gate: threading.Event | None = None
        self.checkpoint = False  # the next sync writes a checkpoint
        self.device = id(self)  # a file system of its own: it syncs alone

    def checkpoint_due(self) -> bool:
        return self.checkpoint

    def sync(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(10)
        self.clock.now += self.took
        self.events.append(f"sync in {threading.current_thread().name.split('_')[0]}")


def run(body: Any) -> None:
    asyncio.run(body())


def syncs_and_storage() -> tuple[Syncs, Storage, list[str], ThreadPoolExecutor]:
    events: list[str] = []
    clock = Clock()
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fsync")
    syncs = Syncs(executor, lambda: events.append("flush"), clock=clock)
    return syncs, Storage(clock, events), events, executor


def test_a_small_round_syncs_on_the_loop_after_flushing_the_peers_messages() -> None:
    syncs, storage, events, executor = syncs_and_storage()

    async def body() -> None:
        assert await syncs.sync(storage, 170) is True
        syncs.sent()

    with executor:
        run(body)
    assert events == ["flush", "sync in MainThread", "flush"]


def test_a_big_round_syncs_in_a_thread() -> None:
    syncs, storage, events, executor = syncs_and_storage()

    async def body() -> None:
        assert await syncs.sync(storage, SYNC_INLINE_BYTES_MAX + 1) is False

    with executor:
        run(body)
    assert events == ["sync in fsync"]
    assert syncs.in_threads == 0


def test_a_small_round_that_writes_a_checkpoint_syncs_in_a_thread() -> None:
    syncs, storage, events, executor = syncs_and_storage()
    storage.checkpoint = True

    async def body() -> None:
        assert await syncs.sync(storage, 1) is False

    with executor:
        run(body)
    assert events == ["sync in fsync"]


def test_a_slow_sync_on_the_loop_sends_the_syncs_to_threads_for_a_while() -> None:
    syncs, storage, events, executor = syncs_and_storage()

    async def body() -> None:
        storage.took = SYNC_INLINE_SLOW_S * 2
        assert await syncs.sync(storage, 10) is True  # slow: the next ones go to threads
        storage.took = 0.0
        assert await syncs.sync(storage, 10) is False
        storage.clock.now += SYNC_INLINE_BACKOFF_S
        assert await syncs.sync(storage, 10) is True

    with executor:
        run(body)
    assert events == ["flush", "sync in MainThread", "sync in fsync", "flush", "sync in MainThread"]


def test_no_sync_runs_on_the_loop_while_another_is_in_a_thread() -> None:
    syncs, storage, events, executor = syncs_and_storage()
    other = Storage(storage.clock, events)
    other.gate = threading.Event()

    async def body() -> None:
        big = asyncio.ensure_future(syncs.sync(other, SYNC_INLINE_BYTES_MAX * 4))
        await asyncio.sleep(0)  # its task starts: the sync is handed to a thread
        assert syncs.in_threads == 1
        # Another small round meanwhile: to a thread as well, in the next group.
        small = asyncio.ensure_future(syncs.sync(storage, 10))
        await asyncio.sleep(0)
        assert syncs.in_threads == 2 and not small.done()
        other.gate.set()
        assert await big is False
        assert await small is False

    with executor:
        run(body)
    assert sorted(events) == ["sync in fsync", "sync in fsync"]


class CountingFileSystem(OsFileSystem):
    """The real file system, counting the syncs of the whole file system and of files."""

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__()
        self.counts = counts

    def sync_all(self, directory: str) -> None:
        self.counts["sync_all"] += 1
        super().sync_all(directory)

    def fsync(self, path: str) -> None:
        self.counts["fsync"] += 1
        super().fsync(path)

    def fdatasync(self, path: str) -> None:
        self.counts["fsync"] += 1
        super().fdatasync(path)


def test_rounds_that_ask_together_are_synced_as_one_group(tmp_path: Path) -> None:
    counts = {"sync_all": 0, "fsync": 0}
    logs = [
        DiskStorage(str(tmp_path / f"p-{n}"), clock=lambda: 5, fs=CountingFileSystem(counts))
        for n in range(20)
    ]
    counts.update(sync_all=0, fsync=0)  # opening them synced their new directories
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fsync")
    syncs = Syncs(executor)

    async def body() -> None:
        for number, log in enumerate(logs):
            log.save_hard_state(HardState(epoch=Epoch(number + 1), voted_for=None))
            log.append(build_batches([2], epochs=[Epoch(number + 1)]))
        done = await asyncio.gather(*(syncs.sync(log, 1 << 20) for log in logs))
        assert done == [False] * len(logs)

    with executor:
        run(body)
    # One group: the data and the temporary files, then the renames; no file's own fsync.
    assert counts == {"sync_all": 2, "fsync": 0}
    for number, log in enumerate(logs):
        assert log.synced_end_offset == log.log_end_offset == 2
        log.close()
        again = DiskStorage(str(tmp_path / f"p-{number}"), clock=lambda: 5)
        assert again.load().hard_state == HardState(epoch=Epoch(number + 1), voted_for=None)
        assert again.log_end_offset == 2
        again.close()
