"""The schedd's ad in the collector (what `htgrid status -schedd` lists).

Sent every SCHEDD_INTERVAL seconds (its UpdateInterval, so the collector drops it after
three missed updates), with HTCondor's job counts: TotalIdleJobs, TotalRunningJobs,
TotalHeldJobs, TotalJobAds and the local universe's own. Its Name is SCHEDD_NAME; with
the API's URL, MyAddress is `<host:port?noUDP>` of the TLS listener (where HTCondor's
clients reach it too, over CEDAR) and HTGridURL the URL,
which is how another pool finds this queue (HTCondor-C).

A CE's (JOB_ROUTER in DAEMON_LIST) also carries what grid matchmaking picks CEs by, as
HTCondor-CE's central collector lists them: `grid_resource` (what a submitter writes to
reach it), JobRouterName, and JobRouterRoutes, one ad per route with its GridResource,
limits (MaxJobs, MaxIdleJobs) and routed jobs by state. The ad goes to the pool's
collector and to each of `views` (CONDOR_VIEW_HOST: a central collector).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.collector import CollectorClient
from htgrid.errors import HTGridError
from htgrid.net.cedar import REMOTE_VERSION
from htgrid.queue import JobQueue, JobStatus
from htgrid.schedd._config import default_schedd_name
from htgrid.schedd._worker import QueueWorker

__all__ = ["SHARED_PORT_ID", "ScheddAdvertiser"]

#: The schedd's ID behind its pool's shared port (USE_SHARED_PORT): `<host:port?sock=schedd>`.
SHARED_PORT_ID: Final = "schedd"

_log = logging.getLogger("htgrid.schedd")
_LOCAL: Final = 12


def _counts(q: JobQueue) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (status, universe), n in q.count_jobs("JobUniverse").items():
        counts["all"] += n
        counts[f"status{status}"] += n
        if universe == _LOCAL:
            counts[f"local{status}"] += n
    return counts


class ScheddAdvertiser:
    """Keeps the schedd's ad in the collector fresh."""

    def __init__(
        self,
        worker: QueueWorker,
        collector: CollectorClient,
        *,
        address: str,
        interval: float,
        started: int,
        clock: Callable[[], float],
        name: str | None = None,
        url: str | None = None,
        extra: Callable[[JobQueue], dict[str, Any]] | None = None,
        views: Sequence[CollectorClient] = (),
        shared_port: str | None = None,
    ) -> None:
        """`address` is used as MyAddress unless `url` (https://host:port) is given, or
        `shared_port` (the collector's host:port, when the schedd is behind it)."""
        self._worker = worker
        self._collector = collector
        self.name = name or default_schedd_name()
        self.url = url
        # `?noUDP`: HTCondor's clients send their commands (RESCHEDULE) by TCP.
        self.address = f"<{url.removeprefix('https://')}?noUDP>" if url else address
        if shared_port:
            self.address = f"<{shared_port}?noUDP&sock={SHARED_PORT_ID}>"
        self._interval = interval
        self._started = started
        self._clock = clock
        self._sequence = 0
        self._extra = extra
        self._views = tuple(views)
        self._view_failing: set[int] = set()

    async def run(self) -> None:
        """Advertise now and every interval, until cancelled."""
        failing = False
        while True:
            try:
                await self.advertise()
                failing = False
            except HTGridError as exc:
                if not failing:
                    _log.warning("cannot advertise the schedd to the collector: %s", exc)
                failing = True
            # Until it answers, try again soon: the collector may be starting with us.
            await asyncio.sleep(min(self._interval, 2.0) if failing else self._interval)

    async def advertise(self) -> None:
        counts = await self._worker.read(_counts)
        extra = await self._worker.read(self._extra) if self._extra is not None else {}
        self._sequence += 1
        ad = ClassAd()
        ad["MyType"] = "Scheduler"
        ad["Name"] = self.name
        ad["Machine"] = socket.gethostname()
        ad["MyAddress"] = self.address
        ad["ScheddIpAddr"] = self.address
        if self.url:
            ad["HTGridURL"] = self.url
        ad["CondorVersion"] = REMOTE_VERSION
        ad["DaemonStartTime"] = self._started
        ad["UpdateSequenceNumber"] = self._sequence
        ad["UpdateInterval"] = int(self._interval)
        ad["MyCurrentTime"] = int(self._clock())
        ad["TotalJobAds"] = counts["all"]
        ad["TotalIdleJobs"] = counts[f"status{JobStatus.IDLE.value}"]
        ad["TotalRunningJobs"] = counts[f"status{JobStatus.RUNNING.value}"]
        ad["TotalHeldJobs"] = counts[f"status{JobStatus.HELD.value}"]
        ad["TotalRemovedJobs"] = counts[f"status{JobStatus.REMOVED.value}"]
        ad["TotalLocalJobsIdle"] = counts[f"local{JobStatus.IDLE.value}"]
        ad["TotalLocalJobsRunning"] = counts[f"local{JobStatus.RUNNING.value}"]
        for name, value in extra.items():
            ad[name] = value
        await self._collector.advertise("UPDATE_SCHEDD_AD", [ad])
        for number, view in enumerate(self._views):
            # A central collector that does not answer must not stop the pool's own ad.
            try:
                await view.advertise("UPDATE_SCHEDD_AD", [ad])
            except HTGridError as exc:
                if number not in self._view_failing:
                    _log.warning("cannot advertise the schedd to CONDOR_VIEW_HOST: %s", exc)
                self._view_failing.add(number)
            else:
                self._view_failing.discard(number)

    async def invalidate(self) -> None:
        """Take the ad out of the collector (the schedd is stopping)."""
        query = ClassAd({"MyType": "Query", "TargetType": "Scheduler"})
        query["Requirements"] = ExprTree(
            f"Name == {quote(self.name)} && MyAddress == {quote(self.address)}"
        )
        for collector in (self._collector, *self._views):
            with contextlib.suppress(HTGridError):
                await collector.invalidate("INVALIDATE_SCHEDD_ADS", query)
