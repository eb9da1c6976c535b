"""The bytes of client requests a broker holds at once (Kafka's queued.max.request.bytes)."""

from __future__ import annotations

import asyncio
from collections import deque


class RequestBytes:
    """The bytes of requests a broker holds at once, bounded (queued.max.request.bytes).

    A request larger than the whole budget is let in alone, when nothing else is held, so
    that no size below REQUEST_SIZE_MAX can wait for ever; any request that fits is let in
    at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.used + size <= self.limit or self.used == 0

    async def acquire(self, size: int) -> None:
        if self._fits(size):
            self.used += size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted as we were cancelled: give it back
            elif (size, waiter) in self._waiters:
                self._waiters.remove((size, waiter))
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        """Grant every waiter that fits, oldest first: a small request never waits behind
        a large one that does not fit (a few slow 90 MiB uploads must not stall every
        client)."""
        kept: deque[tuple[int, asyncio.Future[None]]] = deque()
        while self._waiters:
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            if self._fits(size):
                self.used += size
                waiter.set_result(None)
            else:
                kept.append((size, waiter))
        self._waiters = kept
