"""A partition whose disk fills up or fails an fsync (FaultyFileSystem), under its runner.

The partition stops acknowledging writes (each is refused with KAFKA_STORAGE_ERROR), the
node says so in one log line and no traceback, reads of committed records go on, and the
runner reopens the log from disk with a growing delay until the disk takes it again. After
a failed fsync nothing written since the last completed one is trusted: the batch it failed
to sync is never acknowledged and is not in the reopened log (fsyncgate).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tidelog.core import ProduceResult, Replica, ReplicaConfig, Role
from tidelog.core.replica import ACKS_ALL
from tidelog.errors import StorageError
from tidelog.protocol.peer import PartitionKey
from tidelog.server.disk_health import DiskHealth
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import Tick
from tidelog.testing.sim import build_batch
from tidelog.types import NodeId, Offset
from tidelog.wal import DiskStorage, FaultyFileSystem, WalConfig
from tidelog.wal.kafka_records import DefaultRecordBatch

DEADLINE_S = 10.0
TICK_S = 0.01
RETRIES_SEEN = 3
DIRECTORY = "/data/t-0"
CONFIG = WalConfig(hwm_checkpoint_interval_ms=0)
QUIET_S = 0.0  # the disk is well again at the first sync that completes


class Lone:
    """A one-replica partition on a FaultyFileSystem, driven by its runner and a ticker."""

    def __init__(self, fs: FaultyFileSystem) -> None:
        self.fs = fs
        self.fatal: list[BaseException] = []
        self.executor = ThreadPoolExecutor(max_workers=1)
        config = ReplicaConfig(NodeId(1), (NodeId(1),), tick_ms=10)
        self.runner = PartitionRunner(
            PartitionKey("t", 0),
            DiskStorage(DIRECTORY, clock=lambda: int(time.time() * 1000), config=CONFIG, fs=fs),
            open_replica=lambda storage: Replica(config, storage, random.Random(1)),
            send=lambda key, messages: None,
            executor=self.executor,
            fatal=self.fatal.append,
            disk=DiskHealth(quiet_s=QUIET_S),
        )
        self.ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.ticker = asyncio.get_running_loop().create_task(self.tick_forever())
        await until(self.leads)

    def leads(self) -> bool:
        replica = self.runner.replica
        return replica.role is Role.LEADER and replica.hwm > replica.epoch_start_offset

    async def tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = int(time.monotonic() * 1000)
            self.runner.submit(Tick(now, now))

    async def produce(self, value: bytes) -> ProduceResult:
        return await self.runner.produce(build_batch(value), ACKS_ALL)

    def committed_values(self) -> list[bytes]:
        replica = self.runner.replica
        result = replica.fetch(Offset(0), max_bytes=1 << 20)
        assert result.error is None, result.error
        return [value for batch in result.batches if (value := value_of(batch)) is not None]

    async def stop(self) -> None:
        assert self.ticker is not None
        self.ticker.cancel()
        await self.runner.stop()
        self.executor.shutdown()


def value_of(batch: bytes) -> bytes | None:
    """The first record's value of a data batch (None for a control batch)."""
    records = DefaultRecordBatch(batch)
    if records.is_control_batch:
        return None
    value: bytes = next(iter(records)).value
    return value


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(TICK_S)


def run(body: Callable[[Lone], Awaitable[None]]) -> Lone:
    async def main() -> Lone:
        node = Lone(FaultyFileSystem(random.Random(5)))
        await node.start()
        try:
            await body(node)
        finally:
            await node.stop()
        return node

    return asyncio.run(main())


def partition_log(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "tidelog.server.partition" and record.levelno >= logging.WARNING
    ]


def test_a_full_disk_refuses_writes_in_one_line_and_writes_resume_once_space_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(node: Lone) -> None:
        assert (await node.produce(b"a")).error is None
        node.fs.fill_up(until_freed=True)

        refused = await node.produce(b"b")

        assert isinstance(refused.error, StorageError)
        assert node.runner.disk_error is not None
        assert isinstance((await node.produce(b"c")).error, StorageError)  # at once
        assert node.committed_values() == [b"a"]  # reads go on
        calls = node.fs.calls
        await until(lambda: node.fs.calls > calls + RETRIES_SEEN)  # reopening, again and again
        node.fs.free_space()
        await until(lambda: node.runner.disk_error is None and node.leads())
        assert (await node.produce(b"d")).error is None
        assert node.committed_values() == [b"a", b"d"]

    node = run(body)

    assert node.fatal == []
    logged = partition_log(caplog)
    assert [level for level, _ in logged] == [logging.ERROR, logging.WARNING]
    assert logged[0][1].startswith(
        "t-0: disk full (No space left on device (simulated): "
        f"{DIRECTORY}/00000000000000000000.log); this node acknowledges no write until the "
        "disk takes them again"
    )
    assert logged[1][1].startswith("the disk takes writes again: disk full")
    assert not any(record.exc_info for record in caplog.records)


def test_after_a_failed_fsync_the_batch_is_never_acknowledged_nor_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(node: Lone) -> None:
        assert (await node.produce(b"a")).error is None
        node.fs.fail_next_sync(errno.EIO)

        refused = await node.produce(b"lost")

        assert isinstance(refused.error, StorageError)
        await until(lambda: node.runner.disk_error is None and node.leads())
        assert node.committed_values() == [b"a"]  # cut back to the last completed sync
        assert (await node.produce(b"b")).error is None
        assert node.committed_values() == [b"a", b"b"]

    node = run(body)

    assert node.fatal == []
    assert [message.split(":")[:2] for _, message in partition_log(caplog)] == [
        ["t-0", " disk error (fsync failed (simulated EIO)"],
        ["the disk takes writes again", " disk error (fsync failed (simulated EIO)"],
    ]
