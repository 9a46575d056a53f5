"""CPU-heavy steps of many jobs, taken a few milliseconds at a time.

A thousand jobs become ready in the same turn of the event loop (one group commit wakes
them all). Had each built its remote ad there and then, the loop would not look at its
pipes until the last was built, 0.3 s later: the GAHP server would get the first thirty
request lines and then nothing. Here such steps wait in line and one worker runs them,
handing the loop back after each slice, so the lines go out while the rest are built.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Turns"]

_T = TypeVar("_T")


class Turns:
    """Runs steps given to `run` in order, `slice_` seconds of them per loop turn."""

    def __init__(
        self, *, slice_: float = 0.005, timer: Callable[[], float] = time.perf_counter
    ) -> None:
        self.slice = slice_
        self._timer = timer
        self._queue: deque[tuple[Callable[[], Any], asyncio.Future[Any]]] = deque()
        self._worker: asyncio.Task[None] | None = None
        #: Loop turns handed back so far (for tests).
        self.turns = 0

    async def run(self, step: Callable[[], _T]) -> _T:
        """`step()`'s result (or exception), once its turn came."""
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._queue.append((step, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="grid manager turns")
            self._worker.add_done_callback(self._abandon)
        return await future

    async def _work(self) -> None:
        while self._queue:
            start = self._timer()
            first = True  # one step a slice at least, however long the last one took
            while self._queue and (first or self._timer() - start < self.slice):
                first = False
                step, future = self._queue.popleft()
                if future.done():  # its caller went away
                    continue
                try:
                    result = step()
                except Exception as err:  # the caller's to handle
                    future.set_exception(err)
                else:
                    future.set_result(result)
            if self._queue:
                self.turns += 1
                await asyncio.sleep(0)  # the loop looks at its pipes before the next slice

    def _abandon(self, worker: asyncio.Task[None]) -> None:
        # The worker was cancelled (the manager stops), maybe before it ever ran: no
        # caller waits forever. (One that ended, its line empty, leaves a newer worker's
        # line alone.)
        if worker.cancelled() and worker is self._worker:
            while self._queue:
                self._queue.popleft()[1].cancel()
