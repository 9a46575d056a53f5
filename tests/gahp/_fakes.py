"""Test doubles: a clock moved by hand, and a scripted back end."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Sequence

from htgrid.backends.batch._base import (
    BackendUnavailable,
    BatchBackend,
    BatchJobSpec,
    JobState,
    NativeStatus,
)


class ManualClock:
    """A Clock whose time moves only when the test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = 0.0
        self.epoch = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.epoch + self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), future))
        await future

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, future in self._sleepers if not future.done())

    async def advance(self, seconds: float) -> None:
        """Move time on, waking sleepers in order, and let the woken tasks run."""
        # Tasks about to sleep must register first, or they would sleep from the new time.
        await settle()
        target = self.now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            if not future.done():
                future.set_result(None)
            await settle()
        self.now = target
        await settle()


async def sleeping(clock: ManualClock, count: int = 1, timeout: float = 10.0) -> None:
    """Wait (really) until `count` tasks sleep on `clock`: work in threads takes real time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while clock.sleepers < count:
        assert loop.time() < deadline, "nothing went to sleep on the manual clock"
        await asyncio.sleep(0.001)


async def settle(rounds: int = 20) -> None:
    """Let ready tasks run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeBackend(BatchBackend):
    """A batch system in memory that counts its queries."""

    name = "fake"

    def __init__(self) -> None:
        self.jobs: dict[str, NativeStatus] = {}
        self.queries: list[list[str]] = []
        self.down = False
        self.submitted: list[BatchJobSpec] = []
        self._ids = itertools.count(100)
        self.tags: dict[str, str] = {}

    async def submit(self, spec: BatchJobSpec) -> str:
        native_id = str(next(self._ids))
        self.submitted.append(spec)
        self.jobs[native_id] = NativeStatus(native_id, JobState.IDLE)
        self.tags[spec.tag] = native_id
        return native_id

    async def status(self, native_ids: Sequence[str]) -> dict[str, NativeStatus]:
        self.queries.append(list(native_ids))
        if self.down:
            raise BackendUnavailable("squeue: cannot reach slurmctld")
        unknown = JobState.UNKNOWN
        return {i: self.jobs.get(i, NativeStatus(i, unknown, source="none")) for i in native_ids}

    async def cancel(self, native_id: str) -> None:
        self.jobs[native_id] = NativeStatus(native_id, JobState.REMOVED)

    async def hold(self, native_id: str) -> None:
        self.jobs[native_id] = NativeStatus(native_id, JobState.HELD)

    async def resume(self, native_id: str) -> None:
        self.jobs[native_id] = NativeStatus(native_id, JobState.IDLE)

    async def ping(self) -> None:
        if self.down:
            raise BackendUnavailable("squeue: cannot reach slurmctld")

    async def find_by_tag(self, tag: str) -> str | None:
        return self.tags.get(tag)

    def finish(self, native_id: str, code: int = 0) -> None:
        self.jobs[native_id] = NativeStatus(native_id, JobState.COMPLETED, exit_code=code)
