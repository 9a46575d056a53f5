"""The condor job's state and the helpers its actions (`_job.py`) share.

`CondorJobBase` holds what the job knows of its remote copy (GridJobId, submit tag, lease,
the last status answer), takes the resource's inputs (bulk status answers, lease renewals)
and offers the small steps every action uses: a GAHP call that answers with its error
text, the wait while the remote schedd is down, the back-off after a failed call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from htgrid.classad import ClassAd
from htgrid.gahp.commands import Spec, condor
from htgrid.grid._errors import NO_ANSWER
from htgrid.grid._gridids import is_tag
from htgrid.grid._job import GridJob
from htgrid.grid._task import Services
from htgrid.grid._values import as_int, as_str
from htgrid.grid.condor._ad import LOCAL_LEASE, RemoteJob, build_remote_ad, lease_duration
from htgrid.grid.condor._ids import CondorJobId
from htgrid.grid.condor._resource import CondorResource, RemoteCallFailed, is_down_error
from htgrid.grid.condor._table import TABLE, CondorEvent, CondorState
from htgrid.queue import JobId, JobNotFound, JobStatus

__all__ = ["CondorJobBase", "is_transient"]

log = logging.getLogger("htgrid.grid")

_S = CondorState
_E = CondorEvent
_READY_FOR = 10.0  # seconds a remote ad built ahead of its submit stays good


class CondorJobBase(GridJob[CondorState, CondorEvent]):
    """One job of grid type condor: its state and shared steps (the actions: CondorJob)."""

    table = TABLE

    def __init__(self, job_id: JobId, ad: ClassAd, resource: CondorResource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.condor = resource
        self.grid_id = CondorJobId.parse(ad.get("GridJobId"))
        tag = ad.get("GridSubmitTag")
        self.tag: str | None = tag if is_tag(tag) else None
        self.lease = lease_duration(ad)
        self.lease_expiration = as_int(ad.get(LOCAL_LEASE))
        #: The remote JobStatus last seen; None until the first answer since adoption.
        self.remote_state: int | None = None
        self.remote: RemoteJob | None = None
        self.remote_gone = False
        self.staged_in = False
        #: The mtime of the X.509 proxy file the remote copy has. None: not known (after
        #: a restart), so a running job's proxy is sent once more.
        self.proxy_sent: float | None = None
        #: The ad the submit sent, for the stage in (None after a restart: built again).
        self.submitted_ad: ClassAd | None = None
        self._missing = False
        self._keep_remote = False
        self._cleanup_due = False
        self._first_poll_at = 0.0
        #: Failed remote calls in a row (submits and cancels count apart).
        self.failures = 0

    @property
    def remote_id(self) -> CondorJobId | None:
        return self.grid_id

    # ---- inputs from the resource ------------------------------------------------------------

    def wants_status(self) -> bool:
        return (
            self.state is _S.SUBMITTED
            and self.grid_id is not None
            and self.clock.monotonic() >= self._first_poll_at
        )

    def remote_status(self, status: RemoteJob) -> None:
        """A bulk poll's answer for this job (an answer older than the last one is dropped)."""
        if self.remote is not None and status.server_time < self.remote.server_time:
            return
        self.remote = status
        self._missing = False
        self._heard()

    def remote_missing(self) -> None:
        """A bulk poll did not list this job: POLL_ACTIVE asks about it alone."""
        self._missing = True
        self.wake()

    async def lease_renewed(self, expiration: int) -> None:
        self.lease_expiration = expiration
        with contextlib.suppress(JobNotFound):
            await self.io.update(self.job_id, {LOCAL_LEASE: expiration})

    # ---- helpers ----------------------------------------------------------------------------

    def _removed(self) -> CondorEvent | None:
        return _E.LOCAL_REMOVED if self.status is JobStatus.REMOVED else None

    def _will_hold(
        self, reason: str, code: int = 0, subcode: int = 0, *, keep_remote: bool = False
    ) -> None:
        """What HOLD writes; `keep_remote`: the remote copy stays (held there too)."""
        super()._will_hold(reason, code, subcode)
        self._keep_remote = keep_remote

    def _where(self) -> str:
        remote = f" as job {self.grid_id.remote}" if self.grid_id is not None else ""
        return f"remote schedd {self.condor.schedd} (pool {self.condor.pool}){remote}"

    def _global_job_id(self) -> str:
        qdate = as_int(self.ad.get("QDate")) or 0
        return f"{self.condor.submitter}#{self.job_id.cluster}.{self.job_id.proc}#{qdate}"

    def _remote_ad(self, tag: str) -> ClassAd:
        now = int(self.clock.time())
        return build_remote_ad(
            self.ad,
            tag=tag,
            submitter=self.condor.submitter,
            global_job_id=self._global_job_id(),
            lease_expiration=now + self.lease,
            now=now,
        )

    def _submit_ad(self, tag: str) -> tuple[ClassAd, str]:
        """The remote ad and its text, as CONDOR_JOB_SUBMIT sends it."""
        ad = self._remote_ad(tag)
        return ad, repr(ad)

    async def _until_submit(self, tag: str) -> CondorEvent | tuple[ClassAd, str]:
        """Wait until the submit may go (the schedd up, no pause after failures): the
        remote ad and its text then, or the event that stopped the job meanwhile."""
        # Built while the first ping is under way, kept if the schedd is up by its end
        # (soon: the lease in the ad counts from when it was built).
        ready: tuple[ClassAd, str] | None = None
        built = 0.0
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            if self.resource.unknown and ready is None:
                ready = await self.services.turns.run(lambda: self._submit_ad(tag))
                built = self.clock.monotonic()
                continue
            if not self.resource.up:
                if self.resource.down:
                    ready = None  # built again when it is back: its lease counts from then
                await self.wait()
                continue
            pause = self.resource.submit_pause()
            if pause <= 0:
                break
            ready = None
            await self._paused(pause)
        self.resource.hold_slot(self)
        # A thousand jobs get here at once: their ads are built a few at a loop turn.
        if ready is None or self.clock.monotonic() - built > _READY_FOR:
            ready = await self.services.turns.run(lambda: self._submit_ad(tag))
        return ready

    async def _call_failed(self, what: str, error: str) -> CondorEvent:
        """A remote call that may work later: back off, ping, and try the state again."""
        self.failures += 1
        self.last_error = error
        self.resource.request_ping()
        await self._retry_later(what, error, self.failures, stop=self._removed)
        return _E.CALL_FAILED

    def _proxy_path(self) -> str | None:
        """The job's X.509 proxy file (x509userproxy, from its Iwd), if it has one."""
        proxy = as_str(self.ad.get("x509userproxy"))
        if not proxy:
            return None
        iwd = as_str(self.ad.get("Iwd")) or "/"
        return os.path.join(iwd, proxy)

    async def _proxy_mtime(self) -> float | None:
        """When the job's proxy file last changed (None: no proxy, or none readable)."""
        path = self._proxy_path()
        if path is None:
            return None
        try:
            return (await asyncio.to_thread(os.stat, path)).st_mtime
        except OSError:
            return None

    async def _remote(self, command: Spec, *args: str) -> str | None:
        """A command answered S NULL or F <error>: None when it worked, else the error."""
        try:
            await self.condor.command(condor.Done.of, command, *args)
        except RemoteCallFailed as err:
            return err.text
        except NO_ANSWER as err:
            return str(err)
        return None

    def _cleanup_what(self) -> str:
        return f"its copy at the {self._where()} (LeaveJobInQueue = false)"

    async def _cleanup_expected(self) -> None:
        """The remote copy's release recorded as owed before the exit is committed: once
        the job has left the queue, only that record says the copy is still there."""
        sweep = self.services.leftovers
        if sweep is not None and self.grid_id is not None:
            what = self._cleanup_what()
            await sweep.expect(self.job_id, self.grid_id.remote, self.ad, what=what)

    async def _cleanup_remote(self) -> None:
        """The remote copy let go (`CondorResource.let_go`); should that fail, the grid
        manager's sweep tries again (durably: the local job has left the queue)."""
        if not self._cleanup_due or self.grid_id is None:
            return
        self._cleanup_due = False
        remote = self.grid_id.remote
        error = await self.condor.let_go(remote)
        sweep = self.services.leftovers
        if error is None:
            if sweep is not None:
                await sweep.settled(self.job_id)
            return
        if sweep is not None:
            await sweep.owe(self.job_id, remote, self.ad, error, what=self._cleanup_what())
        else:
            log.warning(
                "job %s: could not let %s go (%s); its lease lets it go later",
                self.job_id,
                self._where(),
                error,
            )


def is_transient(error: str) -> bool:
    """An error that says the call did not get through (try again), not that it was refused."""
    return is_down_error(error) or "gahp" in error.lower()
