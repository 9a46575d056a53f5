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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from htgrid.gahp import GahpRequestRefused, GahpServerExited, GahpTimeout, LocalGahpError
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gridtype import GridType, fixed_gahp
from htgrid.grid._job import SUBMIT_ATTRS
from htgrid.grid._values import format_time
from htgrid.grid.ec2._args import keypair_name, vm_start_args
from htgrid.grid.ec2._ids import Ec2JobId, Ec2ResourceName, active_lines, remote_of
from htgrid.grid.ec2._resource import Ec2Resource, GahpFailure
from htgrid.grid.ec2._spot import Ec2Spot
from htgrid.grid.ec2._status import NO_ANSWER, REASONS
from htgrid.grid.ec2._table import TERMINAL, Ec2Event, Ec2State, next_state
from htgrid.queue import ExitOutcome, HoldReasonCode, InvalidTransition, JobStatus

__all__ = ["DEFAULT_EC2_GAHP", "EC2", "REASONS", "Ec2Job", "ec2_grid_type"]

log = logging.getLogger("htgrid.grid")

#: `htgrid gahp ec2`, started as HTCondor starts EC2_GAHP.
DEFAULT_EC2_GAHP = (sys.executable, "-m", "htgrid.cli", "gahp", "ec2")
USE_INSTANCE_ROLE = "FROM INSTANCE"

_S = Ec2State
_E = Ec2Event
_LOST_GAHP = (GahpServerExited, GahpTimeout)
# The start may have happened although no answer came: look the token up.
_MAYBE_STARTED = frozenset({"E_CURL_IO", "NEED_CHECK_VM_START"})
_GONE = re.compile(r"InvalidInstanceID\.NotFound|InstanceNotFound")
_KEYPAIR_EXISTS = re.compile(r"InvalidKeyPair\.Duplicate|KeyPairExists|Keypair already exists")


