"""The one thread through which every job queue call goes.

SQLite calls block, so they never run on the event loop; and one thread means one
writer, in the order the loop asked. Nothing else holds the `JobQueue`: callers pass a
function that receives it (`await worker.read(lambda q: q.query(...))`). After each write
the worker wakes the followers of the change feed (the event log writer, the local
universe runner), which then read `changes_since` themselves, and rings the doorbells of
the followers in other processes (the grid manager's).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from htgrid.queue import JobQueue
from htgrid.queue.doorbell import ring

__all__ = ["QueueWorker"]

T = TypeVar("T")


class QueueWorker:
    """Runs functions of the queue on one thread; wakes subscribers after writes."""

    def __init__(self, queue: JobQueue, doorbells: Sequence[Path] = ()) -> None:
        self._queue = queue
        self._doorbells = tuple(doorbells)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="htgrid-queue")
        self._subscribers: list[asyncio.Event] = []
        self._heard: set[Path] = set()

    async def read(self, fn: Callable[[JobQueue], T]) -> T:
        """`fn(queue)` on the queue thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, self._queue))

    async def write(self, fn: Callable[[JobQueue], T]) -> T:
        """`fn(queue)` on the queue thread, then wake the change feed's followers.

        They are woken even when `fn` raises: it may have committed before failing.
        """
        try:
            return await self.read(fn)
        finally:
            self.notify()

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
        self._executor.shutdown(wait=True)
        self._queue.close()
