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

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpRequestRefused, GahpServerExited, GahpTimeout, LocalGahpError, unnull
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gridids import JOB_STATUS_NAMES, new_tag
from htgrid.grid._gridtype import GridType
from htgrid.grid._job import SUBMIT_ATTRS, GridJob, Services
from htgrid.grid._values import format_time
from htgrid.grid.batch._ids import ALIASES, BatchJobId, BatchResourceName, remote_of
from htgrid.grid.batch._resource import FIND, BatchResource, RemoteStatus, build_submit_ad
from htgrid.grid.batch._table import INITIAL, TERMINAL, BatchEvent, BatchState, next_state
from htgrid.queue import ExitOutcome, HoldReasonCode, InvalidTransition, JobId, JobStatus

__all__ = ["BATCH", "BatchJob"]

log = logging.getLogger("htgrid.grid")

_S = BatchState
_E = BatchEvent
# What the GAHP says when the job to cancel no longer needs it.
_ALREADY_GONE = re.compile(r"not found|completed|removed|finished", re.IGNORECASE)
# Submit failures that say nothing was submitted and trying later may work: code 3 is the
# blahp's "error executing the submission command" (a batch system that did not answer).
_TRANSIENT = re.compile(r"temporar|try again|timed? ?out|unavailable|connection", re.IGNORECASE)
_LOST_GAHP = (GahpServerExited, GahpTimeout)
_NO_ANSWER = (GahpServerExited, GahpTimeout, GahpRequestRefused, GahpUnavailable)


