"""wait_for on the system clock: the result, a timeout, and the awaited future left alone."""

from __future__ import annotations

import asyncio

import pytest

from htgrid.gahp import SystemClock
from htgrid.gahp._clock import wait_for
from htgrid.gahp._errors import GahpTimeout


def test_the_result_or_the_error_of_the_future_comes_back() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        loop.call_soon(done.set_result, "S 1.0")
        assert await wait_for(done, 30.0, SystemClock()) == "S 1.0"
        failed: asyncio.Future[str] = loop.create_future()
        failed.set_exception(ValueError("refused"))
        with pytest.raises(ValueError, match="refused"):
            await wait_for(failed, 30.0, SystemClock())

    asyncio.run(main())


def test_a_timeout_raises_and_leaves_the_future_to_be_answered_later() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        with pytest.raises(GahpTimeout, match=r"nothing in 0\.01 s"):
            await wait_for(answer, 0.01, SystemClock())
        assert not answer.done()  # not cancelled: a late answer still lands
        answer.set_result("late")
        assert await wait_for(answer, 0.01, SystemClock()) == "late"

    asyncio.run(main())


def test_a_cancelled_waiter_does_not_cancel_the_future() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        waiter = asyncio.create_task(wait_for(answer, 30.0, SystemClock()))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not answer.cancelled()
        answer.set_result("still wanted")  # no callback of the gone waiter trips on it
        await asyncio.sleep(0)

    asyncio.run(main())
