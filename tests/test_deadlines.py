"""Deadlines of waiting requests on one timer (server/deadlines.py), and the partition
runner's use of it: a produce not answered in time is answered REQUEST_TIMED_OUT, and a
long-polling fetch returns at its deadline, or as soon as the HWM moves, after the produce
it completed is answered."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tidelog.core import Replica, ReplicaConfig
from tidelog.core.replica import ACKS_ALL
from tidelog.errors import RequestTimedOut
from tidelog.protocol.peer import PartitionKey
from tidelog.server.deadlines import COMPACT_MIN, Deadlines
from tidelog.server.disk_health import DiskHealth
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import Tick
from tidelog.testing.sim import build_batch
from tidelog.types import NodeId, Offset
from tidelog.wal import DiskStorage, OsFileSystem, WalConfig

DEADLINE_S = 10.0


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(body())


def test_each_future_gets_its_value_at_its_deadline_in_deadline_order() -> None:
    async def body() -> list[str]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        got: list[str] = []
        futures = []
        for name, delay in (("c", 0.15), ("a", 0.05), ("b", 0.10)):
            future: asyncio.Future[str] = loop.create_future()
            future.add_done_callback(lambda f: got.append(f.result()))
            deadlines.add(loop.time() + delay, future, lambda name=name: name)
            futures.append(future)
        started = loop.time()
        await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S)
        assert loop.time() - started >= 0.15 - 0.002
        assert len(deadlines) == 0
        return got

    assert run(body) == ["a", "b", "c"]


def test_a_future_done_before_its_deadline_keeps_its_result() -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        answered: asyncio.Future[str] = loop.create_future()
        cancelled: asyncio.Future[str] = loop.create_future()
        late: asyncio.Future[str] = loop.create_future()
        for future in (answered, cancelled, late):
            deadlines.add(loop.time() + 0.05, future, lambda: "timed out")
        answered.set_result("answered")
        cancelled.cancel()
        assert await asyncio.wait_for(late, DEADLINE_S) == "timed out"
        assert answered.result() == "answered"
        assert cancelled.cancelled()

    run(body)


def test_answered_waits_do_not_pile_up() -> None:
    """Many waits answered long before their deadlines, in any deadline order: the heap
    stays within twice the waits in flight plus COMPACT_MIN."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        rng = random.Random(7)
        in_flight: list[asyncio.Future[None]] = []
        for _ in range(50_000):
            future: asyncio.Future[None] = loop.create_future()
            deadlines.add(loop.time() + rng.uniform(10, 60), future, lambda: None)
            in_flight.append(future)
            if len(in_flight) > 100:
                in_flight.pop(rng.randrange(len(in_flight))).set_result(None)
            assert len(deadlines) <= 2 * len(in_flight) + COMPACT_MIN
        deadlines.close()

    run(body)


class Lone:
    """A one-replica partition on disk, under its runner, led once ticked."""

    def __init__(self, directory: Path) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1)
        config = ReplicaConfig(NodeId(1), (NodeId(1),), tick_ms=10)
        storage = DiskStorage(
            str(directory), clock=lambda: int(time.time() * 1000), config=WalConfig(),
            fs=OsFileSystem(),
        )  # fmt: skip
        self.runner = PartitionRunner(
            PartitionKey("t", 0),
            storage,
            open_replica=lambda storage: Replica(config, storage, random.Random(1)),
            send=lambda key, messages: None,
            executor=self.executor,
            fatal=lambda error: None,
            disk=DiskHealth(),
        )

    async def lead(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        now = 0
        while self.runner.replica.high_watermark() == 0:
            assert time.monotonic() < deadline, "not leading in time"
            now += 100
            self.runner.submit(Tick(now))
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        await self.runner.stop()
        self.executor.shutdown()


def on_lone(tmp_path: Path, body: Callable[[Lone], Awaitable[None]]) -> None:
    """Run `body` on a led Lone partition, stopped after."""

    async def main() -> None:
        node = Lone(tmp_path)
        try:
            await node.lead()
            await body(node)
        finally:
            await node.stop()

    asyncio.run(main())


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def test_a_produce_not_answered_in_time_times_out(tmp_path: Path) -> None:
    async def body(node: Lone) -> None:
        node.runner.submit = lambda command: None  # type: ignore[method-assign]
        started = time.monotonic()
        future = node.runner.produce(build_batch(b"v"), ACKS_ALL, 0.1)
        result = await asyncio.wait_for(future, DEADLINE_S)
        assert time.monotonic() - started >= 0.1 - 0.002
        assert isinstance(result.error, RequestTimedOut)

    on_lone(tmp_path, body)


def test_a_produce_answered_in_time_is_answered(tmp_path: Path) -> None:
    async def body(node: Lone) -> None:
        future = node.runner.produce(build_batch(b"v"), ACKS_ALL, 5.0)
        result = await asyncio.wait_for(future, DEADLINE_S)
        assert result.error is None and result.base_offset is not None

    on_lone(tmp_path, body)


def test_a_long_poll_returns_at_its_deadline_or_when_the_hwm_moves(tmp_path: Path) -> None:
    async def body(node: Lone) -> None:
        runner = node.runner
        hwm = runner.replica.high_watermark()
        started = time.monotonic()
        await asyncio.wait_for(runner.wait_for_hwm(hwm, 0.1), DEADLINE_S)
        assert time.monotonic() - started >= 0.1 - 0.002
        assert not runner.hwm_waiters  # a wait that ended leaves nothing behind
        waiting = asyncio.ensure_future(runner.wait_for_hwm(hwm, DEADLINE_S))
        await until(lambda: bool(runner.hwm_waiters))
        await runner.produce(build_batch(b"v"), ACKS_ALL, 5.0)
        await asyncio.wait_for(waiting, 1.0)  # woken by the HWM, long before its deadline
        assert runner.replica.high_watermark() > Offset(hwm)
        cancelled = asyncio.ensure_future(runner.wait_for_hwm(Offset(hwm + 5), 5.0))
        await until(lambda: bool(runner.hwm_waiters))
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert not runner.hwm_waiters

    on_lone(tmp_path, body)


def test_a_produce_is_answered_before_the_fetchers_its_hwm_wakes_read(tmp_path: Path) -> None:
    """As on a Kafka connection, a handler task awaits the produce and a writer awaits
    that task: the response is written before a long-polling fetch that the same move
    of the HWM wakes goes on to read."""

    async def body(node: Lone) -> None:
        runner = node.runner
        hwm = runner.replica.high_watermark()
        order: list[str] = []

        async def fetch() -> None:
            await runner.wait_for_hwm(hwm, DEADLINE_S)
            order.append("fetch reads")

        async def handle() -> None:
            await runner.produce(build_batch(b"v"), ACKS_ALL, DEADLINE_S)
            order.append("produce handled")

        async def write(handling: asyncio.Task[None]) -> None:
            await handling
            order.append("produce answered")

        fetching = asyncio.ensure_future(fetch())
        await until(lambda: bool(runner.hwm_waiters))
        writing = asyncio.ensure_future(write(asyncio.ensure_future(handle())))
        await asyncio.wait_for(asyncio.gather(fetching, writing), DEADLINE_S)
        assert order == ["produce handled", "produce answered", "fetch reads"]

    on_lone(tmp_path, body)
