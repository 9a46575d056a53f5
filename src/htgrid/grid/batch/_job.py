"""The batch grid type's jobs: the actions of the states in `_table`.

Two-phase submit, so that a kill -9 at any moment neither loses a job nor runs it twice:

1. SAVE_TAG commits GridJobId = `batch <lrms> <tag>` (and Managed = "External").
2. SUBMIT sends BLAH_JOB_SUBMIT with ClientJobId = tag.
3. SUBMIT_SAVE commits GridJobId = `batch <lrms> <tag> <blah id>`, then logs 027.

A job found with only a tag (the grid manager or its GAHP server died between 1 and 3)
goes to RECOVER, after `lost_submit_grace` (a submit command a dead GAHP server left
running lands first): BLAH_JOB_FIND <lrms> <tag> when the GAHP server lists it (htgrid's
batch GAHP does), which says whether that submission reached the batch system. Without
it the submit is sent again with the same ClientJobId, and htgrid's batch GAHP answers
with the job it already has when that job is still queued or running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp.commands import blah
from htgrid.grid._errors import NO_ANSWER
from htgrid.grid._gridids import JOB_STATUS_NAMES, new_tag
from htgrid.grid._gridtype import GridType
from htgrid.grid._job import SUBMIT_ATTRS, GridJob
from htgrid.grid._task import Services
from htgrid.grid._values import as_int
from htgrid.grid.batch._ids import ALIASES, BatchJobId, BatchResourceName, remote_of
from htgrid.grid.batch._remote import (
    Login,
    Sandbox,
    TransferFailed,
    download,
    remote_submit_ad,
    sandbox_of,
    upload,
)
from htgrid.grid.batch._resource import BatchResource, build_submit_ad, remote_attrs, submit_ad
from htgrid.grid.batch._table import TABLE, BatchEvent, BatchState
from htgrid.queue import HoldReasonCode, JobId, JobStatus

__all__ = ["BATCH", "BatchJob"]

log = logging.getLogger("htgrid.grid")

_S = BatchState
_E = BatchEvent
_RUNNING = frozenset({JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT})

log = logging.getLogger("htgrid.grid")


class BatchJob(GridJob[BatchState, BatchEvent]):
    """One job of grid type batch."""

    table = TABLE

    def __init__(self, job_id: JobId, ad: ClassAd, resource: BatchResource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.batch = resource
        self.lrms = resource.lrms
        self.grid_id = BatchJobId.parse(ad.get("GridJobId"))
        names = {name: number for number, name in JOB_STATUS_NAMES.items()}
        self.remote_state: int | None = names.get(str(ad.get("GridJobStatus")))
        self.remote: blah.StatusAd | None = None
        self._when = 0.0  # when the last answer came
        self.remote_gone = False
        self.unknown_polls = 0
        self.lookup_failures = 0
        self._queued_now = False
        #: The expiration of the proxy the batch job's copy has (what was submitted, or
        #: last sent by BLAH_JOB_REFRESH_PROXY); None: not known.
        self._delegated = as_int(ad.get("DelegatedProxyExpiration"))
        self._submitted_proxy: int | None = None
        #: The host the batch system is on, reached over ssh (None: this one).
        self.remote_host = resource.where.remote
        self._sandbox_dropped = False
        #: Whether this submission's outputs are here: GridJobStatus = "COMPLETED" is
        #: committed only once they are (`_remote_end`), so a restart need not fetch again
        #: from a sandbox it may have removed already.
        self._outputs_here = self.remote_host is not None and ad.get("GridJobStatus") == "COMPLETED"

    @property
    def blah_id(self) -> str | None:
        return None if self.grid_id is None else self.grid_id.blah_id

    #: SAVE_TAG: the submission's key committed before anything is sent.
    _save_tag = GridJob.save_key

    def wants_status(self) -> bool:
        # A job just submitted is asked about at the resource's next poll: one bulk
        # command however many jobs, so that a job is seen to start or end within one
        # poll interval (waiting a whole interval after the submit made it up to two).
        return self.state is _S.SUBMITTED and self.blah_id is not None

    def remote_status(self, status: blah.StatusAd, when: float) -> None:
        """A status poll's answer for this job ("not found" is an answer too)."""
        self.remote, self._when = status, when
        self._heard()

    # ---- the hooks of the shared actions ----------------------------------------------------

    def _new_key(self) -> dict[str, Any]:
        self.grid_id = BatchJobId(self.lrms, new_tag(self.job_id.cluster, self.job_id.proc))
        self._sandbox_dropped = self._outputs_here = False
        return {"GridJobId": str(self.grid_id)}

    def _remote_live(self) -> bool:
        return (
            self.blah_id is not None
            and not self.remote_gone
            and self.remote_state not in (JobStatus.COMPLETED, JobStatus.REMOVED)
        )

    async def _cancel_remote(self) -> str | None:
        assert self.blah_id is not None
        try:
            outcome = await self.resource.ask(blah.Outcome.of, blah.CANCEL, self.blah_id)
        except NO_ANSWER as err:
            return str(err)
        if not outcome.ok and not blah.already_gone(outcome.message):
            return outcome.message or "BLAH_JOB_CANCEL failed"
        self.remote_gone = True
        await self._drop_sandbox()
        return None

    def _remote_name(self) -> str:
        return f"cancelling batch job {self.blah_id}"

    def _submit_attrs(self) -> Iterable[str]:
        return SUBMIT_ATTRS if self.grid_id is not None else ()

    async def _finishing(self) -> None:
        # Before a removed job is destroyed (a removal while its outputs were being fetched
        # comes here with the sandbox there): once it has left the queue nothing would.
        await self._drop_sandbox()

    async def _forget(self) -> None:
        await self._drop_sandbox()
        self.grid_id = None
        self.remote = None
        self.remote_state = None
        self.remote_gone = self._outputs_here = False
        self.unknown_polls = self.lookup_failures = 0

    # ---- the actions ------------------------------------------------------------------------

    async def _start(self) -> BatchEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.grid_id is None:
            return _E.NO_ID
        if self.grid_id.blah_id is None:
            return _E.HAS_TAG
        self.resource.hold_slot(self)
        return _E.HAS_BLAH_ID

    async def _submit(self) -> BatchEvent:
        if (stop := await self._turn_to_submit()) is not None:
            return stop
        assert self.grid_id is not None  # SAVE_TAG or START set it
        # Read before the submit reads the file: a renewal after it is sent again.
        self._submitted_proxy = None if self.proxy is None else self.proxy.state.expiration
        if self.remote_host is None:
            ad_text = build_submit_ad(self.ad, self.lrms, self.grid_id.tag)
        else:
            ad_text, sandbox = self._sandbox()
            if (failed := await self._send_inputs(sandbox)) is not None:
                return failed
        submit = self.resource.ask(blah.Submitted.of, blah.SUBMIT, ad_text)
        result = await self._send_submit(submit, _E.SUBMIT_LOST)
        if isinstance(result, BatchEvent):
            return result
        if result.ok:
            self.grid_id = dataclasses.replace(self.grid_id, blah_id=result.blah_id)
            self.resource.submit_succeeded()
            self._queued_now = True
            return _E.SUBMIT_OK
        error = result.error or "the GAHP server gave no reason"
        transient = blah.transient_submit(result.code, error)
        subcode = int(result.code) if result.code.isdigit() else 0
        return await self._submit_failed(error, transient=transient, subcode=subcode)

    async def _recover(self) -> BatchEvent:
        assert self.grid_id is not None  # only jobs with a tag come here
        await self._lost_submit_grace()
        await self.until_resource_up()
        if not self.resource.gahp.supports(blah.FIND.name):
            # Sending the submit again is the lookup: the batch GAHP answers a repeated
            # ClientJobId with the job still queued or running under it.
            return self._not_found(hold_slot=True)
        find = blah.Find(self.lrms, self.grid_id.tag)
        try:
            found = await self.resource.ask(blah.Found.of, blah.FIND, *find.args())
        except NO_ANSWER as err:
            return await self._lookup_failed(str(err))
        if not found.ok:
            return await self._lookup_failed(found.error or "no reason given")
        self.lookup_failures = 0
        if found.blah_id:
            self.grid_id = dataclasses.replace(self.grid_id, blah_id=found.blah_id)
            self.resource.hold_slot(self)
            return _E.FOUND
        return self._not_found(hold_slot=True)

    async def _lookup_failed(self, error: str) -> BatchEvent:
        self.lookup_failures += 1
        what = f"looking up the earlier submission {self.grid_id}"
        await self._try_again(what, error, self.lookup_failures)
        return _E.LOOKUP_FAILED

    async def _submit_save(self) -> BatchEvent:
        now = self.clock.time()
        attrs: dict[str, Any] = {"GridJobId": str(self.grid_id), "GridJobSubmitTime": int(now)}
        if self._queued_now:
            # Just accepted: queued (idle) at the batch system, as its first poll will say;
            # written now, the poll has nothing to write unless the job has moved on.
            self._queued_now = False
            self.remote_state = int(JobStatus.IDLE)
            attrs |= {"GridJobStatus": "IDLE", "LastRemoteStatusUpdate": int(now)}
        if self._submitted_proxy is not None:
            attrs["DelegatedProxyExpiration"] = self._delegated = self._submitted_proxy
        attrs |= self.clear_wait_attrs()
        await self.io.update(self.job_id, attrs)
        self.submit_failures = self.unknown_polls = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _on_remote_status(self) -> BatchEvent | None:
        status = self.remote
        assert status is not None  # an answer came with the news
        if status.job_status == 0:
            self.unknown_polls += 1
            if self.unknown_polls < self.config.max_unknown_polls:
                return None
            self._will_hold(
                f"The batch system has not known job {self.blah_id} for "
                f"{self.unknown_polls} status polls ({status.error or 'not found'}); it may "
                "have been removed outside htgrid"
            )
            self.remote_gone = True
            return _E.REMOTE_LOST
        self.unknown_polls = 0
        attrs: dict[str, Any] = {}
        if status.job_status != self.remote_state:
            attrs["GridJobStatus"] = JOB_STATUS_NAMES.get(status.job_status, str(status.job_status))
            attrs["LastRemoteStatusUpdate"] = int(self._when)
        self.remote_state = status.job_status
        event: BatchEvent | None = None
        if status.job_status == JobStatus.COMPLETED:
            return _E.REMOTE_DONE  # DONE_SAVE writes it all at once
        if status.job_status == JobStatus.REMOVED:
            self.remote_gone = True
            self._will_hold("Job removed from batch queue manually")
            event = _E.REMOTE_GONE
        elif status.job_status == JobStatus.HELD:
            reason = status.hold_reason or "held remotely with no hold reason"
            self._will_hold(reason, status.hold_code, status.hold_subcode)
            event = _E.REMOTE_HELD
        running = status.job_status in _RUNNING
        await self._mirror_run(
            running=running, idle=status.job_status == JobStatus.IDLE, attrs=attrs
        )
        if event is None:
            await self._refresh_proxy()
        return event

    async def _refresh_proxy(self) -> None:
        """BLAH_JOB_REFRESH_PROXY: a proxy renewed here (by its user or from MyProxy: a
        later expiration than the batch job's copy has) replaces that copy, and
        DelegatedProxyExpiration says so (HTCondor's INFNBatchJob, GM_REFRESH_PROXY). A
        failure is logged and tried at the next status; the proxy's expiry holds the job
        in the end."""
        if self.proxy is None or self.blah_id is None:
            return
        expiration = self.proxy.state.expiration
        if expiration is None or (self._delegated is not None and expiration <= self._delegated):
            return
        if not self.resource.gahp.supports(blah.REFRESH_PROXY.name):
            return
        try:
            outcome = await self.resource.ask(
                blah.Outcome.of, blah.REFRESH_PROXY, self.blah_id, self.proxy.path
            )
        except NO_ANSWER as err:
            log.warning("job %s: refreshing its proxy failed: %s", self.job_id, err)
            return
        if not outcome.ok:
            log.warning("job %s: refreshing its proxy failed: %s", self.job_id, outcome.message)
            return
        self._delegated = expiration
        await self.io.update(self.job_id, {"DelegatedProxyExpiration": expiration})
        log.info("job %s: renewed proxy %s sent to %s", self.job_id, self.proxy.path, self.blah_id)

    async def _remote_end(self) -> tuple[int, bool] | BatchEvent:
        status = self.remote
        assert status is not None  # REMOTE_DONE came with a status
        if status.exit_code is None and status.exit_signal is None:
            self._will_hold(
                f"The batch system reported job {self.blah_id} finished but gave no exit code"
            )
            return _E.EXIT_UNKNOWN
        remote = self.remote_host is not None
        fetch = remote and not self._outputs_here
        if fetch and (failed := await self._fetch_outputs()) is not None:
            return failed
        attrs: dict[str, Any] = {
            "GridJobStatus": "COMPLETED",
            "LastRemoteStatusUpdate": int(self._when),
            **remote_attrs(status),
        }
        await self.io.update(self.job_id, attrs, durable=remote)
        if remote:
            # Removed before the exit is committed, not after: a job that has left the
            # queue is never seen again, so a crash between the two would leave the
            # sandbox there for good. A crash before this removal comes back here (the
            # outputs, said to be here above, are not fetched again).
            self._outputs_here = True
            await self._drop_sandbox()
        if status.exit_signal is not None:
            return status.exit_signal, True
        assert status.exit_code is not None
        return status.exit_code, False

    # ---- a batch system on another host: the sandbox sent and fetched over ssh -------------

    def _sandbox(self) -> tuple[str, Sandbox]:
        """The submit ad for the remote GAHP, and the transfers of the job's sandbox."""
        assert self.grid_id is not None
        tag = self.grid_id.tag
        return remote_submit_ad(submit_ad(self.ad, self.lrms, tag), tag)

    def _login(self) -> Login:
        """ssh as the GAHP server's user, with its environment (their keys)."""
        return self.batch.login()

    async def _send_inputs(self, sandbox: Sandbox) -> BatchEvent | None:
        """The input files sent; else the submit's failure (a retry, or a hold)."""
        assert self.remote_host is not None
        what = f"sending the input files to {self.remote_host.name}"
        try:
            await self.said_if_slow(
                asyncio.to_thread(upload, self.remote_host, sandbox, self._login()), what
            )
        except TransferFailed as err:
            if err.transient:
                return await self._submit_failed(str(err), transient=True, what=what)
            self.resource.release(self)
            self._will_hold(str(err), HoldReasonCode.TransferInputError)
            return _E.SUBMIT_REFUSED
        return None

    async def _fetch_outputs(self) -> BatchEvent | None:
        """The output files fetched (tried again while the host cannot be reached); else
        HOLD's event, or the job's stop."""
        assert self.remote_host is not None
        _, sandbox = self._sandbox()
        what = f"fetching the output files from {self.remote_host.name}"
        failures = 0
        while (stop := self._stopped()) is None:
            try:
                await self.said_if_slow(
                    asyncio.to_thread(download, self.remote_host, sandbox, self._login()), what
                )
                return None
            except TransferFailed as err:
                if not err.transient:
                    self._will_hold(str(err), HoldReasonCode.TransferOutputError)
                    return _E.EXIT_UNKNOWN
                failures += 1
                await self._try_again(what, str(err), failures)
        return stop

    async def _drop_sandbox(self) -> None:
        """The remote sandbox removed, once here; should that fail, the grid manager's
        sweep tries again (durably: the job leaves the queue next)."""
        if self.remote_host is None or self.grid_id is None or self._sandbox_dropped:
            return
        self._sandbox_dropped = True
        sandbox = sandbox_of(self.grid_id.tag)
        error = await self.batch.let_go(sandbox)
        if error is None:
            return
        if self.services.leftovers is not None:
            what = f"its sandbox {sandbox} at {self.remote_host.name}"
            await self.services.leftovers.owe(self.job_id, sandbox, self.ad, error, what=what)
        else:
            log.warning("job %s: %s: the sandbox is left there", self.job_id, error)


def _gahp(name: BatchResourceName, services: Services) -> tuple[str, Sequence[str]]:
    if name.remote is not None:
        # The GAHP server on the remote host, over ssh (HTCondor's key: <lrms>/<ssh args>).
        return f"batch/{' '.join(name.args)}", name.remote.gahp_argv()
    # One batch GAHP server serves every batch system (HTCondor starts one per LRM).
    return "batch", services.config.batch_gahp


BATCH = GridType(
    name="batch",
    aliases=ALIASES,
    parse_resource=BatchResourceName.parse,
    gahp=_gahp,
    resource=BatchResource,
    new_job=BatchJob,
    remote=remote_of,
)
