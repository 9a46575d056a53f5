"""What an ec2 job knows of its instance, and how it follows the status polls.

`Ec2Instance` is the ec2 job's half that the resource's EC2_VM_STATUS_ALL feeds: the
GridJobId (client token, instance id), the instance's last state, and the SUBMITTED
state's handling of each answer. The instance's state is mirrored into GridJobStatus,
its public DNS name into EC2RemoteVirtualMachineName and its state reason into
EC2StatusReasonCode. `running` makes the job Running (001); an instance that ends on its
own (terminated, shutting-down, stopped) is the job's normal end; one ended by the
provider (a Server.* state reason) is held with that reason. The actions of the other
states are `Ec2Job`'s (`_job`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp.commands import Spec, ec2
from htgrid.grid._errors import NO_ANSWER
from htgrid.grid._job import GridJob, Words
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._task import Services
from htgrid.grid._values import as_str
from htgrid.grid.ec2._args import post_start_requests
from htgrid.grid.ec2._ids import Ec2JobId
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.grid.ec2._table import TABLE, Ec2Event, Ec2State
from htgrid.queue import HoldReasonCode, JobId

__all__ = ["REASONS", "Ec2Instance"]

log = logging.getLogger("htgrid.grid")

_S = Ec2State
_E = Ec2Event
# States after which the instance has run: the job is Running.
_HAS_RUN = frozenset({"running", "shutting-down", "terminated", "stopping", "stopped", "shutoff"})
_ENDED = frozenset({"terminated", "shutting-down"})
_STOPPED = frozenset({"stopped", "shutoff"})
# State reasons of an instance's normal end (ec2job.cpp's GM_PROBE_JOB).
_NORMAL_END = frozenset({"Client.InstanceInitiatedShutdown", "Client.UserInitiatedShutdown"})
#: What the provider's state reason codes mean, for HoldReason.
REASONS: Mapping[str, str] = {
    "Server.SpotInstanceTermination": "EC2 reclaimed the spot instance (price or capacity)",
    "Server.InsufficientInstanceCapacity": "EC2 had not enough capacity for the instance",
    "Server.InternalError": "an internal EC2 error ended the instance",
    "Server.ScheduledStop": "EC2 stopped the instance for scheduled maintenance",
    "Client.VolumeLimitExceeded": "the account's EBS volume limit was reached",
    "Client.InternalError": "a client error ended the instance",
    "Client.InvalidSnapshot.NotFound": "a snapshot the instance needs does not exist",
}


class Ec2Instance(GridJob[Ec2State, Ec2Event]):
    """An ec2 job's instance as the polls show it; `Ec2Job` adds the other actions."""

    table = TABLE
    words = Words("start", slots="instances")

    def __init__(self, job_id: JobId, ad: ClassAd, resource: Ec2Resource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.ec2 = resource
        self.grid_id = Ec2JobId.parse(ad.get("GridJobId"))
        self.access = as_str(ad.get("EC2AccessKeyId")) or ""
        self.secret = as_str(ad.get("EC2SecretAccessKey")) or ""
        self.keypair = as_str(ad.get("EC2KeyPair")) or None
        self.keypair_file = as_str(ad.get("EC2KeyPairFile")) or None
        self.remote_state = as_str(ad.get("GridJobStatus")) or None
        self.public_dns = as_str(ad.get("EC2RemoteVirtualMachineName"))
        self.reason_code = as_str(ad.get("EC2StatusReasonCode")) or None
        # An instance some poll has shown: its disappearance is its end, not a lost start.
        self.seen = self.remote_state is not None
        self._status: ec2.InstanceStatus | None = None
        self._asked = 0.0
        self._completion = False  # the VM stopped itself: terminate it, then complete
        self._attached = self.remote_state == "running"
        self._since = 0.0  # answers to polls asked before this say nothing new
        self.unknown_polls = 0

    # ---- what the resource reads --------------------------------------------------------

    @property
    def credentials(self) -> tuple[str, str]:
        return self.access, self.secret

    @property
    def client_token(self) -> str | None:
        return None if self.grid_id is None else self.grid_id.client_token

    @property
    def instance_id(self) -> str | None:
        return None if self.grid_id is None else self.grid_id.instance_id

    def wants_status(self) -> bool:
        return self.grid_id is not None and self.state in (_S.SUBMITTED, _S.SEEK, _S.CANCEL_CHECK)

    def remote_status(self, status: ec2.InstanceStatus | None, asked: float) -> None:
        """A status poll's answer for this job (None: its instance is not there)."""
        self._status, self._asked = status, asked
        self._heard()

    # ---- helpers --------------------------------------------------------------------------

    @property
    def _target(self) -> ec2.Target:
        return ec2.Target(self.ec2.service_url, self.access, self.secret)

    async def _call(self, command: Spec, *args: str) -> ec2.Done | ec2.Failure:
        """A request's answer; a failure, E_GAHP, when the GAHP gave none."""
        try:
            fields = await self.resource.call(command, *args)
        except NO_ANSWER as err:
            return ec2.Failure("E_GAHP", str(err))
        return ec2.Done.of(fields, command)

    def _instance_live(self) -> bool:
        return self.instance_id is not None and self.remote_state not in ("terminated", None)

    async def _fresh_status(self, stop: Callable[[], Ec2Event | None]) -> Ec2Event | None:
        """Wait for a poll asked after `_since`; `stop()`'s event if it gives one first."""
        while True:
            event = stop()
            if event is not None:
                return event
            if self._fresh and self._asked >= self._since:
                self._fresh = False
                return None
            self._fresh = False
            await self.wait()

    # ---- SUBMITTED: the status polls' answers ---------------------------------------------

    async def _on_remote_status(self) -> Ec2Event | None:
        status = self._status
        if status is None:
            if self.seen:
                # Gone from the listing after it was seen: purged, i.e. terminated.
                return _E.VM_ENDED
            self.unknown_polls += 1
            if self.unknown_polls < self.config.max_unknown_polls:
                return None
            self._will_hold(
                f"EC2 has not listed instance {self.instance_id} for {self.unknown_polls} "
                "status polls; it may have been lost",
                HoldReasonCode.EC2InstancePotentiallyLostError,
                0,
            )
            return _E.VM_LOST
        self.seen = True
        self.unknown_polls = 0
        if not await self._mirror_run(
            running=status.state in _HAS_RUN, attrs=self._changes(status)
        ):
            return None
        if status.state == "running" and not self._attached:
            self._attached = True
            await self._post_start()
        if status.state in _ENDED:
            return self._ended(status.reason)
        if status.state in _STOPPED:
            self._completion = True
            return _E.VM_STOPPED
        return None

    async def _mirror(self, status: ec2.InstanceStatus) -> None:
        """`_changes` written."""
        await self.io.update(self.job_id, self._changes(status))

    def _changes(self, status: ec2.InstanceStatus) -> dict[str, Any]:
        """GridJobStatus, EC2RemoteVirtualMachineName, EC2StatusReasonCode: what changed
        (to write with the 001 that a first run makes, if it does)."""
        attrs: dict[str, Any] = {}
        if status.state != self.remote_state:
            self.remote_state = status.state
            attrs["GridJobStatus"] = status.state
            attrs["LastRemoteStatusUpdate"] = int(self._asked)
        if status.public_dns and status.public_dns != self.public_dns:
            self.public_dns = status.public_dns
            attrs["EC2RemoteVirtualMachineName"] = status.public_dns
        if status.reason != self.reason_code:
            self.reason_code = status.reason
            attrs["EC2StatusReasonCode"] = status.reason if status.reason else UNDEFINED
        return attrs

    def _ended(self, reason: str | None) -> Ec2Event:
        if reason is None or reason in _NORMAL_END:
            return _E.VM_ENDED
        meaning = REASONS.get(reason)
        if meaning is None:
            text = f"Unrecognized reason for instance termination: {reason}. Treating as abnormal."
            subcode = 14
        else:
            text = f"Abnormal instance termination: {reason} ({meaning})."
            subcode = 13
        self._will_hold(text, HoldReasonCode.EC2ServerError, subcode)
        return _E.VM_FAILED

    async def _post_start(self) -> None:
        """Tags, elastic IP, volumes once the instance runs; failures are only logged."""
        assert self.instance_id is not None
        for command, args in post_start_requests(self.ad, self._target, self.instance_id):
            answer = await self._call(command, *args)
            if isinstance(answer, ec2.Failure):
                log.warning("job %s: %s failed: %s", self.job_id, command.name, answer.message)
