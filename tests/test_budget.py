"""The broker's budget of request bytes (queued.max.request.bytes)."""

from __future__ import annotations

import asyncio

from tidelog.server.budget import RequestBytes


def run(coroutine: object) -> None:
    asyncio.run(coroutine)  # type: ignore[arg-type]


def test_requests_that_fit_go_at_once_and_others_wait_for_a_release() -> None:
    async def scenario() -> None:
        budget = RequestBytes(100)
        await budget.acquire(60)
        waiting = asyncio.ensure_future(budget.acquire(50))
        await asyncio.sleep(0)
        assert not waiting.done() and budget.used == 60
        await budget.acquire(30)  # fits beside the 60: not behind the waiter
        assert budget.used == 90
        budget.release(60)
        await waiting
        assert budget.used == 80

    run(scenario())


def test_a_request_larger_than_the_budget_goes_alone() -> None:
    async def scenario() -> None:
        budget = RequestBytes(100)
        await budget.acquire(10)
        large = asyncio.ensure_future(budget.acquire(500))
        await asyncio.sleep(0)
        assert not large.done()
        budget.release(10)
        await large
        assert budget.used == 500
        budget.release(500)
        assert budget.used == 0

    run(scenario())


def test_a_cancelled_waiter_takes_nothing() -> None:
    async def scenario() -> None:
        budget = RequestBytes(100)
        await budget.acquire(100)
        waiting = asyncio.ensure_future(budget.acquire(50))
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        budget.release(100)
        assert budget.used == 0

    run(scenario())
