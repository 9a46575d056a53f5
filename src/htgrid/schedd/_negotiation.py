"""The negotiator, wired into the queue: which jobs it sees, and what its matches do.

`QueueJobs` is the negotiator's job source: the idle vanilla jobs, and the idle grid
jobs whose GridResource still holds a `$$(` macro (grid matchmaking), less the jobs a
shadow is already starting. Its `report` carries out a cycle's decisions:

- a vanilla match starts a shadow, which claims the slot and runs the job there;
- a grid match writes the match into the job (NumJobMatches, LastMatchName0, the
  MATCH_ attributes) with its macros filled, GridResource included, and `Matched =
  true` (submit made it false; `JobQueue.grid_matched`, which keeps the templates for a
  release to restore): the grid manager then submits it to the matched site;
- a macro the matched ad cannot fill holds the job ("Cannot expand $$(...)");
- a job the cycle could not evaluate (`CycleResult.failures`) is held, logged once;
- an unmatched job gets LastRejMatchReason and LastRejMatchTime, when its reason
  changes: a job the cycle rejects for the reason it already has is left alone, so
  that a cycle over hundreds of jobs waiting for a busy pool writes nothing (it wrote
  every one of them, and every follower of the queue's feed read them all again).
  LastRejMatchTime is thus when the cycles began to give that reason.

`NegotiationLoop` runs cycles every NEGOTIATOR_INTERVAL, and sooner (but not more often
than NEGOTIATOR_MIN_INTERVAL) when there is news for it: jobs submitted or back to idle
(the queue's feed), or a claim given back, which freed a slot (`reschedule`, which the
shadows call: condor_reschedule's effect). A job that ended is no news by itself: its
claim usually runs the next idle job at once, with no slot freed, and a cycle then would
only tell every idle job again that no slot is free.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from htgrid._aio import wait_event
from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.negotiator import CycleResult, Match
from htgrid.negotiator.daemon import Negotiator
from htgrid.queue import (
    Change,
    ChangeKind,
    HoldReasonCode,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem
from htgrid.schedd._local import SCHEDD
from htgrid.schedd._shadow import VANILLA, ShadowManager
from htgrid.schedd._worker import QueueWorker

__all__ = ["IDLE_FOR_MATCHING", "NegotiationLoop", "QueueJobs"]

_log = logging.getLogger("htgrid.negotiator")

GRID: Final = 9
#: (A job the job router manages, Managed = "External", is its to run, not the pool's.)
IDLE_FOR_MATCHING: Final = (
    f"JobStatus == 1 && (JobUniverse == {VANILLA} || "
    f'(JobUniverse == {GRID} && regexp("\\\\$\\\\$\\\\(", GridResource)))'
    ' && Managed =!= "External"'
)
_FEED_BATCH: Final = 2000
#: The HoldReason of a job the negotiator failed on.
CANNOT_MATCH: Final = "The negotiator could not match this job: {}"


def _job_id(ad: ClassAd) -> JobId:
    return JobId(ad["ClusterId"], ad["ProcId"])


class QueueJobs:
    """`htgrid.negotiator.daemon.JobSource` over the queue and the shadows."""

    def __init__(
        self, worker: QueueWorker, shadows: ShadowManager, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._worker = worker
        self._shadows = shadows
        self._clock = clock
        self._cycle: dict[JobId, ClassAd] = {}  # the last cycle's jobs, for its report
        self._faults = FaultLog(_log, "negotiator")

    async def idle_jobs(self) -> list[ClassAd]:
        ads = await self._worker.read(lambda q: q.query(IDLE_FOR_MATCHING))
        busy = self._shadows.busy
        jobs = [ad for ad in ads if _job_id(ad) not in busy]
        self._cycle = {_job_id(ad): ad for ad in jobs}
        return jobs

    async def report(self, result: CycleResult) -> None:
        holds: list[tuple[JobId, str]] = []
        grid: list[_GridMatch] = []
        for match in result.matches:
            job = self._cycle.get(match.job_id)
            if job is None:
                continue
            try:
                if match.expansion.error:
                    holds.append((match.job_id, match.expansion.error))
                elif job.get("JobUniverse") == GRID:
                    grid.append(_GridMatch.of(match))
                    _log.info("grid job %s matched to %s", match.job_id, match.machine)
                else:
                    self._shadows.start(match, job)
            except Exception as exc:
                if daemon_fault(exc):
                    raise
                self._fail(JobFailure(match.job_id, problem(exc), held=False, error=exc))
        failed = {failure.job_id: failure for failure in result.failures}
        holds += [(jid, CANNOT_MATCH.format(failure.problem)) for jid, failure in failed.items()]
        rejected: dict[str, list[JobId]] = {}
        for rejection in result.rejections:
            job = self._cycle.get(rejection.job_id)
            if job is not None and job.get("LastRejMatchReason") == rejection.reason:
                continue  # no news for the job: nothing is written
            rejected.setdefault(rejection.reason, []).append(rejection.job_id)
        if not (holds or grid or rejected):
            return
        now = int(self._clock())
        held, failures = await self._worker.write(
            functools.partial(_record, holds=holds, grid=grid, rejected=rejected, now=now)
        )
        for jid, failure in failed.items():
            self._fail(dataclasses.replace(failure, held=jid in held))
        for failure in failures:
            self._fail(failure)

    def _fail(self, failure: JobFailure) -> None:
        self._faults.report(failure)


@dataclass(frozen=True, slots=True)
class _GridMatch:
    """What a grid match writes into its job."""

    job_id: JobId
    updates: Mapping[str, ExprTree]
    expanded: tuple[str, ...]  # the attributes whose macros it filled in

    @classmethod
    def of(cls, match: Match) -> _GridMatch:
        pairs = match.job_updates + match.expansion.expanded
        updates = {name: ExprTree(text) for name, text in pairs}
        return cls(match.job_id, updates, tuple(name for name, _ in match.expansion.expanded))


def _record(
    q: JobQueue,
    *,
    holds: list[tuple[JobId, str]],
    grid: list[_GridMatch],
    rejected: dict[str, list[JobId]],
    now: int,
) -> tuple[set[JobId], list[JobFailure]]:
    """The cycle's decisions, each job's on its own: the jobs held, and those whose
    decision failed (held for it when possible)."""
    held: set[JobId] = set()
    failures: list[JobFailure] = []

    def each(jid: JobId, decide: Callable[..., object], *args: object) -> object:
        try:
            return decide(*args)
        except (InvalidTransition, JobNotFound):
            return None  # held, removed or gone since the cycle began
        except Exception as exc:
            if daemon_fault(exc):
                raise
            what = problem(exc)
            done = _hold(q, jid, CANNOT_MATCH.format(what))
            failures.append(JobFailure(jid, what, held=done, error=exc))
            return None

    for jid, reason in holds:
        if each(jid, _hold, q, jid, reason):
            held.add(jid)
    for match in grid:
        each(match.job_id, q.grid_matched, match.job_id, match.updates, match.expanded)
    for reason, ids in rejected.items():
        attrs = {"LastRejMatchReason": quote(reason), "LastRejMatchTime": str(now)}
        try:
            q.edit(ids, attrs, SCHEDD)  # one transaction for all
        except JobNotFound:  # one left the queue since the cycle began
            for jid in ids:
                each(jid, q.edit, jid, attrs, SCHEDD)
    return held, failures


def _hold(q: JobQueue, jid: JobId, reason: str) -> bool:
    try:
        return bool(q.act(JobAction.Hold, jid, SCHEDD, reason, code=HoldReasonCode.Unspecified))
    except (InvalidTransition, JobNotFound):
        return False


class NegotiationLoop:
    """Runs the negotiator's cycles: on a timer, and sooner when the queue has news."""

    def __init__(
        self,
        negotiator: Negotiator,
        worker: QueueWorker,
        *,
        interval: float,
        min_interval: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.negotiator = negotiator
        self._worker = worker
        self._interval = interval
        self._min_interval = min_interval
        self._monotonic = monotonic
        self._news = asyncio.Event()
        self._seq = 0

    def reschedule(self) -> None:
        """Negotiate soon (condor_reschedule)."""
        self._news.set()

    @property
    def seq(self) -> int:
        """The last change of the queue's feed this follower has read."""
        return self._seq

    async def run(self) -> None:
        """Cycle until cancelled; a failed cycle is logged and the next one comes."""
        self._seq = await self._worker.read(lambda q: q.last_seq)
        follower = asyncio.create_task(self._follow(), name="negotiator feed")
        try:
            while True:
                began = self._monotonic()
                self._news.clear()
                await self.negotiator.guarded_cycle()
                await asyncio.sleep(max(0.0, self._min_interval - (self._monotonic() - began)))
                rest = self._interval - (self._monotonic() - began)
                if rest > 0:
                    await wait_event(self._news, rest)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)

    async def _follow(self) -> None:
        wake = self._worker.subscribe()
        while True:
            await wake.wait()
            wake.clear()
            while True:
                changes = await self._worker.read(
                    functools.partial(_changes, seq=self._seq, limit=_FEED_BATCH)
                )
                if not changes:
                    break
                self._seq = changes[-1].seq
                if any(_is_news(c) for c in changes):
                    self.reschedule()


def _changes(q: JobQueue, *, seq: int, limit: int) -> list[Change]:
    return q.changes_since(seq, limit=limit)


def _is_news(change: Change) -> bool:
    """A change that may let a cycle match something new."""
    if change.kind is ChangeKind.SUBMITTED:
        return True
    if change.kind is not ChangeKind.STATUS:
        return False
    return change.status == JobStatus.IDLE
