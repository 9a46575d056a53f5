"""The one thread through which every job queue call goes.

SQLite calls block, so they never run on the event loop; and one thread means one
writer. Nothing else holds the `JobQueue`: callers pass a function that receives it
(`await worker.read(lambda q: q.query(...))`). After each write the worker wakes the
followers of the change feed (the event log writer, the local universe runner), which
then read `changes_since` themselves, and rings the doorbells of the followers in other
processes (the grid manager's).

Calls wait in two lines. What a client asked for over the API goes first; the daemon's
own bookkeeping (the runner starting and ending jobs, the feed's followers) goes after
it. With 200 local jobs starting and ending, hundreds of those are waiting at any moment,
and a submit, a query or a stage-in behind them waited a tenth of a second or more for
every call it made. The bookkeeping still gets one call in every `_BURST + 1` while both
lines wait, so a busy API slows the daemon's own work and never stops it. Within a line,
calls run in the order they were made.

A third line holds what a client sent as background work (`later`: a grid manager
letting go of the remote copies of finished jobs): it runs when the other two are
empty, or once its first call has waited `_LATER_WAIT` seconds, so that it never
delays the jobs the daemon is running by more than that, and is never starved.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from htgrid._aio import fail_from_thread, resolve_from_thread
from htgrid.queue import JobQueue
from htgrid.queue.doorbell import ring

__all__ = ["QueueWorker"]

T = TypeVar("T")

#: Client calls run in a row while the daemon's own calls wait, before one of those.
_BURST: Final = 4
#: The longest a background call waits behind the other two lines (seconds).
_LATER_WAIT: Final = 0.5


class _Call:
    """One function waiting for the queue thread, and where its result goes."""

    __slots__ = ("fn", "future", "loop", "since")

    def __init__(
        self,
        fn: Callable[[JobQueue], Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        since: float = 0.0,
    ) -> None:
        self.fn, self.future, self.loop, self.since = fn, future, loop, since

    def run(self, queue: JobQueue) -> None:
        # Not begun when its caller was cancelled, as an executor's pending call.
        if self.future.cancelled():
            return
        try:
            result = self.fn(queue)
        except BaseException as exc:  # the caller gets whatever it raised
            fail_from_thread(self.loop, self.future, exc)
        else:
            resolve_from_thread(self.loop, self.future, result)


class QueueWorker:
    """Runs functions of the queue on one thread, clients' first; wakes subscribers
    after writes."""

    def __init__(
        self,
        queue: JobQueue,
        doorbells: Sequence[Path] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._doorbells = tuple(doorbells)
        self._clock = clock
        self._subscribers: list[asyncio.Event] = []
        self._heard: set[Path] = set()
        self._ready = threading.Condition()
        self._first: collections.deque[_Call] = collections.deque()
        self._after: collections.deque[_Call] = collections.deque()
        self._later: collections.deque[_Call] = collections.deque()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="htgrid-queue", daemon=True)
        self._thread.start()

    async def read(
        self, fn: Callable[[JobQueue], T], *, client: bool = False, later: bool = False
    ) -> T:
        """`fn(queue)` on the queue thread; `client`: a call an API client waits for,
        which goes before the daemon's own; `later`: background work, after both."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._ready:
            if self._closing:
                raise RuntimeError("the job queue is closed")
            if later:  # only background work is timed: its wait has a bound
                self._later.append(_Call(fn, future, loop, self._clock()))
            else:
                (self._first if client else self._after).append(_Call(fn, future, loop))
            self._ready.notify()
        return await future

    async def write(
        self, fn: Callable[[JobQueue], T], *, client: bool = False, later: bool = False
    ) -> T:
        """`fn(queue)` on the queue thread, then wake the change feed's followers.

        They are woken even when `fn` raises: it may have committed before failing.
        """
        try:
            return await self.read(fn, client=client, later=later)
        finally:
            self.notify()

    def _serve(self) -> None:
        burst = 0
        while True:
            with self._ready:
                while not (self._first or self._after or self._later or self._closing):
                    self._ready.wait()
                call, burst = self._next(burst)
                if call is None:
                    return  # closing, and nothing left to run
            call.run(self._queue)

    def _next(self, burst: int) -> tuple[_Call | None, int]:
        """The call to run now (with the lock held), and the client burst after it."""
        later = self._later
        if later and (
            not (self._first or self._after) or self._clock() - later[0].since >= _LATER_WAIT
        ):
            return later.popleft(), burst
        if self._first and (burst < _BURST or not self._after):
            return self._first.popleft(), burst + 1
        if self._after:
            return self._after.popleft(), 0
        return None, burst

    def subscribe(self) -> asyncio.Event:
        """An event set after every write (and set at first, so a follower catches up)."""
        event = asyncio.Event()
        event.set()
        self._subscribers.append(event)
        return event

    def notify(self) -> None:
        for event in self._subscribers:
            event.set()
        for path in self._doorbells:
            if ring(path):
                self._heard.add(path)
            else:
                self._heard.discard(path)

    def listened(self, doorbell: Path) -> bool:
        """Whether a follower listened on `doorbell` at its last ring."""
        return doorbell in self._heard

    def close(self) -> None:
        """Finish the queued calls, then close the queue."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join()
        self._queue.close()
