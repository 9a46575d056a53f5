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

from htgrid.classad import ClassAd
from htgrid.queue.eventlog import (
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
        event = GridSubmitEvent(
            cluster=cluster, proc=proc, timestamp=when, grid_resource=resource, grid_job_id=job_id
        )
        await self.append(path, event)

    async def resource(
        self, path: str | None, cluster: int, proc: int, when: float, resource: str, *, up: bool
    ) -> None:
        kind = GridResourceUpEvent if up else GridResourceDownEvent
        await self.append(
            path, kind(cluster=cluster, proc=proc, timestamp=when, grid_resource=resource)
        )

    async def status_known(
        self, path: str | None, cluster: int, proc: int, when: float, *, known: bool
    ) -> None:
        """030 (the remote status is known again) or 029 (it is not)."""
        kind = JobStatusKnownEvent if known else JobStatusUnknownEvent
        await self.append(path, kind(cluster=cluster, proc=proc, timestamp=when))
