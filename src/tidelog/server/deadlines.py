"""Many waits' deadlines on one timer of the event loop.

A request that waits (a Produce for its HWM, a long-polling Fetch) has a deadline. An
`asyncio.timeout` around each wait costs a timer and a context of its own per request
(about 9 us on uvloop, measured); here each wait is one heap entry, and one timer of the
loop is due at the earliest deadline.

Rules of this file:
- `add(when, future, result)`: at `when` (loop time), `future` gets `result()` as its
  result, unless it is done by then (answered, or cancelled with its request); `result` is
  called only then, so a wait answered in time builds no timeout answer.
- Entries of futures already done are dropped from the top of the heap as they come: with
  deadlines that grow (one timeout for every request), the heap holds about the waits in
  flight, never a timeout's worth of answered ones. Whatever the deadlines, the heap is
  rebuilt without them once it doubles (`COMPACT_MIN` at least): at most twice the waits
  in flight, plus that.
- A timer may fire up to `SLACK_S` early (libuv counts milliseconds): what is due within it
  is due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

COMPACT_MIN = 1024
SLACK_S = 0.001


class Deadlines:
    """Futures completed at their deadline (with what `result()` gives), on one timer."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, asyncio.Future[Any], Callable[[], Any]]] = []
        self.order = itertools.count()  # ties broken by arrival, never by the future
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.compact_at = COMPACT_MIN

    def __len__(self) -> int:
        return len(self.heap)

    def add(self, when: float, future: asyncio.Future[Any], result: Callable[[], Any]) -> None:
        heap = self.heap
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        if len(heap) >= self.compact_at:
            heap[:] = [entry for entry in heap if not entry[2].done()]
            heapq.heapify(heap)
            self.compact_at = max(COMPACT_MIN, 2 * len(heap))
        heapq.heappush(heap, (when, next(self.order), future, result))
        if self.timer is None or when < self.timer_at:
            self._schedule(when)

    def _schedule(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        self.timer = None
        heap = self.heap
        due = asyncio.get_running_loop().time() + SLACK_S
        while heap and (heap[0][0] <= due or heap[0][2].done()):
            _, _, future, result = heapq.heappop(heap)
            if not future.done():
                future.set_result(result())
        if heap:
            self._schedule(heap[0][0])

    def close(self) -> None:
        """Forget every deadline (the futures are left as they are)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.heap.clear()
