"""The ec2 grid type's jobs: the actions of the states in `_table` (ec2job.cpp).

A VM job is one EC2 instance. Two-phase start, so a kill -9 at any moment never starts a
second instance for a job:

1. SAVE_TOKEN commits GridJobId = `ec2 <url> <client-token>` (a fresh UUID), with the
   name of the keypair to create when the job gives ec2_keypair_file.
2. START_VM sends EC2_VM_START with that client token.
3. SAVE_INSTANCE commits GridJobId = `ec2 <url> <client-token> <instance-id>` and
   EC2InstanceName, then logs 027.

A job found with only a token (the grid manager or the GAHP died between 1 and 3, or a
start's answer was lost) goes to SEEK: the resource's next EC2_VM_STATUS_ALL, which
carries client tokens, says whether an instance holds it. Only if none does is the start
sent again, with the same token, which the GAHP also checks before starting.

A job with EC2SpotPrice asks for a spot instance between 1 and 3 instead
(EC2_VM_START_SPOT, the request followed until fulfilled): see `_spot.Ec2Spot`.

The instance's state, once started, is followed by `_status.Ec2Instance` (the
SUBMITTED state and what each status poll says). rm and hold terminate the instance
(EC2_VM_STOP) first, and cancel the spot request it came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from htgrid.gahp.commands import ec2
from htgrid.grid._gridids import OneWordResource
from htgrid.grid._gridtype import GridType, fixed_gahp
from htgrid.grid._job import SUBMIT_ATTRS, GridJob
from htgrid.grid.ec2._args import keypair_name, vm_start
from htgrid.grid.ec2._ids import Ec2JobId, active_lines, parse_resource, remote_of
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.grid.ec2._spot import Ec2Spot
from htgrid.grid.ec2._status import REASONS
from htgrid.grid.ec2._table import Ec2Event, Ec2State
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["DEFAULT_EC2_GAHP", "EC2", "REASONS", "Ec2Job", "ec2_grid_type"]

log = logging.getLogger("htgrid.grid")

#: `htgrid gahp ec2`, started as HTCondor starts EC2_GAHP.
DEFAULT_EC2_GAHP = (sys.executable, "-m", "htgrid.cli", "gahp", "ec2")
USE_INSTANCE_ROLE = "FROM INSTANCE"

_S = Ec2State
_E = Ec2Event
_GONE = re.compile(r"InvalidInstanceID\.NotFound|InstanceNotFound")
_KEYPAIR_EXISTS = re.compile(r"InvalidKeyPair\.Duplicate|KeyPairExists|Keypair already exists")


class Ec2Job(Ec2Spot):
    """One job of grid type ec2."""

    #: SAVE_TOKEN: the submission's key committed before anything is sent.
    _save_token = GridJob.save_key

    # ---- the hooks of the shared actions ----------------------------------------------------

    async def _until_submittable(self) -> Ec2Event | None:
        # A start waits for the resource only: ec2 starts do not pause after failures.
        while (stop := self._stopped()) is None and not self.resource.up:
            await self.wait()
        return stop

    def _new_key(self) -> dict[str, Any]:
        self.grid_id = Ec2JobId(self.ec2.service_url, str(uuid.uuid4()))
        attrs: dict[str, Any] = {"GridJobId": str(self.grid_id)}
        if self.ec2.server_type:
            attrs["EC2ServerType"] = self.ec2.server_type
        if self.keypair_file and not self.keypair:
            # Named before it is made, so a restart or a removal can find and destroy it.
            fallback = f"{self.job_id.cluster}_{self.job_id.proc}_{self.grid_id.client_token}"
            self.keypair = keypair_name(self.ad, fallback)
            attrs["EC2KeyPair"] = self.keypair
        return attrs

    def _remote_live(self) -> bool:
        return self._instance_live()

    async def _cancel_remote(self) -> str | None:
        """EC2_VM_STOP (terminate); an instance already purged counts as stopped."""
        assert self.instance_id is not None
        answer = await self._call(ec2.VM_STOP, *self._target.args(), self.instance_id)
        if isinstance(answer, ec2.Done) or _GONE.search(answer.message):
            return None
        return answer.message

    def _remote_name(self) -> str:
        return f"terminating instance {self.instance_id}"

    def _submit_attrs(self) -> Iterable[str]:
        names = [*SUBMIT_ATTRS, "EC2InstanceName"] if self.grid_id is not None else []
        if self.spot_request is not None:
            names.append("EC2SpotRequestID")
        return names

    async def _forget(self) -> None:
        self.grid_id = self.spot_request = None
        self._status, self.seen, self._attached = None, False, False
        self._spot, self._spot_fresh, self._spot_cancelled = None, False, False
        self.remote_state = None
        self.unknown_polls = 0

    # ---- the actions ----------------------------------------------------------------------

    async def _init(self) -> Ec2Event:
        event = await super()._init()
        # ec2job.cpp's constructor checks: without key files nothing can be asked.
        for subcode, path, what in ((1, self.access, "Public"), (2, self.secret, "Private")):
            if not path:
                self._will_hold(
                    f"{what} key file not defined", HoldReasonCode.EC2UserError, subcode
                )
                return _E.BAD_JOB
            if path != USE_INSTANCE_ROLE and not os.access(path, os.R_OK):
                self._will_hold(
                    f"{what} key file {path} cannot be read", HoldReasonCode.EC2UserError, subcode
                )
                return _E.BAD_JOB
        return event

    async def _start(self) -> Ec2Event:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.grid_id is None:
            return _E.NO_ID
        self.resource.hold_slot(self)
        if self.grid_id.instance_id is None and self.spot_price:
            return _E.HAS_REQUEST if self.spot_request else _E.HAS_SPOT_TOKEN
        if self.grid_id.instance_id is None:
            return _E.HAS_TOKEN
        return _E.HAS_INSTANCE

    async def _create_keypair(self) -> Ec2Event:
        if not (self.keypair_file and self.keypair):
            return self._ready()
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            await self.until_resource_up()
            args = (*self._target.args(), self.keypair, self.keypair_file)
            failure = await self._call(ec2.VM_CREATE_KEYPAIR, *args)
            if isinstance(failure, ec2.Done):
                return self._ready()
            if _KEYPAIR_EXISTS.search(failure.message):
                return self._ready()  # made by an earlier attempt
            self.submit_failures += 1
            if not failure.transient or self.submit_failures >= self.config.max_submit_attempts:
                self._will_hold(
                    f"Creating keypair {self.keypair} failed: {failure.message}",
                    HoldReasonCode.EC2ConnectionProblem,
                    11,
                )
                return _E.KEYPAIR_FAILED
            self.resource.request_ping()
            await self._retry_later(f"creating keypair {self.keypair}", failure.message, 1)

    async def _start_vm(self) -> Ec2Event:
        # ec2job.cpp holds a refused start with EC2ConnectionProblem, subcode 12.
        answer = await self._send_start(ec2.VM_START, vm_start, 12, "start")
        if not isinstance(answer, str):
            return answer
        assert self.grid_id is not None
        self.grid_id = dataclasses.replace(self.grid_id, instance_id=answer)
        self._status, self._fresh = None, False
        self.remote_state = "pending"  # as ec2job.cpp: a poll has not said otherwise
        return _E.STARTED

    async def _seek(self) -> Ec2Event:
        assert self.grid_id is not None  # only jobs with a token come here
        await self._lost_submit_grace()
        self._since = self.clock.time()
        await self.set_wait_reason(
            f"looking for an instance with client token {self.grid_id.client_token} "
            "in the next status poll"
        )
        await self._fresh_status(lambda: None)
        found = self._status
        if found is not None:
            self.grid_id = dataclasses.replace(self.grid_id, instance_id=found.instance_id)
            self._fresh = True  # SUBMITTED takes this answer as its first status
            self._asked = max(self._asked, self._since)
            return _E.FOUND
        return self._not_found()

    async def _save_instance(self) -> Ec2Event:
        assert self.grid_id is not None and self.grid_id.instance_id is not None
        now = self.clock.time()
        attrs: dict[str, Any] = {
            "GridJobId": str(self.grid_id),
            "EC2InstanceName": self.grid_id.instance_id,
            "GridJobSubmitTime": int(now),
        }
        if self.remote_state is not None:
            attrs |= {"GridJobStatus": self.remote_state, "LastRemoteStatusUpdate": int(now)}
        await self.io.update(self.job_id, attrs | self.clear_wait_attrs())
        self.submit_failures = self.unknown_polls = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _hold(self) -> Ec2Event:
        event = await super()._hold()
        if event is _E.NOTHING_TO_CANCEL and self._request_open():
            return _E.SPOT_CANCEL_NEEDED
        return event

    async def _cancel(self) -> Ec2Event:
        assert self.instance_id is not None  # every way here has an instance
        await self.until_resource_up()
        if self.remote_state != "cancelling":
            self.remote_state = "cancelling"  # ec2job.cpp's pseudo-state: stop sent
            await self.io.update(self.job_id, {"GridJobStatus": "cancelling"})
        if self.spot_request is not None and not self._spot_cancelled:
            # A one-time request is spent once fulfilled; cancelling it still makes sure.
            await self._stop_request()
        error = await self._cancel_remote()
        self._since = self.clock.time()
        if error is None:
            return _E.STOP_SENT  # an instance purged already is not listed by the next poll
        self.cancel_failures += 1
        await self._try_again(self._remote_name(), error, self.cancel_failures)
        return _E.STOP_FAILED

    async def _cancel_check(self) -> Ec2Event:
        await self._fresh_status(lambda: None)
        status = self._status
        trusted = self.ec2.server_type == "Amazon"
        gone = status is None or status.state == "terminated"
        if not gone and status is not None and status.state == "shutting-down" and trusted:
            gone = True
        if not gone:
            self.cancel_failures += 1
            await self.pause(self.config.backoff(self.cancel_failures))
            return _E.STILL_THERE
        self.cancel_failures = 0
        self.remote_state = "terminated"
        if status is not None:
            await self._mirror(status)
        if self._completion:
            self._completion = False
            return _E.CANCELLED_DONE
        self.resource.release(self)
        return self._cancelled()

    async def abandon(self) -> None:
        """The job left the queue behind our back: end its request and instance, best effort."""
        if self.spot_request is not None and not self._spot_cancelled and self.resource.up:
            await self._stop_request()
        await super().abandon()
        await self._destroy_keypair()

    async def _finishing(self) -> None:
        """DELETE's first step: destroy the keypair made for a job that is done with it."""
        if self.status in (JobStatus.REMOVED, JobStatus.COMPLETED) or self.grid_id is None:
            await self._destroy_keypair()

    async def _destroy_keypair(self) -> None:
        """EC2_VM_DESTROY_KEYPAIR and the private key file, for a keypair this job made."""
        if not (self.keypair and self.keypair_file) or not self.resource.up:
            return
        answer = await self._call(ec2.VM_DESTROY_KEYPAIR, *self._target.args(), self.keypair)
        if isinstance(answer, ec2.Failure):
            log.warning("job %s: destroying keypair failed: %s", self.job_id, answer.message)
            return
        if self.keypair_file != os.devnull:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.remove, self.keypair_file)


def ec2_grid_type(gahp_argv: Sequence[str] = DEFAULT_EC2_GAHP) -> GridType[OneWordResource]:
    """The ec2 grid type, its GAHP server started with `gahp_argv`."""
    return GridType(
        name="ec2",
        parse_resource=parse_resource,
        # One EC2 GAHP server for every service URL and key (it keeps a client per pair).
        gahp=fixed_gahp("ec2", gahp_argv),
        resource=Ec2Resource,
        new_job=Ec2Job,
        remote=remote_of,
        active_lines=active_lines,
    )


EC2 = ec2_grid_type()