class Ec2Job(Ec2Spot):
    """One job of grid type ec2."""

    terminal = TERMINAL

    def actions(self) -> Mapping[Ec2State, Callable[[], Awaitable[Ec2Event]]]:
        return {
            _S.INIT: self._init,
            _S.START: self._start,
            _S.UNSUBMITTED: self._unsubmitted,
            _S.SAVE_TOKEN: self._save_token,
            _S.CREATE_KEYPAIR: self._create_keypair,
            _S.START_VM: self._start_vm,
            _S.SEEK: self._seek,
            _S.SPOT_START: self._spot_start,
            _S.SPOT_CHECK: self._spot_check,
            _S.SPOT_SUBMITTED: self._spot_submitted,
            _S.SPOT_CANCEL: self._spot_cancel,
            _S.SPOT_CANCEL_CHECK: self._spot_cancel_check,
            _S.SAVE_INSTANCE: self._save_instance,
            _S.SUBMITTED: self._submitted,
            _S.DONE_SAVE: self._done_save,
            _S.HOLD: self._hold_job,
            _S.CANCEL: self._cancel,
            _S.CANCEL_CHECK: self._cancel_check,
            _S.CLEAR: self._clear,
        }

    def next_state(self, state: Ec2State, event: Ec2Event) -> Ec2State:
        return next_state(state, event)

    # ---- the actions ----------------------------------------------------------------------

    async def _init(self) -> Ec2Event:
        while self.resource.unknown:
            await self.wait()
        await self.sync_resource()
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
        return _E.READY

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

    async def _unsubmitted(self) -> Ec2Event:
        since: str | None = None
        while True:
            stop = self._stopped()
            if stop is not None:
                self.resource.release(self)
                return stop
            if not self.resource.up:
                await self.wait()
                continue
            if self.resource.try_acquire(self):
                return _E.WANT_START
            since = since or format_time(self.clock.time())
            _, limit, _ = self.resource.slots()
            await self.set_wait_reason(
                f"waiting for a submit slot since {since}: {self.resource.name} takes at "
                f"most {limit} instances at once"
            )
            await self.wait()

    async def _save_token(self) -> Ec2Event:
        self.grid_id = Ec2JobId(self.ec2.service_url, str(uuid.uuid4()))
        attrs: dict[str, Any] = {"GridJobId": str(self.grid_id), "Managed": "External"}
        if self.ec2.server_type:
            attrs["EC2ServerType"] = self.ec2.server_type
        if self.keypair_file and not self.keypair:
            # Named before it is made, so a restart or a removal can find and destroy it.
            fallback = f"{self.job_id.cluster}_{self.job_id.proc}_{self.grid_id.client_token}"
            self.keypair = keypair_name(self.ad, fallback)
            attrs["EC2KeyPair"] = self.keypair
        # The idempotency key: on disk before the start can happen.
        await self.io.update(self.job_id, attrs | self.clear_wait_attrs(), durable=True)
        return _E.SAVED

    async def _create_keypair(self) -> Ec2Event:
        if not (self.keypair_file and self.keypair):
            return self._ready()
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            await self._until_up()
            args = [*self._target, self.keypair, self.keypair_file]
            try:
                fields = await self.resource.call("EC2_VM_CREATE_KEYPAIR", *args)
            except (*NO_ANSWER, LocalGahpError) as err:
                failure = GahpFailure("E_GAHP", str(err))
            else:
                if fields[:1] == ("0",):
                    return self._ready()
                failure = GahpFailure.of(fields, "EC2_VM_CREATE_KEYPAIR")
            if _KEYPAIR_EXISTS.search(failure.message):
                return self._ready()  # made by an earlier attempt
            self.start_failures += 1
            if not failure.transient or self.start_failures >= self.config.max_submit_attempts:
                self._will_hold(
                    f"Creating keypair {self.keypair} failed: {failure.message}",
                    HoldReasonCode.EC2ConnectionProblem,
                    11,
                )
                return _E.KEYPAIR_FAILED
            self.resource.request_ping()
            await self._retry_later(f"creating keypair {self.keypair}", failure.message, 1)

    async def _start_vm(self) -> Ec2Event:
        stop = self._stopped()
        if stop is not None:
            return stop
        await self._until_up()
        assert self.grid_id is not None  # SAVE_TOKEN or START set it
        self.resource.hold_slot(self)
        args = vm_start_args(self.ad, self._target, self.grid_id.client_token, self.keypair)
        try:
            fields = await self.resource.call("EC2_VM_START", *args)
        except _LOST_GAHP as err:
            self.last_error = str(err)
            self._grace_due = True
            return _E.START_LOST
        except LocalGahpError as err:
            return self._start_refused(GahpFailure("E_GAHP", str(err)))
        except (GahpRequestRefused, GahpUnavailable) as err:
            # Never sent: the same as a transient failure.
            return await self._start_failed(GahpFailure("E_GAHP", str(err)))
        if fields[:1] == ("0",) and len(fields) > 1:
            self.grid_id = dataclasses.replace(self.grid_id, instance_id=fields[1])
            self.resource.submit_succeeded()
            self._status, self._fresh = None, False
            self.remote_state = "pending"  # as ec2job.cpp: a poll has not said otherwise
            return _E.STARTED
        failure = GahpFailure.of(fields, "EC2_VM_START")
        if failure.code in _MAYBE_STARTED:
            # The request may have reached EC2: the token says whether it did.
            self.last_error = failure.message
            self.resource.request_ping()
            self._grace_due = False
            return _E.START_LOST
        return await self._start_failed(failure)

    async def _start_failed(self, failure: GahpFailure) -> Ec2Event:
        self.last_error = failure.message
        self.resource.submit_failed(transient=failure.transient)
        self.start_failures += 1
        if not failure.transient or self.start_failures >= self.config.max_submit_attempts:
            return self._start_refused(failure)
        await self._retry_later(
            f"start attempt {self.start_failures}", failure.message, self.start_failures
        )
        return _E.START_RETRY

    def _start_refused(self, failure: GahpFailure) -> Ec2Event:
        self.resource.release(self)
        # ec2job.cpp holds every refused start with EC2ConnectionProblem, subcode 12.
        self._will_hold(failure.message, HoldReasonCode.EC2ConnectionProblem, 12)
        return _E.START_REFUSED

    async def _seek(self) -> Ec2Event:
        assert self.grid_id is not None  # only jobs with a token come here
        if self._grace_due:
            # A start a dead GAHP server left running lands first.
            self._grace_due = False
            await self.pause(self.config.lost_submit_grace)
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
        stop = self._stopped()
        if stop is not None:
            return stop
        return _E.NOT_FOUND

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
        self.start_failures = self.unknown_polls = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _done_save(self) -> Ec2Event:
        while True:
            stop = self._stopped()
            if stop is not None:
                return stop
            try:
                if self.status is JobStatus.IDLE:
                    await self.io.started(self.job_id)
                    self.status = JobStatus.RUNNING
                # A VM has no exit code: its end is the job's normal end.
                outcome = await self.io.exited(self.job_id, 0, by_signal=False)
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

    async def _hold_job(self) -> Ec2Event:
        await self._hold_here()
        if self._instance_live():
            return _E.CANCEL_NEEDED
        return _E.SPOT_CANCEL_NEEDED if self._request_open() else _E.NOTHING_TO_CANCEL

    async def _cancel(self) -> Ec2Event:
        assert self.instance_id is not None  # every way here has an instance
        await self._until_up()
        if self.remote_state != "cancelling":
            self.remote_state = "cancelling"  # ec2job.cpp's pseudo-state: stop sent
            await self.io.update(self.job_id, {"GridJobStatus": "cancelling"})
        if self.spot_request is not None and not self._spot_cancelled:
            # A one-time request is spent once fulfilled; cancelling it still makes sure.
            await self._stop_request()
        try:
            fields = await self.resource.call("EC2_VM_STOP", *self._target, self.instance_id)
        except (*NO_ANSWER, LocalGahpError) as err:
            fields = ("1", "E_GAHP", str(err))
        self._since = self.clock.time()
        if fields[:1] == ("0",):
            return _E.STOP_SENT
        failure = GahpFailure.of(fields, "EC2_VM_STOP")
        if _GONE.search(failure.message):
            return _E.STOP_SENT  # already purged: the next poll will not list it
        self.cancel_failures += 1
        self.last_error = failure.message
        self.resource.request_ping()
        await self.set_wait_reason(
            f"terminating instance {self.instance_id} failed at "
            f"{format_time(self.clock.time())}: {failure.message}; trying again"
        )
        await self.pause(self.config.backoff(self.cancel_failures))
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
        return _E.CANCELLED_REMOVED if self.status is JobStatus.REMOVED else _E.CANCELLED

    async def _clear(self) -> Ec2Event:
        names = [*SUBMIT_ATTRS, "EC2InstanceName"] if self.grid_id is not None else []
        if self.spot_request is not None:
            names.append("EC2SpotRequestID")
        await self._clear_submit(names)
        self.grid_id = self.spot_request = None
        self._status, self._fresh, self.seen, self._attached = None, False, False, False
        self._spot, self._spot_fresh, self._spot_cancelled = None, False, False
        self.remote_state = None
        self.start_failures = self.cancel_failures = self.unknown_polls = 0
        return _E.RESUBMIT if self.status is JobStatus.IDLE else _E.CLEARED

    async def abandon(self) -> None:
        """The job left the queue behind our back: end its request and instance, best effort."""
        if self.spot_request is not None and not self._spot_cancelled and self.resource.up:
            await self._stop_request()
        if self._instance_live() and self.instance_id is not None and self.resource.up:
            try:
                await self.resource.call("EC2_VM_STOP", *self._target, self.instance_id)
            except (*NO_ANSWER, LocalGahpError) as err:
                log.warning("job %s: could not stop %s: %s", self.job_id, self.instance_id, err)
        await self._destroy_keypair()

    async def _finishing(self) -> None:
        """DELETE's first step: destroy the keypair made for a job that is done with it."""
        if self.status in (JobStatus.REMOVED, JobStatus.COMPLETED) or self.grid_id is None:
            await self._destroy_keypair()

    async def _destroy_keypair(self) -> None:
        """EC2_VM_DESTROY_KEYPAIR and the private key file, for a keypair this job made."""
        if not (self.keypair and self.keypair_file) or not self.resource.up:
            return
        try:
            fields = await self.resource.call("EC2_VM_DESTROY_KEYPAIR", *self._target, self.keypair)
        except (*NO_ANSWER, LocalGahpError) as err:
            fields = ("1", "E_GAHP", str(err))
        if fields[:1] != ("0",):
            failure = GahpFailure.of(fields, "EC2_VM_DESTROY_KEYPAIR")
            log.warning("job %s: destroying keypair failed: %s", self.job_id, failure.message)
            return
        if self.keypair_file != os.devnull:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.remove, self.keypair_file)


def ec2_grid_type(gahp_argv: Sequence[str] = DEFAULT_EC2_GAHP) -> GridType[Ec2ResourceName]:
    """The ec2 grid type, its GAHP server started with `gahp_argv`."""
    # One EC2 GAHP server for every service URL and key (it keeps a client per pair).
    gahp = fixed_gahp("ec2", gahp_argv)
    return GridType(
        "ec2",
        Ec2ResourceName.parse,
        gahp,
        Ec2Resource,
        Ec2Job,
        remote_of,
        active_lines=active_lines,
    )


EC2 = ec2_grid_type()
