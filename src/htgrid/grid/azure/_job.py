"""The azure grid type's jobs: one VM per job, the actions of the states in `_table`.

Two-phase create, so that a kill -9 at any moment neither loses a VM nor makes two:

1. SAVE_NAME commits GridJobId = `azure <vm name>` (and Managed = "External"); the name
   is this submission's own (`new_vm_name`): a create sent twice could only update it.
2. CREATE sends AZURE_VM_CREATE name= location= image= size= adminUsername= key=.
3. CREATE_SAVE commits AzureVmId and VmIpAddress, then logs 027.

A job found with a name but no AzureVmId (something died between 1 and 3), or whose
create got no answer or a transient error, goes to CHECK: after `lost_submit_grace` (a
create a dead GAHP server left running lands first) it waits for an AZURE_VM_LIST sent
after that moment. The VM listed: it is the job's. Not listed: it is created.

The VM's power state is mirrored into GridJobStatus (`running`, `deallocated`...);
`running` makes the job Running (001). A VM stopped, deallocated or gone ends the job:
the VM and what the GAHP made for it are deleted, then the job completes (005).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpRequestRefused, GahpServerExited, GahpTimeout, LocalGahpError, unnull
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gridtype import GridType, fixed_gahp
from htgrid.grid._job import SUBMIT_ATTRS, GridJob, Services
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._values import as_str, format_time
from htgrid.grid.azure._ids import AzureJobId, AzureResourceName, remote_of
from htgrid.grid.azure._resource import (
    AzureResource,
    MissingAttribute,
    VmStatus,
    build_vm_params,
    is_transient,
    new_vm_name,
)
from htgrid.grid.azure._table import INITIAL, TERMINAL, AzureEvent, AzureState, next_state
from htgrid.queue import ExitOutcome, HoldReasonCode, InvalidTransition, JobId, JobStatus

__all__ = ["AZURE", "DEFAULT_AZURE_GAHP", "AzureJob", "azure_grid_type"]

log = logging.getLogger("htgrid.grid")

#: How the grid manager starts the Azure GAHP (HTCondor's AZURE_GAHP).
DEFAULT_AZURE_GAHP: tuple[str, ...] = (sys.executable, "-m", "htgrid.cli", "gahp", "azure")

_S = AzureState
_E = AzureEvent
_LOST_GAHP = (GahpServerExited, GahpTimeout)
_NO_ANSWER = (GahpServerExited, GahpTimeout, GahpRequestRefused, GahpUnavailable)
#: Power states (after the last '/') that end the job: the VM no longer runs it.
_ENDED = frozenset({"deallocated", "stopped"})
#: Power states in which the job counts as running (HTCondor's PROBE_JOB list, and stopping).
_RUNNING = frozenset({"running", "deallocating", "stopping"})


class AzureJob(GridJob[AzureState, AzureEvent]):
    """One job of grid type azure: one VM."""

    terminal = TERMINAL
    events = AzureEvent

    def __init__(self, job_id: JobId, ad: ClassAd, resource: AzureResource, services: Services):
        super().__init__(job_id, ad, resource, services, INITIAL)
        self.azure = resource
        self._auth_file = as_str(ad.get("AzureAuthFile")) or "NULL"
        self.grid_id = AzureJobId.parse(ad.get("GridJobId"))
        #: AzureVmId: None before a create is known to have worked ("" when found by list).
        self.vm_id = as_str(ad.get("AzureVmId"))
        self.address: str | None = None
        self.power = as_str(ad.get("GridJobStatus"))
        self.remote: VmStatus | None = None
        self.last_error: str | None = None
        self.create_failures = 0
        self.delete_failures = 0
        self._fresh = False
        self._min_seq = 0  # answers from polls numbered below this are stale
        self._created_now = False
        self._ended = False
        self._grace_due = True  # a name without a VM id: a create may still be landing

    # ---- what the resource reads -------------------------------------------------------------

    @property
    def vm_name(self) -> str | None:
        return None if self.grid_id is None else self.grid_id.name

    @property
    def auth_file(self) -> str:
        return self._auth_file

    def wants_status(self) -> bool:
        return self.state in (_S.SUBMITTED, _S.CHECK) and self.grid_id is not None

    def vm_status(self, status: VmStatus) -> None:
        """An AZURE_VM_LIST's answer about this job's VM."""
        if status.seq < self._min_seq:
            return  # sent before the create returned, or before CHECK began: stale
        self.remote_status_seen()
        self.remote = status
        self._fresh = True
        self.wake()

    # ---- the table ---------------------------------------------------------------------------

    def actions(self) -> Mapping[AzureState, Callable[[], Awaitable[AzureEvent]]]:
        return {
            _S.INIT: self._init,
            _S.START: self._start,
            _S.UNSUBMITTED: self._unsubmitted,
            _S.SAVE_NAME: self._save_name,
            _S.CREATE: self._create,
            _S.CHECK: self._check,
            _S.CREATE_SAVE: self._create_save,
            _S.SUBMITTED: self._submitted,
            _S.CANCEL: self._cancel,
            _S.DONE_SAVE: self._done_save,
            _S.HOLD: self._hold_job,
            _S.CLEAR: self._clear,
        }

    def next_state(self, state: AzureState, event: AzureEvent) -> AzureState:
        return next_state(state, event)

    # ---- helpers -----------------------------------------------------------------------------

    def _will_hold(self, reason: str, code: int = 0, subcode: int = 0) -> None:
        self._hold = (reason, code, subcode)

    async def _call(self, command: str, *args: str) -> tuple[str, ...]:
        return await self.resource.call(command, self._auth_file, self.azure.subscription, *args)

    async def _until_submittable(self) -> AzureEvent | None:
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
                f"creates on {self.resource.name} are paused until {until} after "
                f"{self.resource.failures} failed creates in a row"
            )
            await self.wait(pause)

    # ---- the actions -------------------------------------------------------------------------

    async def _init(self) -> AzureEvent:
        while self.resource.unknown:
            await self.wait()
        await self.sync_resource()
        return _E.READY

    async def _start(self) -> AzureEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.grid_id is None:
            return _E.NO_NAME
        self.resource.hold_slot(self)
        if self.vm_id is None:
            return _E.HAS_NAME
        return _E.HAS_VM

    async def _unsubmitted(self) -> AzureEvent:
        since: str | None = None
        while True:
            stop = await self._until_submittable()
            if stop is not None:
                self.resource.release(self)
                return stop
            if self.resource.try_acquire(self):
                return _E.WANT_CREATE
            since = since or format_time(self.clock.time())
            _, limit, _ = self.resource.slots()
            await self.set_wait_reason(
                f"waiting for a submit slot since {since}: {self.resource.name} takes at "
                f"most {limit} VMs at once"
            )
            await self.wait()

    async def _save_name(self) -> AzureEvent:
        self.grid_id = AzureJobId(new_vm_name(self.job_id))
        attrs = {"GridJobId": str(self.grid_id), "Managed": "External", **self.clear_wait_attrs()}
        # The idempotency key: on disk before the create can happen.
        await self.io.update(self.job_id, attrs, durable=True)
        return _E.SAVED

    async def _create(self) -> AzureEvent:
        stop = await self._until_submittable()
        if stop is not None:
            return stop
        assert self.grid_id is not None  # SAVE_NAME or START set it
        self.resource.hold_slot(self)
        try:
            params = build_vm_params(self.ad, self.grid_id.name)
        except MissingAttribute as err:
            return self._create_refused(str(err))
        try:
            fields = await self._call("AZURE_VM_CREATE", *params)
        except _LOST_GAHP as err:
            # The create may or may not have reached Azure: the next list says.
            self.last_error = str(err)
            self._grace_due = True
            return _E.CREATE_UNSURE
        except LocalGahpError as err:
            return self._create_refused(str(err))
        except (GahpRequestRefused, GahpUnavailable) as err:
            return await self._create_failed(str(err))
        if fields[:1] == ("NULL",) and len(fields) >= 2:
            self.vm_id = fields[1]
            self.address = unnull(fields[2]) if len(fields) > 2 else None
            self.resource.submit_succeeded()
            self._created_now = True
            return _E.CREATE_OK
        error = fields[0] if fields and fields[0] != "NULL" else "AZURE_VM_CREATE gave no VM id"
        if is_transient(error):
            return await self._create_failed(error)
        self.resource.submit_failed(transient=False)
        return self._create_refused(error)

    async def _create_failed(self, error: str) -> AzureEvent:
        """A failure that may clear: look the name up (the create may have half-happened)."""
        self.last_error = error
        self.resource.submit_failed(transient=True)
        self.create_failures += 1
        if self.create_failures >= self.config.max_submit_attempts:
            return self._create_refused(error)
        delay = self.config.backoff(self.create_failures)
        await self.set_wait_reason(
            f"create attempt {self.create_failures} failed at {format_time(self.clock.time())}: "
            f"{error}; trying again at {format_time(self.clock.time() + delay)}"
        )
        end = self.clock.monotonic() + delay
        while self._stopped() is None and (left := end - self.clock.monotonic()) > 0:
            await self.wait(left)
        self._grace_due = False  # the GAHP answered: nothing of it is still in flight
        return _E.CREATE_UNSURE

    def _create_refused(self, error: str) -> AzureEvent:
        # HTCondor's hold reason is the GAHP's error string itself.
        self.last_error = error
        self.resource.release(self)
        self._will_hold(error, HoldReasonCode.Unspecified)
        return _E.CREATE_REFUSED

    async def _check(self) -> AzureEvent:
        assert self.grid_id is not None  # only named jobs come here
        if self._grace_due:
            self._grace_due = False
            await self.pause(self.config.lost_submit_grace)
        while not self.resource.up:
            await self.wait()
        # Only a list sent from now on can tell whether the earlier create landed.
        self._min_seq = self.azure.next_seq()
        self._fresh = False
        while not self._fresh:
            await self.wait()
        self._fresh = False
        assert self.remote is not None
        if self.remote.listed:
            self.vm_id = self.vm_id or ""  # HTCondor's mark: created, id unknown
            self._fresh = True  # SUBMITTED acts on this very answer
            return _E.FOUND
        stop = self._stopped()
        if stop is not None:
            return stop
        self.resource.hold_slot(self)
        return _E.NOT_FOUND

    async def _create_save(self) -> AzureEvent:
        now = self.clock.time()
        attrs: dict[str, Any] = {
            "AzureVmId": self.vm_id or "",
            "GridJobSubmitTime": int(now),
        }
        if self.address:
            attrs["VmIpAddress"] = self.address
        if self._created_now:
            # A list sent before the create returned may not show the VM yet.
            self._created_now = False
            self._min_seq = self.azure.next_seq()
        attrs |= self.clear_wait_attrs()
        await self.io.update(self.job_id, attrs)
        self.create_failures = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _submitted(self) -> AzureEvent:
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            if self._fresh and self.remote is not None:
                self._fresh = False
                return await self._on_status(self.remote) or _E.STATUS
            await self.wait()

    async def _on_status(self, status: VmStatus) -> AzureEvent | None:
        # A VM the list no longer shows is gone: HTCondor counts it deallocated.
        power = status.power if status.listed else "deallocated"
        if power != self.power:
            update = {
                "GridJobStatus": power or UNDEFINED,
                "LastRemoteStatusUpdate": int(status.when),
            }
            await self.io.update(self.job_id, update)
            self.power = power
        if power in _ENDED:
            self._ended = True
            return _E.VM_ENDED
        if power == "failed":
            self._will_hold(f"Azure could not provision VM {self.vm_name}: {status.text}")
            return _E.VM_FAILED
        if power in _RUNNING and self.status is JobStatus.IDLE:
            try:
                await self.io.started(self.job_id)
                self.status = JobStatus.RUNNING
            except InvalidTransition:
                await self._refresh_status()  # held or removed meanwhile: the loop sees it
        return None

    async def _cancel(self) -> AzureEvent:
        """AZURE_VM_DELETE: the VM, its NIC, IP, disks and group; "not found" is success."""
        if self.grid_id is not None:
            while not self.resource.up:
                await self.wait()
            error: str | None = None
            try:
                fields = await self._call("AZURE_VM_DELETE", self.grid_id.name)
            except (*_NO_ANSWER, LocalGahpError) as err:
                error = str(err)
            else:
                if fields[:1] != ("NULL",) and "could not be found" not in " ".join(fields):
                    error = fields[0] if fields else "AZURE_VM_DELETE failed"
            if error is not None:
                # A VM left behind costs money: try again, however long it takes.
                self.delete_failures += 1
                self.last_error = error
                self.resource.request_ping()
                await self.set_wait_reason(
                    f"deleting VM {self.grid_id.name} failed at "
                    f"{format_time(self.clock.time())}: {error}; trying again"
                )
                await self.pause(self.config.backoff(self.delete_failures))
                return _E.DELETE_FAILED
            self.delete_failures = 0
            self.vm_id = None
        self.resource.release(self)
        if self.status is JobStatus.REMOVED:
            return _E.DELETED_REMOVED
        if self._ended and self.status is not JobStatus.HELD:
            return _E.DELETED_ENDED
        return _E.DELETED

    async def _done_save(self) -> AzureEvent:
        """The VM ended (and is deleted): the job completes, exit code 0 as HTCondor's."""
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            try:
                if self.status is JobStatus.IDLE:
                    await self.io.started(self.job_id)
                    self.status = JobStatus.RUNNING
                outcome = await self.io.exited(self.job_id, 0, by_signal=False)
            except InvalidTransition:
                await self._refresh_status()
                continue
            if outcome is ExitOutcome.HELD:
                self.status = JobStatus.HELD
                return _E.POLICY_HELD
            if outcome is ExitOutcome.REQUEUED:
                self.status = JobStatus.IDLE
                return _E.REQUEUED
            self.status = JobStatus.COMPLETED
            self._left_queue = outcome is ExitOutcome.COMPLETED
            return _E.EXITED

    async def _hold_job(self) -> AzureEvent:
        await self._hold_here()
        return _E.CANCEL_NEEDED if self.vm_id is not None else _E.NOTHING_TO_CANCEL

    async def _clear(self) -> AzureEvent:
        vm_attrs = (*SUBMIT_ATTRS, "AzureVmId", "VmIpAddress")
        await self._clear_submit(vm_attrs if self.grid_id is not None else ())
        self.grid_id = None
        self.vm_id = self.address = self.power = None
        self.remote = None
        self._fresh = self._ended = False
        self.create_failures = self.delete_failures = 0
        if self.status is JobStatus.RUNNING:
            await self.io.evicted(self.job_id)
            self.status = JobStatus.IDLE
        return _E.RESUBMIT if self.status is JobStatus.IDLE else _E.CLEARED

    async def abandon(self) -> None:
        """The job left the queue behind our back (condor_rm -forcex): delete, best effort."""
        if self.grid_id is not None and self.vm_id is not None and self.resource.up:
            try:
                await self._call("AZURE_VM_DELETE", self.grid_id.name)
            except (*_NO_ANSWER, LocalGahpError) as err:
                log.warning("job %s: could not delete VM %s: %s", self.job_id, self.vm_name, err)


def azure_grid_type(gahp_argv: Sequence[str] = DEFAULT_AZURE_GAHP) -> GridType[AzureResourceName]:
    """The azure grid type, its GAHP server started with `gahp_argv` (one for all)."""
    gahp = fixed_gahp("azure", gahp_argv)
    return GridType("azure", AzureResourceName.parse, gahp, AzureResource, AzureJob, remote_of)


AZURE = azure_grid_type()
