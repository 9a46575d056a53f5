"""A job whose remote status no poll answers for too long: 029, CurrentStatusUnknown, 030."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import htcondor2

from htgrid.grid import GridManagerConfig
from htgrid.grid._queueio import QueueIO
from htgrid.grid._table import Table
from htgrid.grid._task import JobTask, Services
from htgrid.grid._userlog import EventLogs
from htgrid.queue import JobAction, JobQueue, JobStatus

from ._harness import ROOT, Grid, ext_gahp, running, unset, wait_for, with_gahp
from .test_units import ManualClock


class _State(enum.Enum):
    ONLY = 1


class _Polled(JobTask[_State, _State]):
    """A job whose status the resource asks while `asked` (no actions of its own)."""

    asked = True
    table = Table("test", _State, {_State.ONLY: {}}, _State.ONLY, frozenset(), 10)

    def actions(self) -> Mapping[_State, Callable[[], Awaitable[_State]]]:
        return {}

    async def finish(self) -> None:
        return None

    def wants_status(self) -> bool:
        return self.asked


def _kinds(log: Path) -> list[htcondor2.JobEventType]:
    if not log.exists():
        return []
    return [event.type for event in htcondor2.JobEventLog(str(log)).events(stop_after=0)]


UNKNOWN = htcondor2.JobEventType.JOB_STATUS_UNKNOWN
KNOWN = htcondor2.JobEventType.JOB_STATUS_KNOWN


def test_status_unknown_after_15_minutes_without_an_answer(grid: Grid) -> None:
    (job_id,) = grid.submit("executable = /bin/true\nlog = job.log")
    log = grid.work / "job.log"
    clock = ManualClock()
    queue = JobQueue.open(grid.home / "spool", fsync=False)

    async def main() -> None:
        io = QueueIO(queue)
        services = Services(GridManagerConfig(), clock, io, EventLogs())

        def new_job() -> _Polled:
            return _Polled(job_id, grid.queue.get(job_id), cast(Any, None), services)

        job = new_job()
        try:
            await job.check_remote_status()  # the clock starts
            clock.now += 900
            await job.check_remote_status()
            assert _kinds(log) == [] and "CurrentStatusUnknown" not in grid.ad(job_id)
            clock.now += 1
            await job.check_remote_status()
            assert _kinds(log) == [UNKNOWN]
            assert grid.ad(job_id)["CurrentStatusUnknown"] is True
            clock.now += 3600
            await job.check_remote_status()
            assert _kinds(log) == [UNKNOWN]  # once, however long it lasts

            # A grid manager restarted meanwhile still knows it, and says when it ends.
            job = new_job()
            assert job.status_unknown
            await job.check_remote_status()
            assert _kinds(log) == [UNKNOWN]
            job.remote_status_seen()
            await job.check_remote_status()
            assert _kinds(log) == [UNKNOWN, KNOWN]
            assert grid.ad(job_id)["CurrentStatusUnknown"] is False

            # A job whose status is not asked (being submitted, cancelled...) never goes stale.
            job.asked = False
            clock.now += 5000
            await job.check_remote_status()
            job.asked = True
            await job.check_remote_status()
            clock.now += 600
            await job.check_remote_status()
            assert _kinds(log) == [UNKNOWN, KNOWN] and not job.status_unknown
        finally:
            await io.close()

    asyncio.run(main())


def test_a_job_the_batch_gahp_stops_answering_about(grid: Grid) -> None:
    """Of two running jobs, only the one without answers gets 029; 030 when they return."""
    control = grid.work / "control"
    control.mkdir()
    ids = grid.submit("executable = /bin/sleep\narguments = 300\nlog = job.log", count=2)
    config = with_gahp(ext_gahp(control=control), status_unknown_after=2.0)
    config = replace(config, max_unknown_polls=1000)
    muted, other = ids

    def running_both() -> bool:
        return all(grid.ad(j)["JobStatus"] == JobStatus.RUNNING for j in ids)

    async def main() -> None:
        async with running(grid, config) as manager:
            resource = manager.resources["batch fork"]
            await wait_for("both jobs to run", running_both)
            blah_id = str(grid.ad(muted)["GridJobId"]).split()[-1]
            (control / "mute").write_text(blah_id + "\n")
            await wait_for("029", lambda: "029 (" in grid.log())
            assert grid.ad(muted)["CurrentStatusUnknown"] is True
            polls = resource.stats.polls
            await wait_for("5 more polls", lambda: resource.stats.polls >= polls + 5)
            assert grid.log().count("029 (") == 1
            assert unset(grid.ad(other), "CurrentStatusUnknown")
            assert grid.ad(muted)["JobStatus"] == JobStatus.RUNNING  # unknown is not failed
            (control / "mute").unlink()
            await wait_for("030", lambda: "030 (" in grid.log())
            assert grid.ad(muted)["CurrentStatusUnknown"] is False
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT, "test over")
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))

    asyncio.run(main())
    events = htcondor2.JobEventLog(str(grid.work / "job.log")).events(stop_after=0)
    about = [(e.type, e.proc) for e in events if e.type in (UNKNOWN, KNOWN)]
    assert about == [(UNKNOWN, muted.proc), (KNOWN, muted.proc)]
