"""Small asyncio helpers the daemons share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = [
    "call_from_thread",
    "fail_from_thread",
    "noted",
    "on_parent_gone",
    "resolve_from_thread",
    "take_sighup",
    "wait_event",
]

_T = TypeVar("_T")


def take_sighup(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """`callback` on SIGHUP (condor_reconfig), in place of the SIG_IGN that `htgrid._sighup`
    started the process with."""
    loop.add_signal_handler(signal.SIGHUP, callback)


def on_parent_gone(
    loop: asyncio.AbstractEventLoop, parent_fd: int, gone: Callable[[], None]
) -> None:
    """`gone` once the master that started this daemon is gone: its end of the pipe whose
    other end is `parent_fd` closed (it holds the write end until it exits, kill -9 too)."""

    def readable() -> None:
        try:
            data = os.read(parent_fd, 64)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(parent_fd)
            gone()

    loop.add_reader(parent_fd, readable)


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


async def noted(
    awaitable: Awaitable[_T], what: str, log: logging.Logger, *, every: float = 10.0
) -> _T:
    """`awaitable`'s result; while it takes longer than `every` seconds, `log` says what
    is awaited (a daemon slow to stop then says where it is stuck)."""
    task = asyncio.ensure_future(awaitable)
    waited = 0.0
    try:
        while not (await asyncio.wait({task}, timeout=every))[0]:
            waited += every
            log.warning("shutting down: still waiting for %s after %g s", what, waited)
    finally:
        task.cancel()  # only if this wait was cancelled: a done task ignores it
    return task.result()


def call_from_thread(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """`fn(*args)` on `loop`, from another thread; nothing if the loop closed meanwhile
    (nobody waits for it then)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def resolve_from_thread(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[_T], value: _T
) -> None:
    """From another thread: `value` as `future`'s result (unless it is done: cancelled)."""
    call_from_thread(loop, _resolve, future, value)


def fail_from_thread(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], error: BaseException
) -> None:
    """From another thread: `error` as what `future` raises (unless it is done)."""
    call_from_thread(loop, _fail, future, error)


def _resolve(future: asyncio.Future[_T], value: _T) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
