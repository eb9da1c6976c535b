"""The bytes of client requests a broker holds at once (Kafka's queued.max.request.bytes)."""

from __future__ import annotations

import asyncio
from collections import deque


class RequestBytes:
    """The bytes of requests a broker holds at once, bounded (queued.max.request.bytes).

    A request larger than the whole budget is let in alone, when nothing else is held, so
    that no size below REQUEST_SIZE_MAX can wait for ever."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.used + size <= self.limit or self.used == 0

    async def acquire(self, size: int) -> None:
        if not self._waiters and self._fits(size):
            self.used += size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted as we were cancelled: give it back
            else:
                self._waiters.remove((size, waiter))
                self._wake()
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        """Grant waiters in arrival order while they fit (first come, first served)."""
        while self._waiters and self._fits(self._waiters[0][0]):
            size, waiter = self._waiters.popleft()
            if not waiter.done():
                self.used += size
                waiter.set_result(None)
