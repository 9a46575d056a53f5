"""Small asyncio helpers the daemons share."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

__all__ = ["take_sighup", "wait_event"]


def take_sighup(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """`callback` on SIGHUP (condor_reconfig), in place of the SIG_IGN that `htgrid._sighup`
    started the process with."""
    loop.add_signal_handler(signal.SIGHUP, callback)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; whether it was set.

    Unlike `asyncio.wait_for(event.wait(), timeout)`, a cancellation that arrives as the
    event is set is never lost: Python 3.11's wait_for then returns normally, and a loop
    around it would run on after its task was cancelled (so a daemon never stops).
    """
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=max(0.0, timeout))
    finally:
        waiter.cancel()
    return event.is_set()
