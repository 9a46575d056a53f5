"""Time, injected: pollers, batching windows and timeouts read it from a `Clock`.

Tests pass a clock they advance by hand, so nothing waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol, TypeVar

from htgrid.gahp._errors import GahpTimeout

__all__ = ["Clock", "SystemClock", "first_of", "wait_for"]

_T = TypeVar("_T")


class Clock(Protocol):
    """Where time comes from."""

    def time(self) -> float:
        """Seconds since the epoch (for dates shown to people)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for intervals)."""

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""


class SystemClock:
    """The real clocks and asyncio's sleep."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def wait_for(future: asyncio.Future[_T], timeout: float | None, clock: Clock) -> _T:
    """`future`'s result, or GahpTimeout after `timeout` seconds of `clock` (not cancelled)."""
    if timeout is not None:
        await first_of(future, timeout, clock)
        if not future.done():
            raise GahpTimeout(f"nothing in {timeout} s")
    return await future


async def first_of(future: asyncio.Future[Any], timeout: float, clock: Clock) -> None:
    """Wait until `future` is done or `timeout` seconds of `clock` have passed, whichever
    comes first. `future` is not cancelled, not even when this wait is."""
    if type(clock) is not SystemClock:  # an injected clock: only its sleep tells its time
        sleeper: asyncio.Future[Any] = asyncio.ensure_future(clock.sleep(timeout))
        try:
            await asyncio.wait([future, sleeper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
        return
    # One loop timer and a done callback: a grid manager waits so for every GAHP request
    # and every pause of every job. A sleeping task raced through asyncio.wait cost ~75 us
    # of its CPU each time; this ~15 us.
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    timer = loop.call_later(timeout, wake)
    future.add_done_callback(wake)
    try:
        await woken
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
