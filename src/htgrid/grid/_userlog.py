"""The user-log events the grid manager writes itself: 027, 025, 026, 029, 030.

Status changes (001 execute, 004 evict, 005 terminate, 012 held, 009 aborted) are the
queue daemon's to write: it follows the same change feed and writes them from the status
changes this grid manager makes through JobQueue (job_started, job_exited, act...). A log
that cannot be written costs the event, never the job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading

from htgrid.classad import ClassAd
from htgrid.eventlog import (
    EventLogError,
    GridResourceDownEvent,
    GridResourceUpEvent,
    GridSubmitEvent,
    JobStatusKnownEvent,
    JobStatusUnknownEvent,
    UserLog,
    UserLogEvent,
)

__all__ = ["EventLogs", "user_log_path"]

log = logging.getLogger("htgrid.grid")

# The header line of a 027 event in HTCondor's text format: `027 (042.007.000) ...`.
_GRID_SUBMIT = re.compile(rb"^027 \((\d+)\.(\d+)\.\d+\) ", re.MULTILINE)
# Logs whose 027s are remembered (a look after the last is read from the start again).
_LOGS_KEPT = 1024
_CHUNK = 1 << 20


def user_log_path(ad: ClassAd) -> str | None:
    """The job's user log (`UserLog`, taken relative to `Iwd`), if it has one."""
    path = ad.get("UserLog")
    if not isinstance(path, str) or not path:
        return None
    iwd = ad.get("Iwd")
    if not os.path.isabs(path) and isinstance(iwd, str):
        path = os.path.join(iwd, path)
    return path


class EventLogs:
    """Writes grid events to jobs' user logs, off the event loop."""

    def __init__(self) -> None:
        self.written = 0
        # Per log: how far it was read, and the jobs with a 027 in what was read.
        self._submitted: dict[str, tuple[int, set[tuple[int, int]]]] = {}
        self._reading = threading.Lock()

    async def append(self, path: str | None, event: UserLogEvent) -> None:
        if path is None:
            return
        try:
            await asyncio.to_thread(UserLog(path).append, event)
        except EventLogError as err:
            log.warning("job %d.%d: %s", event.cluster, event.proc, err)
            return
        self.written += 1

    async def grid_submit(
        self, path: str | None, cluster: int, proc: int, when: float, resource: str, job_id: str
    ) -> None:
        if path is None:  # no log: not even the event (checked when made: 20 µs a job)
            return
        event = GridSubmitEvent(
            cluster=cluster, proc=proc, timestamp=when, grid_resource=resource, grid_job_id=job_id
        )
        await self.append(path, event)

    async def grid_submit_once(
        self, path: str | None, cluster: int, proc: int, when: float, resource: str, job_id: str
    ) -> None:
        """`grid_submit`, unless the log has the job's 027 already.

        For a job found with its submit saved: the grid manager saves the remote id, then
        writes the event, and a kill -9 between the two loses the event unless it is
        written on the way back.
        """
        if path is None:
            return
        try:
            logged = await asyncio.to_thread(self._logged, path, cluster, proc)
        except OSError as err:
            if not isinstance(err, FileNotFoundError):
                log.warning("job %d.%d: cannot read %s: %s", cluster, proc, path, err)
            logged = False
        if not logged:
            await self.grid_submit(path, cluster, proc, when, resource, job_id)

    def _logged(self, path: str, cluster: int, proc: int) -> bool:
        """Whether the log at `path` has a 027 of the job (read on from the last look)."""
        with self._reading:
            done, jobs = self._submitted.get(path, (0, set()))
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size < done:  # a new file there: read it all
                    done, jobs = 0, set()
                f.seek(done)
                while chunk := f.read(_CHUNK):
                    # Whole lines only: an unfinished last one (an event being written)
                    # is read the next time.
                    whole = chunk.rfind(b"\n") + 1
                    if whole == 0:
                        if len(chunk) < _CHUNK:
                            break
                        whole = len(chunk)  # a line longer than a chunk holds no header
                    jobs.update((int(c), int(p)) for c, p in _GRID_SUBMIT.findall(chunk, 0, whole))
                    done += whole
                    f.seek(done)
            if path not in self._submitted and len(self._submitted) >= _LOGS_KEPT:
                self._submitted.clear()
            self._submitted[path] = (done, jobs)
            return (cluster, proc) in jobs

    async def resource(
        self, path: str | None, cluster: int, proc: int, when: float, resource: str, *, up: bool
    ) -> None:
        if path is None:
            return
        kind = GridResourceUpEvent if up else GridResourceDownEvent
        await self.append(
            path, kind(cluster=cluster, proc=proc, timestamp=when, grid_resource=resource)
        )

    async def status_known(
        self, path: str | None, cluster: int, proc: int, when: float, *, known: bool
    ) -> None:
        """030 (the remote status is known again) or 029 (it is not)."""
        if path is None:
            return
        kind = JobStatusKnownEvent if known else JobStatusUnknownEvent
        await self.append(path, kind(cluster=cluster, proc=proc, timestamp=when))
