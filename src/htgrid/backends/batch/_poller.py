"""Many single-job status questions, one batch-system query: the blahp's status cache, done here.

HTCondor's grid manager asks about each job on its own (`BLAH_JOB_STATUS`), spread over
its poll interval. A `StatusBatcher` collects the questions arriving within `window`
seconds and answers them from one `backend.status()` call, which also covers every other
job asked about recently and not yet finished. Answers are reused for `max_age` seconds,
so with steady polling there is about one squeue (qstat, bjobs...) per `max_age`, whatever
the number of jobs. A caller that asks about all its jobs at once, once per poll (htgrid's
grid manager, through BLAH_JOB_STATUS_ALL), passes a shorter `max_age`: an answer kept
from its last poll would be as old as its poll interval. At most one query runs at a time;
questions arriving meanwhile wait for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from htgrid.backends.batch._base import BatchBackend, JobState, NativeStatus
from htgrid.gahp import Clock

__all__ = ["StatusBatcher"]

# States that can still change, worth fetching before anyone asks.
_LIVE = frozenset(
    {
        JobState.IDLE,
        JobState.RUNNING,
        JobState.HELD,
        JobState.SUSPENDED,
        JobState.TRANSFERRING_OUTPUT,
    }
)


@dataclass(frozen=True, slots=True)
class _Answer:
    status: NativeStatus
    at: float


class StatusBatcher:
    """Status answers for one back end, batched and briefly cached."""

    def __init__(
        self,
        backend: BatchBackend,
        clock: Clock,
        *,
        window: float = 0.5,
        max_age: float = 20.0,
        track_for: float = 900.0,
    ) -> None:
        self._backend = backend
        self._clock = clock
        self._window = window
        self._max_age = max_age
        self._track_for = track_for
        self._answers: dict[str, _Answer] = {}
        # Jobs asked about, with when they were last asked: kept fresh by every query.
        self._asked: dict[str, float] = {}
        self._waiting: dict[str, asyncio.Future[NativeStatus]] = {}
        self._runner: asyncio.Task[None] | None = None
        #: How many times the back end was queried (for tests and statistics).
        self.queries = 0

    async def status(self, native_id: str, *, max_age: float | None = None) -> NativeStatus:
        """The job's status, fresh within `max_age` seconds (default: the batcher's);
        raises what the back end raises."""
        now = self._clock.monotonic()
        self._asked[native_id] = now
        answer = self._answers.get(native_id)
        limit = self._max_age if max_age is None else max_age
        if answer is not None and now - answer.at <= limit:
            return answer.status
        future = self._waiting.get(native_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            # Someone may give up waiting; the shared future must not warn about that.
            future.add_done_callback(_consume)
            self._waiting[native_id] = future
        if self._runner is None:
            self._runner = asyncio.create_task(self._run())
        return await asyncio.shield(future)

    def forget(self, native_ids: Iterable[str]) -> None:
        """Drop cached answers (after a submit, cancel, hold or resume changed the job)."""
        for native_id in native_ids:
            self._answers.pop(native_id, None)

    async def _run(self) -> None:
        """Query in windows until nobody is waiting."""
        try:
            while self._waiting:
                await self._clock.sleep(self._window)
                waiting, self._waiting = self._waiting, {}
                await self._query(waiting)
        finally:
            self._runner = None

    async def _query(self, waiting: dict[str, asyncio.Future[NativeStatus]]) -> None:
        ids = sorted({*waiting, *self._worth_refreshing()})
        try:
            self.queries += 1
            found = await self._backend.status(ids)
        except asyncio.CancelledError:
            for future in waiting.values():
                future.cancel()
            raise
        except Exception as err:
            # A failed query says nothing about the jobs: every question gets the error.
            for future in waiting.values():
                if not future.done():
                    future.set_exception(err)
            return
        at = self._clock.monotonic()
        for native_id, answer in list(self._answers.items()):
            if at - answer.at > self._track_for:
                del self._answers[native_id]
        for native_id in ids:
            status = found.get(native_id) or NativeStatus(
                native_id, JobState.UNKNOWN, source="none"
            )
            self._answers[native_id] = _Answer(status, at)
            if status.state not in _LIVE:
                self._asked.pop(native_id, None)
        for native_id, future in waiting.items():
            if not future.done():
                future.set_result(self._answers[native_id].status)

    def _worth_refreshing(self) -> list[str]:
        now = self._clock.monotonic()
        wanted = []
        for native_id, asked in list(self._asked.items()):
            if now - asked > self._track_for:
                del self._asked[native_id]
                self._answers.pop(native_id, None)
                continue
            answer = self._answers.get(native_id)
            if answer is None or answer.status.state in _LIVE:
                wanted.append(native_id)
        return wanted


def _consume(future: asyncio.Future[NativeStatus]) -> None:
    if not future.cancelled():
        future.exception()
