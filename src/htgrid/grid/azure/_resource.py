"""The Azure resource (one per `azure <subscription>`), and what a job's VM is made from.

The commands' lines are `htgrid.gahp.commands.azure`'s. Status is one AZURE_VM_LIST per poll interval for all the resource's jobs (one per auth
file in use, normally one), answered by VM name: HTCondor's AzureResource::DoBatchStatus.
A job whose VM the list does not show is told so (its VM is gone).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from htgrid.classad import ClassAd
from htgrid.gahp import GahpError
from htgrid.gahp.commands import azure
from htgrid.grid._errors import GahpUnavailable, GridError
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import OneWordResource
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.grid._values import as_str
from htgrid.queue import JobId

if TYPE_CHECKING:
    from htgrid.grid.azure._job import AzureJob

__all__ = ["AzureResource", "MissingAttribute", "VmStatus", "new_vm_name", "vm_options"]

#: The job ad attributes AZURE_VM_CREATE's options come from (azurejob.cpp BuildVmParams).
VM_PARAMS = (
    ("location", "AzureLocation"),
    ("image", "AzureImage"),
    ("size", "AzureSize"),
    ("adminUsername", "AzureAdminUsername"),
    ("key", "AzureAdminKey"),
)
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?")


def new_vm_name(job_id: JobId) -> str:
    """A fresh VM name for one submission: `htgrid-<cluster>-<proc>-<48 random bits>`.

    HTCondor's `condorc<cluster>p<proc>` is the same every time so that a restarted grid
    manager can look for it; ours is found the same way, by the name GridJobId holds,
    committed before the create. The random part keeps apart two queues sharing a
    subscription, and a released job's new VM from its old one. The name also names the
    VM's resource group, NIC, IP and disks: it must be a valid Azure name.
    """
    name = f"htgrid-{job_id.cluster}-{job_id.proc}-{secrets.token_hex(6)}"
    assert _NAME.fullmatch(name)
    return name


class MissingAttribute(GridError, ValueError):
    """A job ad lacks what AZURE_VM_CREATE needs."""


def vm_options(ad: ClassAd) -> list[tuple[str, str]]:
    """AZURE_VM_CREATE's options from the job ad, as HTCondor's BuildVmParams takes them."""
    options = []
    for key, attr in VM_PARAMS:
        value = as_str(ad.get(attr))
        if not value:
            raise MissingAttribute(f"Missing attribute {attr}")
        options.append((key, value))
    return options


@dataclass(frozen=True, slots=True)
class VmStatus:
    """What one AZURE_VM_LIST said about one VM (`text` None: not listed, i.e. gone)."""

    text: str | None
    #: Which poll it came from (AzureResource.poll_seq when the list was sent).
    seq: int
    when: float

    @property
    def listed(self) -> bool:
        return self.text is not None

    @property
    def power(self) -> str | None:
        """The state the grid manager keeps: what follows the last '/' (e.g. `running`)."""
        if self.text is None:
            return None
        return self.text.rpartition("/")[2].strip().lower() or None


class AzureResource(Resource["AzureJob", OneWordResource]):
    """`azure <subscription>`: pinged with AZURE_PING, polled with AZURE_VM_LIST."""

    def __init__(self, where: OneWordResource, gahp: GahpHandle, services: Services) -> None:
        super().__init__(where, gahp, services)
        self.subscription = where.word
        #: The auth files its jobs use, in the order first seen (kept for the pings).
        self.auth_files: dict[str, None] = {}
        #: Numbers the polls: a job trusts only an answer to a list sent after it asked.
        self.poll_seq = 0

    def register(self, job: AzureJob) -> None:
        super().register(job)
        self.auth_files.setdefault(job.auth_file, None)

    def next_seq(self) -> int:
        """The number the next poll will have."""
        return self.poll_seq + 1

    async def ping(self) -> str | None:
        for auth_file in self.auth_files or {"NULL": None}:
            done = await self.ask(azure.Done.of, azure.PING, auth_file, self.subscription)
            if done.error is not None:
                return done.error
        return None

    async def poll(self, jobs: list[AzureJob]) -> None:
        self.poll_seq += 1
        seq = self.poll_seq
        by_auth: dict[str, dict[str, AzureJob]] = {}
        for job in jobs:
            if job.vm_name:
                by_auth.setdefault(job.auth_file, {})[job.vm_name.lower()] = job
        for auth_file, by_name in by_auth.items():
            await self._list(auth_file, by_name, seq)

    async def _list(self, auth_file: str, by_name: dict[str, AzureJob], seq: int) -> None:
        self.stats.status_commands += 1
        try:
            answer = await self.ask(azure.VmList.of, azure.VM_LIST, auth_file, self.subscription)
        except (GahpError, GahpUnavailable) as err:
            self.poll_failed(str(err))
            return
        if answer.error is not None:
            self.poll_failed(answer.error)
            return
        listed = answer.by_name()
        now = self.clock.time()
        for name, job in by_name.items():
            job.vm_status(VmStatus(listed.get(name), seq, now))
