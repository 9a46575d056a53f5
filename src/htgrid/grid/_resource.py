"""A remote resource (one per grid type + resource string): up or down, and its throttles.

What HTCondor's BaseResource does, shared by every grid type:

* ping: once at start, then on request (a failed call) at most every `min_ping_interval`
  while up; while down, after a wait that doubles from `retry_initial` up to
  `down_ping_interval` (a batch system that stalls for a minute is seen back within
  about a minute, not five). Each change is told to every job,
  which logs 026 (down) or 025 (up); jobs wait while their resource is down, they do
  not fail.
* submit throttle: at most `max_submitted_per_resource` jobs submitted at once, granted
  first come first served; a job recovered with a remote id holds its slot at once.
* pending throttle: at most `max_pending_requests` GAHP requests in flight (a type whose
  GAHP bounds its own work may ask for more).
* failure-rate limit: after `failure_threshold` transient submit failures in a row the
  resource's submits pause, for a wait that doubles with each further failure. The
  failures of submits already in flight when a failure was counted are that same outage:
  not counted again (50 submits in flight that all fail when the batch system stalls
  are one failure, not 50, which would have paused submits for the longest wait at
  once). A resource seen back up after being down lifts the pause.
* status: one poll per `poll_interval` for all the jobs that want one (the type's `poll`);
  after each, every job checks how old its last answer is (029 / 030, `JobTask`). A poll
  that fails says nothing about the jobs: they keep their state and the resource is pinged.

`Resource[J, N]` is generic over its type's job class and resource name: a type's poll
reads its own jobs.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import enum
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from htgrid.classad import ClassAd
from htgrid.gahp import GahpServerExited, GahpTimeout, LocalGahpError, first_of
from htgrid.gahp.commands import Spec
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import ResourceName
from htgrid.grid._task import JobTask, Services
from htgrid.queue import JobId, JobNotFound, JobStatus, StoreError

__all__ = ["Resource", "ResourceState", "ResourceStats"]

log = logging.getLogger("htgrid.grid")

AnyJob = JobTask[Any, Any]
J = TypeVar("J", bound=AnyJob)
N = TypeVar("N", bound=ResourceName)
_R = TypeVar("_R")


class ResourceState(enum.Enum):
    UNKNOWN = "unknown"  # not pinged yet
    UP = "up"
    DOWN = "down"


@dataclass(slots=True)
class ResourceStats:
    """Counters, for tests, benchmarks and explanations."""

    #: Pings sent, and status polls made (each one or more status commands).
    pings: int = 0
    polls: int = 0
    #: Status commands sent, and those that failed (the poll told nothing).
    status_commands: int = 0
    status_failures: int = 0
    #: Submits that worked, and those that failed (transient or not).
    submits: int = 0
    submit_failures: int = 0
    #: The most GAHP requests in flight at once.
    max_in_flight: int = 0
    #: When the last status poll started (epoch seconds) and how long it took.
    last_poll: float | None = None
    last_poll_duration: float | None = None


class Resource(abc.ABC, Generic[J, N]):
    """One remote resource (its GridResource read as N) and the jobs (J) that use it."""

    def __init__(
        self, where: N, gahp: GahpHandle, services: Services, *, max_pending: int | None = None
    ) -> None:
        """`max_pending`: a type whose GAHP server bounds its own work lets that many requests
        in flight (at least GRIDMANAGER_MAX_PENDING_REQUESTS), in the GAHP client too (the
        server serves this type alone)."""
        #: What its GridResource names, as the type reads it.
        self.where = where
        #: Its key: one resource object per key.
        self.name = where.key
        self.gahp = gahp
        self.services = services
        self.clock = services.clock
        self.jobs: dict[JobId, J] = {}
        self.state = ResourceState.UNKNOWN
        self.state_since = self.clock.time()
        self.down_reason = ""
        self.stats = ResourceStats()
        self._submitted: set[JobId] = set()
        self._waiting: OrderedDict[JobId, AnyJob] = OrderedDict()
        pending = self.config.max_pending_requests
        if max_pending is not None:
            pending = max(max_pending, pending)
            gahp.config = dataclasses.replace(gahp.config, max_pending_requests=pending)
        self._pending = asyncio.Semaphore(pending)
        self._in_flight = 0
        self._failures = 0
        self._paused_until = 0.0
        #: When the last counted submit failure came (monotonic): a failed submit sent
        #: before it was in flight already, part of the same outage.
        self._failure_counted_at = float("-inf")
        self._down_pings = 0
        self._ping_wanted = asyncio.Event()
        self._last_ping = 0.0
        #: Done when a reconfig changes the poll interval (the poll loop's wait).
        self._retimed: asyncio.Future[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def config(self) -> GridManagerConfig:
        """The settings in force (a reconfig may change them)."""
        return self.services.config

    # ---- the type's part ---------------------------------------------------------------------

    @abc.abstractmethod
    async def ping(self) -> str | None:
        """None if the resource answers, else why not. May raise GAHP errors."""

    @abc.abstractmethod
    async def poll(self, jobs: list[J]) -> None:
        """Ask the status of `jobs` and hand each its answer."""

    async def let_go(self, remote: str) -> str | None:
        """Let the remote copy `remote` of a finished job go (its sandbox with it): None
        when it went (or was gone already), else why not (tried again later). Only a type
        whose remote copies outlive the job's end has any (see `_leftovers`)."""
        return f"a {type(self).__name__} keeps no remote copy of a finished job"

    # ---- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._ping_loop(), name=f"ping {self.name}"),
            asyncio.create_task(self._poll_loop(), name=f"poll {self.name}"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reconfig(self, old: GridManagerConfig) -> None:
        """The settings changed from `old` (condor_reconfig): a shorter or longer poll
        interval counts from now, and jobs waiting for a submit slot take those a higher
        GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE frees, in their order (each that
        takes one wakes the next)."""
        retimed = self._retimed
        if self.config.poll_interval != old.poll_interval and retimed and not retimed.done():
            retimed.set_result(None)
        self._wake_next()

    def register(self, job: J) -> None:
        self.jobs[job.job_id] = job

    def unregister(self, job: J) -> None:
        self.jobs.pop(job.job_id, None)
        self.release(job)

    # ---- requests ----------------------------------------------------------------------------

    async def call(
        self, command: Spec, *args: str, timeout: float | None = None, later: bool = False
    ) -> tuple[str, ...]:
        """A GAHP request within the pending-request throttle: its result fields (see
        GahpHandle.call)."""
        async with self._pending:
            self._in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
            try:
                return await self.gahp.call(command.name, *args, timeout=timeout, later=later)
            finally:
                self._in_flight -= 1

    async def ask(
        self, result: Callable[[Sequence[str]], _R], command: Spec, *args: str, later: bool = False
    ) -> _R:
        """`call`, its result read by `result` (a typed result's `of`)."""
        return result(await self.call(command, *args, later=later))

    # ---- up and down ---------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self.state is ResourceState.UP

    @property
    def down(self) -> bool:
        return self.state is ResourceState.DOWN

    @property
    def unknown(self) -> bool:
        return self.state is ResourceState.UNKNOWN

    def request_ping(self) -> None:
        """Something failed: check whether the resource still answers (HTCondor's RequestPing)."""
        self._ping_wanted.set()

    async def _ping_loop(self) -> None:
        while True:
            self._ping_wanted.clear()
            self._last_ping = self.clock.monotonic()
            reason = await self._ping_once()
            await self._set_state(
                ResourceState.UP if reason is None else ResourceState.DOWN, reason
            )
            if self.up:
                self._down_pings = 0
                await self._ping_wanted.wait()
                spacing = self._last_ping + self.config.min_ping_interval - self.clock.monotonic()
                if spacing > 0:
                    await self.clock.sleep(spacing)
            else:
                self._down_pings += 1
                wait = min(self.config.backoff(self._down_pings), self.config.down_ping_interval)
                await self.clock.sleep(wait)

    async def _ping_once(self) -> str | None:
        self.stats.pings += 1
        for attempt in (1, 2):
            try:
                return await self.ping()
            except LocalGahpError:
                return None  # no ping command: HTCondor counts that as up
            except GahpUnavailable as err:
                return str(err)
            except (GahpServerExited, GahpTimeout) as err:
                # The GAHP server, not the resource, failed: once more with a new server.
                if attempt == 2:
                    return f"the GAHP server did not answer the ping: {err}"
            except Exception as err:  # a bug must not stop the pings for good
                log.exception("resource %s: ping failed", self.name)
                return f"the ping failed: {err}"
        return None  # pragma: no cover - the loop always returns

    async def _set_state(self, state: ResourceState, reason: str | None) -> None:
        self.down_reason = reason or ""
        if state is self.state:
            return
        level = logging.WARNING if state is ResourceState.DOWN else logging.INFO
        log.log(
            level, "resource %s is %s%s", self.name, state.value, f": {reason}" if reason else ""
        )
        if state is ResourceState.UP and self.state is ResourceState.DOWN:
            self._paused_until = 0.0  # it answers again: let the submits try
        self.state = state
        self.state_since = self.clock.time()
        for job in list(self.jobs.values()):
            with contextlib.suppress(Exception):
                await job.sync_resource()
            job.wake()

    # ---- the submit throttle -------------------------------------------------------------------

    def try_acquire(self, job: AnyJob) -> bool:
        """Take a submit slot for `job` if one is free and no earlier job waits for one."""
        if job.job_id in self._submitted:
            return True
        first = next(iter(self._waiting), job.job_id)
        if len(self._submitted) < self.config.max_submitted_per_resource and first == job.job_id:
            self._waiting.pop(job.job_id, None)
            self._submitted.add(job.job_id)
            self._wake_next()  # a limit raised by a reconfig may let more go
            return True
        self._waiting.setdefault(job.job_id, job)
        return False

    def _wake_next(self) -> None:
        """The first job waiting for a submit slot woken, if one is free."""
        if self._waiting and len(self._submitted) < self.config.max_submitted_per_resource:
            next(iter(self._waiting.values())).wake()

    def hold_slot(self, job: AnyJob) -> None:
        """A job found already submitted counts against the limit at once."""
        self._waiting.pop(job.job_id, None)
        self._submitted.add(job.job_id)

    def release(self, job: AnyJob) -> None:
        """`job` no longer holds or wants a slot; the next waiting job is woken."""
        self._waiting.pop(job.job_id, None)
        self._submitted.discard(job.job_id)
        self._wake_next()

    def slots(self) -> tuple[int, int, int]:
        """(jobs submitted, the limit, jobs waiting for a slot)."""
        return len(self._submitted), self.config.max_submitted_per_resource, len(self._waiting)

    # ---- the failure-rate limit ----------------------------------------------------------------

    def submit_succeeded(self) -> None:
        self.stats.submits += 1
        self._failures = 0
        self._paused_until = 0.0

    def submit_failed(self, *, transient: bool, sent_at: float | None = None) -> None:
        """A failed submit; `sent_at`: when it was sent (monotonic), if known."""
        self.stats.submit_failures += 1
        if not transient:
            return  # the job's own fault, not the resource's
        self.request_ping()
        if sent_at is not None and sent_at < self._failure_counted_at:
            return  # in flight when a failure was counted: the same outage
        self._failure_counted_at = self.clock.monotonic()
        self._failures += 1
        if self._failures >= self.config.failure_threshold:
            pause = self.config.backoff(self._failures - self.config.failure_threshold + 1)
            self._paused_until = self.clock.monotonic() + pause
            log.warning(
                "resource %s: %d submit failures in a row; submits pause %.0f s",
                self.name,
                self._failures,
                pause,
            )

    @property
    def failures(self) -> int:
        """Transient submit failures in a row."""
        return self._failures

    def submit_pause(self) -> float:
        """Seconds before submits to this resource may go on (0: now)."""
        return max(0.0, self._paused_until - self.clock.monotonic())

    # ---- the collector's view ----------------------------------------------------------------

    def ad(self) -> ClassAd:
        """Its Grid ad, as HTCondor's BaseResource publishes it (Name "type resource",
        HashName, NumJobs, JobLimit, SubmitsAllowed/Wanted, Running/IdleJobs, why it is
        down), with htgrid's status-poll figures (LastStatusPoll, its duration, counts)."""
        submitted, limit, waiting = self.slots()
        idle = running = 0
        for job in self.jobs.values():
            idle += job.status is JobStatus.IDLE
            running += job.status is JobStatus.RUNNING
        ad = ClassAd(
            {
                "MyType": "Grid",
                "Name": self.name,
                "HashName": self.name,
                "NumJobs": len(self.jobs),
                "JobLimit": limit,
                "SubmitsAllowed": submitted,
                "SubmitsWanted": waiting,
                "RunningJobs": running,
                "IdleJobs": idle,
                "GridResourceState": self.state.value,
                "StatusPolls": self.stats.polls,
                "StatusPollFailures": self.stats.status_failures,
            }
        )
        if self.down:
            ad["GridResourceUnavailableTime"] = int(self.state_since)
            if self.down_reason:
                ad["GridResourceUnavailableReason"] = self.down_reason
        if self.stats.last_poll is not None:
            ad["LastStatusPoll"] = int(self.stats.last_poll)
        if self.stats.last_poll_duration is not None:
            ad["LastStatusPollDuration"] = round(self.stats.last_poll_duration, 3)
        return ad

    # ---- status polling ------------------------------------------------------------------------

    def poll_failed(self, reason: str) -> None:
        """A status command failed: counted, logged, and the resource pinged."""
        self.stats.status_failures += 1
        log.warning("resource %s: status poll failed: %s", self.name, reason)
        self.request_ping()

    async def _poll_loop(self) -> None:
        while True:
            retimed = self._retimed = asyncio.get_running_loop().create_future()
            try:
                await first_of(retimed, self.config.poll_interval, self.clock)
            finally:
                self._retimed = None
            if retimed.done():
                continue  # the new interval counts from now
            jobs = [job for job in self.jobs.values() if job.wants_status()]
            if jobs and self.up:
                self.stats.polls += 1
                started = self.clock.time()
                try:
                    await self.poll(jobs)
                except Exception:
                    log.exception("resource %s: status poll failed", self.name)
                self.stats.last_poll = started
                self.stats.last_poll_duration = self.clock.time() - started
            # Down or not, a status goes stale (029) when no poll answers about it.
            await self._check_statuses()

    async def _check_statuses(self) -> None:
        for job in list(self.jobs.values()):
            try:
                await job.check_proxy()
                await job.check_remote_status()
            except (StoreError, JobNotFound) as err:  # the next poll's check tries again
                log.warning("job %s: cannot record its status age: %s", job.job_id, err)
            except Exception:  # a bug must not stop the polls for good
                log.exception("job %s: checking its status age failed", job.job_id)
