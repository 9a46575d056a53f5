"""Handlers started eagerly: no task unless they wait, and a task behaves like asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from htgrid.gahp._eager import run_eagerly


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


class Outcome:
    def __init__(self) -> None:
        self.values: list[Any] = []
        self.errors: list[BaseException] = []

    def done(self, value: Any) -> None:
        self.values.append(value)

    def failed(self, error: BaseException) -> None:
        self.errors.append(error)


def test_a_handler_that_does_not_wait_gets_no_task() -> None:
    async def main() -> None:
        async def quick() -> int:
            return 7

        async def broken() -> int:
            raise ValueError("no")

        out = Outcome()
        assert run_eagerly(quick(), out.done, out.failed) is None
        assert run_eagerly(broken(), out.done, out.failed) is None
        assert out.values == [7]
        assert [str(e) for e in out.errors] == ["no"]

    run(main())


def test_a_handler_that_waits_finishes_in_a_task() -> None:
    async def main() -> None:
        event = asyncio.Event()

        async def slow() -> str:
            await asyncio.sleep(0)
            value = await asyncio.to_thread(lambda: "thread")
            await asyncio.sleep(0.001)
            await event.wait()
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(future.set_result, "!")
            return value + await future

        out = Outcome()
        task = run_eagerly(slow(), out.done, out.failed)
        assert task is not None
        await asyncio.sleep(0.05)
        assert out.values == []
        event.set()
        await task
        assert out.values == ["thread!"] and out.errors == []

    run(main())


def test_errors_after_waiting_reach_the_handler_and_then_failed() -> None:
    async def main() -> None:
        async def failing_await() -> str:
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(future.set_exception, KeyError("k"))
            try:
                return await future
            except KeyError:
                raise RuntimeError("seen by the handler") from None

        out = Outcome()
        task = run_eagerly(failing_await(), out.done, out.failed)
        assert task is not None
        await task
        assert [type(e) for e in out.errors] == [RuntimeError]

    run(main())


def test_cancelling_the_task_cancels_the_handler() -> None:
    async def main() -> None:
        cleaned = []

        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append(True)

        out = Outcome()
        task = run_eagerly(forever(), out.done, out.failed)
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == [True]
        assert [type(e) for e in out.errors] == [asyncio.CancelledError]

    run(main())


def test_a_handler_may_swallow_its_cancellation() -> None:
    async def main() -> None:
        async def stubborn() -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return "cleaned up"
            return "slept"

        out = Outcome()
        task = run_eagerly(stubborn(), out.done, out.failed)
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert out.values == ["cleaned up"]

    run(main())
