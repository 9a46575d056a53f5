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

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp.commands import azure
from htgrid.grid._errors import NO_ANSWER
from htgrid.grid._gridids import OneWordResource
from htgrid.grid._gridtype import GridType, fixed_gahp
from htgrid.grid._job import SUBMIT_ATTRS, GridJob, Words
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._task import Services
from htgrid.grid._values import as_str
from htgrid.grid.azure._ids import AzureJobId, parse_resource, remote_of
from htgrid.grid.azure._resource import (
    AzureResource,
    MissingAttribute,
    VmStatus,
    new_vm_name,
    vm_options,
)
from htgrid.grid.azure._table import TABLE, AzureEvent, AzureState
from htgrid.queue import HoldReasonCode, JobId, JobStatus

__all__ = ["AZURE", "DEFAULT_AZURE_GAHP", "AzureJob", "azure_grid_type"]

#: How the grid manager starts the Azure GAHP (HTCondor's AZURE_GAHP).
DEFAULT_AZURE_GAHP: tuple[str, ...] = (sys.executable, "-m", "htgrid.cli", "gahp", "azure")

_S = AzureState
_E = AzureEvent
#: Power states (after the last '/') that end the job: the VM no longer runs it.
_ENDED = frozenset({"deallocated", "stopped"})
#: Power states in which the job counts as running (HTCondor's PROBE_JOB list, and stopping).
_RUNNING = frozenset({"running", "deallocating", "stopping"})


class AzureJob(GridJob[AzureState, AzureEvent]):
    """One job of grid type azure: one VM."""

    table = TABLE
    words = Words("create", "creates on", "VMs")

    def __init__(self, job_id: JobId, ad: ClassAd, resource: AzureResource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.azure = resource
        self._auth_file = as_str(ad.get("AzureAuthFile")) or "NULL"
        self.grid_id = AzureJobId.parse(ad.get("GridJobId"))
        #: AzureVmId: None before a create is known to have worked ("" when found by list).
        self.vm_id = as_str(ad.get("AzureVmId"))
        self.address: str | None = None
        self.power = as_str(ad.get("GridJobStatus"))
        self.remote: VmStatus | None = None
        self._min_seq = 0  # answers from polls numbered below this are stale
        self._created_now = False
        self._ended = False

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
        self.remote = status
        self._heard()

    # ---- the table ---------------------------------------------------------------------------

    #: SAVE_NAME: the submission's key committed before anything is sent.
    _save_name = GridJob.save_key

    # ---- the hooks of the shared actions -----------------------------------------------------

    def _account(self) -> tuple[str, str]:
        return azure.account(self._auth_file, self.azure.subscription)

    def _new_key(self) -> dict[str, Any]:
        self.grid_id = AzureJobId(new_vm_name(self.job_id))
        return {"GridJobId": str(self.grid_id)}

    def _refusal(self, error: str, subcode: int) -> tuple[str, int, int]:
        # HTCondor's hold reason is the GAHP's error string itself.
        return error, HoldReasonCode.Unspecified, 0

    def _remote_live(self) -> bool:
        return self.vm_id is not None

    async def _cancel_remote(self) -> str | None:
        """AZURE_VM_DELETE: the VM, its NIC, IP, disks and group; "not found" is success."""
        assert self.grid_id is not None
        delete = (*self._account(), self.grid_id.name)
        try:
            done = await self.resource.ask(azure.Done.of, azure.VM_DELETE, *delete)
        except NO_ANSWER as err:
            return str(err)
        if done.error is not None and "could not be found" not in done.error:
            return done.error
        self.vm_id = None
        return None

    def _remote_name(self) -> str:
        # A VM left behind costs money: CANCEL tries again, however long it takes.
        return f"deleting VM {self.vm_name}"

    def _cancelled(self) -> AzureEvent:
        if self._ended and self.status not in (JobStatus.HELD, JobStatus.REMOVED):
            return _E.CANCELLED_DONE  # the VM ended by itself: the job completes
        return super()._cancelled()

    def _submit_attrs(self) -> Iterable[str]:
        return (*SUBMIT_ATTRS, "AzureVmId", "VmIpAddress") if self.grid_id is not None else ()

    async def _forget(self) -> None:
        self.grid_id = None
        self.vm_id = self.address = self.power = None
        self.remote = None
        self._ended = False
        if self.status is JobStatus.RUNNING:
            await self.io.evicted(self.job_id)
            self.status = JobStatus.IDLE

    # ---- the actions -------------------------------------------------------------------------

    async def _start(self) -> AzureEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.grid_id is None:
            return _E.NO_NAME
        self.resource.hold_slot(self)
        if self.vm_id is None:
            return _E.HAS_NAME
        return _E.HAS_VM

    async def _create(self) -> AzureEvent:
        if (stop := await self._turn_to_submit()) is not None:
            return stop
        assert self.grid_id is not None  # SAVE_NAME or START set it
        try:
            args = azure.vm_create_args(self.grid_id.name, vm_options(self.ad))
        except MissingAttribute as err:
            return self._submit_refused(str(err))
        create = self.resource.ask(azure.VmCreated.of, azure.VM_CREATE, *self._account(), *args)
        # An unanswered create may have reached Azure: the next list says (CREATE_UNSURE).
        result = await self._send_submit(create, _E.CREATE_UNSURE)
        if isinstance(result, azure.VmCreated):
            if result.error is None:
                self.vm_id, self.address = result.vm_id, result.address
                self.resource.submit_succeeded()
                self._created_now = True
                return _E.CREATE_OK
            transient = azure.is_transient(result.error)
            result = await self._submit_failed(result.error, transient=transient)
        if result is _E.SUBMIT_RETRY:
            # A failure that may clear is looked up after the back-off (CHECK): the create
            # may have half-happened. The GAHP answered: nothing of it is still in flight.
            self._grace_due = False
        return result

    async def _check(self) -> AzureEvent:
        assert self.grid_id is not None  # only named jobs come here
        await self._lost_submit_grace()
        await self.until_resource_up()
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
        return self._not_found(hold_slot=True)

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
        self.submit_failures = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _on_remote_status(self) -> AzureEvent | None:
        status = self.remote
        assert status is not None  # an answer came with the news
        # A VM the list no longer shows is gone: HTCondor counts it deallocated.
        power = status.power if status.listed else "deallocated"
        update: dict[str, Any] = {}
        if power != self.power:
            update = {
                "GridJobStatus": power or UNDEFINED,
                "LastRemoteStatusUpdate": int(status.when),
            }
        if power in _ENDED or power == "failed":
            await self.io.update(self.job_id, update)
            self.power = power
            if power == "failed":
                self._will_hold(f"Azure could not provision VM {self.vm_name}: {status.text}")
                return _E.VM_FAILED
            self._ended = True
            return _E.VM_ENDED
        await self._mirror_run(running=power in _RUNNING, attrs=update)
        self.power = power
        return None


def azure_grid_type(gahp_argv: Sequence[str] = DEFAULT_AZURE_GAHP) -> GridType[OneWordResource]:
    """The azure grid type, its GAHP server started with `gahp_argv` (one for all)."""
    return GridType(
        name="azure",
        parse_resource=parse_resource,
        gahp=fixed_gahp("azure", gahp_argv),
        resource=AzureResource,
        new_job=AzureJob,
        remote=remote_of,
    )


AZURE = azure_grid_type()
