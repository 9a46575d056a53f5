"""A daemon slow to stop says which step it is waiting for (`htgrid._aio.noted`)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from htgrid._aio import noted

_log = logging.getLogger("htgrid.test.noted")


def test_a_slow_step_is_named_while_it_is_awaited(caplog: pytest.LogCaptureFixture) -> None:
    async def slow() -> str:
        await asyncio.sleep(0.25)
        return "done"

    with caplog.at_level(logging.WARNING, logger=_log.name):
        assert asyncio.run(noted(slow(), "the shadows", _log, every=0.1)) == "done"
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:2] == [
        "shutting down: still waiting for the shadows after 0.1 s",
        "shutting down: still waiting for the shadows after 0.2 s",
    ]


def test_a_quick_step_says_nothing_and_its_error_comes_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> None:
        raise OSError("gone")

    with caplog.at_level(logging.WARNING, logger=_log.name), pytest.raises(OSError, match="gone"):
        asyncio.run(noted(failing(), "the API servers", _log, every=5))
    assert not caplog.records


def test_cancelling_the_wait_cancels_the_step() -> None:
    async def main() -> bool:
        step = asyncio.ensure_future(asyncio.sleep(30))
        waiter = asyncio.ensure_future(noted(step, "the tasks", _log, every=5))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return step.cancelled()

    assert asyncio.run(main())