class BatchJob(GridJob[BatchState, BatchEvent]):
    """One job of grid type batch."""

    terminal = TERMINAL
    events = BatchEvent

    def __init__(self, job_id: JobId, ad: ClassAd, resource: BatchResource, services: Services):
        super().__init__(job_id, ad, resource, services, INITIAL)
        self.batch = resource
        self.lrms = resource.lrms
        self.grid_id = BatchJobId.parse(ad.get("GridJobId"))
        names = {name: number for number, name in JOB_STATUS_NAMES.items()}
        self.remote_state: int | None = names.get(str(ad.get("GridJobStatus")))
        self.remote: RemoteStatus | None = None
        self.remote_gone = False
        self.last_error: str | None = None
        self._fresh = False
        self.unknown_polls = 0
        self.submit_failures = 0
        self.lookup_failures = 0
        self.cancel_failures = 0
        # A submission found with a tag only was in flight when something died.
        self._grace_due = True
        self._queued_now = False

    @property
    def blah_id(self) -> str | None:
        return None if self.grid_id is None else self.grid_id.blah_id

    def actions(self) -> Mapping[BatchState, Callable[[], Awaitable[BatchEvent]]]:
        return {
            _S.INIT: self._init,
            _S.START: self._start,
            _S.UNSUBMITTED: self._unsubmitted,
            _S.SAVE_TAG: self._save_tag,
            _S.SUBMIT: self._submit,
            _S.RECOVER: self._recover,
            _S.SUBMIT_SAVE: self._submit_save,
            _S.SUBMITTED: self._submitted,
            _S.DONE_SAVE: self._done_save,
            _S.HOLD: self._hold_job,
            _S.CANCEL: self._cancel,
            _S.CLEAR: self._clear,
        }

    def next_state(self, state: BatchState, event: BatchEvent) -> BatchState:
        return next_state(state, event)

    def wants_status(self) -> bool:
        # A job just submitted is asked about at the resource's next poll: one bulk
        # command however many jobs, so that a job is seen to start or end within one
        # poll interval (waiting a whole interval after the submit made it up to two).
        return self.state is _S.SUBMITTED and self.blah_id is not None

    def remote_status(self, status: RemoteStatus) -> None:
        """A status poll's answer for this job ("not found" is an answer too)."""
        self.remote_status_seen()
        self.remote = status
        self._fresh = True
        self.wake()

    # ---- helpers --------------------------------------------------------------------------

    def _will_hold(self, reason: str, code: int = 0, subcode: int = 0) -> None:
        self._hold = (reason, code, subcode)

    def _remote_live(self) -> bool:
        return (
            self.blah_id is not None
            and not self.remote_gone
            and self.remote_state not in (JobStatus.COMPLETED, JobStatus.REMOVED)
        )

    async def _until_submittable(self) -> BatchEvent | None:
        """Wait for the resource to be up and its submits not paused; a stop event if any."""
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            if not self.resource.up:
                await self.wait()
                continue
            pause = self.resource.submit_pause()
            if pause <= 0:
                return None
            until = format_time(self.clock.time() + pause)
            await self.set_wait_reason(
                f"submits to {self.resource.name} are paused until {until} after "
                f"{self.resource.failures} failed submits in a row"
            )
            await self.wait(pause)

    # ---- the actions ------------------------------------------------------------------------

    async def _init(self) -> BatchEvent:
        while self.resource.unknown:
            await self.wait()
        await self.sync_resource()
        return _E.READY

    async def _start(self) -> BatchEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.grid_id is None:
            return _E.NO_ID
        if self.grid_id.blah_id is None:
            return _E.HAS_TAG
        self.resource.hold_slot(self)
        return _E.HAS_BLAH_ID

    async def _unsubmitted(self) -> BatchEvent:
        since: str | None = None
        while True:
            stop = await self._until_submittable()
            if stop is not None:
                self.resource.release(self)
                return stop
            if self.resource.try_acquire(self):
                return _E.WANT_SUBMIT
            if since is None:
                since = format_time(self.clock.time())
            _, limit, _ = self.resource.slots()
            await self.set_wait_reason(
                f"waiting for a submit slot since {since}: {self.resource.name} takes at "
                f"most {limit} submitted jobs at once"
            )
            await self.wait()

    async def _save_tag(self) -> BatchEvent:
        self.grid_id = BatchJobId(self.lrms, new_tag(self.job_id.cluster, self.job_id.proc))
        attrs = {"GridJobId": str(self.grid_id), "Managed": "External", **self.clear_wait_attrs()}
        # The idempotency key: on disk before the submit can happen.
        await self.io.update(self.job_id, attrs, durable=True)
        return _E.SAVED

    async def _submit(self) -> BatchEvent:
        stop = await self._until_submittable()
        if stop is not None:
            return stop
        assert self.grid_id is not None  # SAVE_TAG or START set it
        self.resource.hold_slot(self)
        ad_text = build_submit_ad(self.ad, self.lrms, self.grid_id.tag)
        try:
            fields = await self.resource.call("BLAH_JOB_SUBMIT", ad_text)
        except _LOST_GAHP as err:
            # The submit may or may not have reached the batch system: look it up.
            self.last_error = str(err)
            self._grace_due = True
            return _E.SUBMIT_LOST
        except LocalGahpError as err:
            return self._submit_refused(str(err), 0)
        except (GahpRequestRefused, GahpUnavailable) as err:
            return await self._submit_failed(str(err), transient=True, code=0)
        code = fields[0] if fields else ""
        blah_id = unnull(fields[2]) if len(fields) > 2 else None
        if code == "0" and blah_id and blah_id != "N/A":
            self.grid_id = dataclasses.replace(self.grid_id, blah_id=blah_id)
            self.resource.submit_succeeded()
            self._queued_now = True
            return _E.SUBMIT_OK
        error = fields[1] if len(fields) > 1 else "the GAHP server gave no reason"
        number = int(code) if code.isdigit() else 0
        transient = code == "3" or _TRANSIENT.search(error) is not None
        return await self._submit_failed(error, transient=transient, code=number)

    async def _submit_failed(self, error: str, *, transient: bool, code: int) -> BatchEvent:
        self.last_error = error
        self.resource.submit_failed(transient=transient)
        self.submit_failures += 1
        if not transient or self.submit_failures >= self.config.max_submit_attempts:
            return self._submit_refused(error, code)
        delay = self.config.backoff(self.submit_failures)
        await self.set_wait_reason(
            f"submit attempt {self.submit_failures} failed at {format_time(self.clock.time())}: "
            f"{error}; trying again at {format_time(self.clock.time() + delay)}"
        )
        end = self.clock.monotonic() + delay
        while self._stopped() is None and (left := end - self.clock.monotonic()) > 0:
            await self.wait(left)
        return _E.SUBMIT_RETRY

    def _submit_refused(self, error: str, code: int) -> BatchEvent:
        self.resource.release(self)
        self._will_hold(f"Attempts to submit failed: {error}", HoldReasonCode.Unspecified, code)
        return _E.SUBMIT_REFUSED

    async def _recover(self) -> BatchEvent:
        assert self.grid_id is not None  # only jobs with a tag come here
        if self._grace_due:
            self._grace_due = False
            await self.pause(self.config.lost_submit_grace)
        while not self.resource.up:
            await self.wait()
        if not self.resource.gahp.supports(FIND):
            # Sending the submit again is the lookup: the batch GAHP answers a repeated
            # ClientJobId with the job still queued or running under it.
            self.resource.hold_slot(self)
            return self._stopped() or _E.NOT_FOUND
        try:
            fields = await self.resource.call(FIND, self.lrms, self.grid_id.tag)
        except (*_NO_ANSWER, LocalGahpError) as err:
            return await self._lookup_failed(str(err))
        if fields[:1] != ("0",):
            return await self._lookup_failed(fields[1] if len(fields) > 1 else "no reason given")
        self.lookup_failures = 0
        found = unnull(fields[2]) if len(fields) > 2 else None
        if found:
            self.grid_id = dataclasses.replace(self.grid_id, blah_id=found)
            self.resource.hold_slot(self)
            return _E.FOUND
        stop = self._stopped()
        if stop is not None:
            return stop
        self.resource.hold_slot(self)
        return _E.NOT_FOUND

    async def _lookup_failed(self, error: str) -> BatchEvent:
        self.lookup_failures += 1
        self.last_error = error
        self.resource.request_ping()
        delay = self.config.backoff(self.lookup_failures)
        await self.set_wait_reason(
            f"looking up the earlier submission {self.grid_id} failed at "
            f"{format_time(self.clock.time())}: {error}; trying again"
        )
        await self.pause(delay)
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
        attrs |= self.clear_wait_attrs()
        await self.io.update(self.job_id, attrs)
        self.submit_failures = self.unknown_polls = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _submitted(self) -> BatchEvent:
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            if self._fresh and self.remote is not None:
                self._fresh = False
                return await self._on_status(self.remote) or _E.STATUS
            await self.wait()

    async def _on_status(self, status: RemoteStatus) -> BatchEvent | None:
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
            attrs["LastRemoteStatusUpdate"] = int(status.when)
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
        if attrs:
            await self.io.update(self.job_id, attrs)
        try:
            if status.job_status == JobStatus.IDLE and self.status is JobStatus.RUNNING:
                await self.io.evicted(self.job_id)
                self.status = JobStatus.IDLE
            elif status.job_status in _RUNNING and self.status is JobStatus.IDLE:
                await self.io.started(self.job_id)
                self.status = JobStatus.RUNNING
        except InvalidTransition:
            await self._refresh_status()  # held or removed meanwhile: the loop sees it
        return event

    async def _done_save(self) -> BatchEvent:
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            status = self.remote
            assert status is not None  # REMOTE_DONE came with a status
            if status.exit_code is None and status.exit_signal is None:
                self._will_hold(
                    f"The batch system reported job {self.blah_id} finished but gave no exit code"
                )
                return _E.EXIT_UNKNOWN
            attrs: dict[str, Any] = {
                "GridJobStatus": "COMPLETED",
                "LastRemoteStatusUpdate": int(status.when),
                **status.copied,
            }
            await self.io.update(self.job_id, attrs)
            by_signal = status.exit_signal is not None
            code = status.exit_signal if status.exit_signal is not None else status.exit_code
            assert code is not None
            try:
                if self.status is JobStatus.IDLE:
                    await self.io.started(self.job_id)
                    self.status = JobStatus.RUNNING
                outcome = await self.io.exited(self.job_id, code, by_signal=by_signal)
            except InvalidTransition:
                await self._refresh_status()
                continue
            self.resource.release(self)
            if outcome is ExitOutcome.HELD:
                self.status = JobStatus.HELD
                return _E.POLICY_HELD
            if outcome is ExitOutcome.REQUEUED:
                self.status = JobStatus.IDLE
                return _E.REQUEUED
            self.status = JobStatus.COMPLETED
            self._left_queue = outcome is ExitOutcome.COMPLETED
            return _E.EXITED

    async def _hold_job(self) -> BatchEvent:
        await self._hold_here()
        return _E.CANCEL_NEEDED if self._remote_live() else _E.NOTHING_TO_CANCEL

    async def _cancel(self) -> BatchEvent:
        if self._remote_live():
            while not self.resource.up:
                await self.wait()
            assert self.blah_id is not None
            error: str | None = None
            try:
                fields = await self.resource.call("BLAH_JOB_CANCEL", self.blah_id)
            except (*_NO_ANSWER, LocalGahpError) as err:
                error = str(err)
            else:
                message = fields[1] if len(fields) > 1 else ""
                if fields[:1] != ("0",) and not _ALREADY_GONE.search(message):
                    error = message or "BLAH_JOB_CANCEL failed"
            if error is not None:
                self.cancel_failures += 1
                self.last_error = error
                self.resource.request_ping()
                await self.set_wait_reason(
                    f"cancelling batch job {self.blah_id} failed at "
                    f"{format_time(self.clock.time())}: {error}; trying again"
                )
                await self.pause(self.config.backoff(self.cancel_failures))
                return _E.CANCEL_FAILED
            self.remote_gone = True
            self.cancel_failures = 0
        self.resource.release(self)
        return _E.CANCELLED_REMOVED if self.status is JobStatus.REMOVED else _E.CANCELLED

    async def _clear(self) -> BatchEvent:
        await self._clear_submit(SUBMIT_ATTRS if self.grid_id is not None else ())
        self.grid_id = None
        self.remote = None
        self.remote_state = None
        self.remote_gone = self._fresh = False
        self.unknown_polls = self.submit_failures = self.lookup_failures = 0
        return _E.RESUBMIT if self.status is JobStatus.IDLE else _E.CLEARED

    async def abandon(self) -> None:
        """The job left the queue behind our back (condor_rm -forcex): cancel, best effort."""
        if self._remote_live() and self.blah_id is not None and self.resource.up:
            try:
                await self.resource.call("BLAH_JOB_CANCEL", self.blah_id)
            except (*_NO_ANSWER, LocalGahpError) as err:
                log.warning("job %s: could not cancel %s: %s", self.job_id, self.blah_id, err)


_RUNNING = frozenset({JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT})


def _gahp(name: BatchResourceName, services: Services) -> tuple[str, Sequence[str]]:
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
