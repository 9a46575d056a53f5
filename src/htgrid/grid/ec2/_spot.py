"""An ec2 job's spot instance request: the SPOT_* states of `_table` (ec2job.cpp's GM_SPOT_*).

A job with EC2SpotPrice asks for its instance with EC2_VM_START_SPOT once its client token
is committed to GridJobId; the token is the request's launch group (RequestSpotInstances
has no ClientToken), so a grid manager that died before it saved the request id finds the
request by token in the next EC2_VM_STATUS_ALL_SPOT (SPOT_CHECK) instead of making a second
one. The request id is kept in EC2SpotRequestID (GridJobId keeps `ec2 <url> <token>`, then
gains the instance id). The resource's spot poll (one request per keys and poll) says when
the request is fulfilled: its instance is adopted (SAVE_INSTANCE) and handled as any other.
A request that fails, or waits on a code that says it will not be fulfilled as asked
(price-too-low, capacity-not-available, bad-parameters, ...), holds the job with that
code; an open request is cancelled (EC2_VM_STOP_SPOT) on rm, hold or such a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from htgrid.classad import ClassAd
from htgrid.gahp.commands import Spec, ec2
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._task import Services
from htgrid.grid._values import as_str, format_time
from htgrid.grid.ec2._args import spot_start
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.grid.ec2._status import Ec2Instance
from htgrid.grid.ec2._table import Ec2Event, Ec2State
from htgrid.queue import HoldReasonCode, JobId, JobStatus

__all__ = ["SPOT_CODES", "Ec2Spot"]

_S = Ec2State
_E = Ec2Event
# The request may have been made although no answer came: look the token up.
_MAYBE_SENT = frozenset({ec2.E_CURL_IO, ec2.NEED_CHECK_VM_START})
#: Builds a start from the job ad, the target, the client token and the keypair.
_Start = Callable[[ClassAd, ec2.Target, str, str | None], ec2.VmStart | ec2.SpotStart]
_SPOT_STATES = frozenset({_S.SPOT_CHECK, _S.SPOT_SUBMITTED, _S.SPOT_CANCEL_CHECK})
_ENDED = frozenset({"cancelled", "closed", "failed"})
#: Spot request status codes that end the job's wait (EC2's spot request status codes).
SPOT_CODES: Mapping[str, str] = {
    "price-too-low": "the maximum price is below the current spot price",
    "capacity-not-available": "EC2 has no spare capacity for the request",
    "capacity-oversubscribed": "EC2's spot capacity is taken by other requests",
    "bad-parameters": "the request's parameters are not valid",
    "system-error": "EC2 failed to handle the request",
    "constraint-not-fulfillable": "the request's constraints cannot be met",
    "launch-group-constraint": "the request's launch group cannot be fulfilled together",
    "az-group-constraint": "the availability zone group cannot be fulfilled together",
    "placement-group-constraint": "the placement group cannot take the instance",
    "schedule-expired": "the request expired before it was fulfilled",
    "canceled-before-fulfillment": "the request was cancelled before it was fulfilled",
}
# Codes that are the user's to fix; the others are the provider's.
_USER_CODES = frozenset({"price-too-low", "bad-parameters", "canceled-before-fulfillment"})
_GONE = ("InvalidSpotInstanceRequestID.NotFound", "InvalidSpotInstanceRequestID.Malformed")


class Ec2Spot(Ec2Instance):
    """An ec2 job's spot request; `Ec2Job` adds the on-demand and instance actions."""

    def __init__(self, job_id: JobId, ad: ClassAd, resource: Ec2Resource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.spot_price = as_str(ad.get("EC2SpotPrice")) or None
        self.spot_request = as_str(ad.get("EC2SpotRequestID")) or None
        self._spot: ec2.SpotStatus | None = None
        self._spot_asked = 0.0
        self._spot_fresh = False
        self._spot_since = 0.0  # answers to spot polls asked before this say nothing new
        self._spot_misses = 0
        self._spot_cancelled = False  # EC2_VM_STOP_SPOT went out for this request

    # ---- what the resource reads --------------------------------------------------------

    @property
    def spot_request_id(self) -> str | None:
        return self.spot_request

    def wants_spot_status(self) -> bool:
        return self.grid_id is not None and self.state in _SPOT_STATES

    def wants_status(self) -> bool:
        return super().wants_status() or self.wants_spot_status()

    def spot_status(self, status: ec2.SpotStatus | None, asked: float) -> None:
        """A spot poll's answer for this job (None: no such request listed)."""
        self.remote_status_seen()
        self._spot, self._spot_asked, self._spot_fresh = status, asked, True
        self.wake()

    # ---- helpers shared with Ec2Job -------------------------------------------------------

    def _refusal(self, error: str, subcode: int) -> tuple[str, int, int]:
        return error, HoldReasonCode.EC2ConnectionProblem, subcode

    async def _send_start(
        self, command: Spec, build: _Start, subcode: int, what: str
    ) -> str | Ec2Event:
        """EC2_VM_START or EC2_VM_START_SPOT (`build` makes it from the job ad) with the
        committed client token, once the resource is up: the id it answered (an
        instance's or a spot request's), or the event instead: the job's stop (held or
        removed before anything was sent; a retry follows only a definite refusal),
        START_LOST if it may have happened unanswered (the token says), else a retry or a
        refusal (held with EC2ConnectionProblem, `subcode`)."""
        stop = self._stopped()
        if stop is not None:
            return stop
        await self.until_resource_up()
        assert self.grid_id is not None  # SAVE_TOKEN or START set it
        start = build(self.ad, self._target, self.grid_id.client_token, self.keypair)
        self.resource.hold_slot(self)
        request = self.resource.call(command, *start.args())
        fields = await self._send_submit(request, _E.START_LOST, subcode=subcode, what=what)
        if isinstance(fields, Ec2Event):
            return fields
        failure = ec2.Done.of(fields, command, values=1)
        if isinstance(failure, ec2.Done):
            self.resource.submit_succeeded()
            return failure.values[0]
        if failure.code in _MAYBE_SENT:
            # The request may have reached EC2: the token says whether it did.
            self.last_error = failure.message
            self.resource.request_ping()
            self._grace_due = False
            return _E.START_LOST
        return await self._submit_failed(
            failure.message, transient=failure.transient, subcode=subcode, what=what
        )

    def _unsent_transient(self, error: str) -> bool:
        # Read as the GAHP's own errors are: transient only if it says so.
        return ec2.Failure("E_GAHP", error).transient

    def _ready(self) -> Ec2Event:
        """Where a job goes once its keypair (if any) exists: a start or a spot request."""
        return _E.SPOT_READY if self.spot_price else _E.KEYPAIR_READY

    def _request_open(self) -> bool:
        """A spot request that may still start an instance: cancel it before forgetting it."""
        if self.spot_request is None or self.instance_id is not None or self._spot_cancelled:
            return False
        return self._spot is None or self._spot.state not in _ENDED

    async def _spot_answer(self, heed_stop: bool) -> tuple[bool, ec2.SpotStatus | None]:
        """The first spot poll asked after `_spot_since` (False first if held or removed)."""
        while True:
            if heed_stop and self._stopped() is not None:
                return False, None
            if self._spot_fresh and self._spot_asked >= self._spot_since:
                self._spot_fresh = False
                return True, self._spot
            self._spot_fresh = False
            await self.wait()

    async def _save_request(self, request_id: str | None) -> None:
        self.spot_request = request_id
        self._spot_cancelled = False
        value = UNDEFINED if request_id is None else request_id
        await self.io.update(self.job_id, {"EC2SpotRequestID": value})

    def _adopt(self, instance_id: str) -> Ec2Event:
        """The request was fulfilled: the job's instance is the request's."""
        assert self.grid_id is not None
        self.grid_id = dataclasses.replace(self.grid_id, instance_id=instance_id)
        self._status, self._fresh, self.seen = None, False, False
        self.remote_state = "pending"  # as for an on-demand start: no poll has said otherwise
        return _E.FULFILLED

    # ---- the actions ----------------------------------------------------------------------

    async def _spot_start(self) -> Ec2Event:
        # ec2job.cpp holds a refused spot request with EC2ConnectionProblem, subcode 17.
        answer = await self._send_start(ec2.VM_START_SPOT, spot_start, 17, "spot request")
        if not isinstance(answer, str):
            return answer
        await self._save_request(answer)
        return _E.REQUESTED

    async def _spot_check(self) -> Ec2Event:
        """A token without a request id: is there a request with that launch group?"""
        assert self.grid_id is not None
        await self._lost_submit_grace()
        await self.set_wait_reason(
            f"looking for a spot request with launch group {self.grid_id.client_token} "
            "in the next spot status poll"
        )
        # Two polls, as ec2job.cpp: a request just made may not be listed at once.
        for _ in range(2):
            self._spot_since = self.clock.time()
            _, found = await self._spot_answer(False)
            if found is not None:
                await self._save_request(found.request_id)
                if found.instance_id is not None:
                    return self._adopt(found.instance_id)
                return _E.FOUND
        return self._not_found()

    async def _spot_submitted(self) -> Ec2Event:
        assert self.spot_request is not None
        self._spot_since = self.clock.time()
        since = format_time(self._spot_since)
        while True:
            answered, status = await self._spot_answer(True)
            if not answered:
                stop = self._stopped()
                assert stop is not None
                return stop
            if status is None:
                self._spot_misses += 1
                if self._spot_misses < max(2, self.config.max_unknown_polls):
                    continue
                self._will_hold(
                    f"Spot request {self.spot_request} is not listed by EC2 any more; "
                    "an instance may still be running.",
                    HoldReasonCode.EC2InstancePotentiallyLostError,
                    19,
                )
                return _E.REQUEST_LOST
            self._spot_misses = 0
            if status.instance_id is not None:
                return self._adopt(status.instance_id)
            if status.state not in _ENDED and status.code not in SPOT_CODES:
                await self.set_wait_reason(
                    f"spot request {status.request_id} {status.state} "
                    f"({status.code or 'no status code'}) since {since}"
                )
                continue
            self._hold_request(status)
            return _E.REQUEST_FAILED

    def _hold_request(self, status: ec2.SpotStatus) -> None:
        code = status.code or "no status code"
        meaning = SPOT_CODES.get(code)
        text = f"Spot instance request {status.request_id} {status.state}: {code}"
        text += f" ({meaning})." if meaning else "."
        if status.state == "cancelled":
            # Not by us: ec2job.cpp's "You, or somebody like you, cancelled this request."
            self._will_hold(text, HoldReasonCode.EC2UserError, 20)
        elif status.code in _USER_CODES:
            self._will_hold(text, HoldReasonCode.EC2UserError, 21)
        else:
            self._will_hold(text, HoldReasonCode.EC2ServerError, 21)

    async def _spot_cancel(self) -> Ec2Event:
        assert self.spot_request is not None  # every way here has a request
        await self.until_resource_up()
        await self._stop_request()
        if self._spot_cancelled:
            self._spot_since = self.clock.time()
            return _E.STOP_SENT
        self.cancel_failures += 1
        what = f"cancelling spot request {self.spot_request}"
        await self._try_again(what, self.last_error or "", self.cancel_failures)
        return _E.STOP_FAILED

    async def _stop_request(self) -> None:
        """EC2_VM_STOP_SPOT; `_spot_cancelled` says whether the request is done for."""
        assert self.spot_request is not None
        failure = await self._call(ec2.VM_STOP_SPOT, *self._target.args(), self.spot_request)
        if isinstance(failure, ec2.Done):
            self._spot_cancelled = True
            return
        if any(code in failure.message for code in _GONE):
            self._spot_cancelled = True  # already purged
            return
        self.last_error = failure.message
        self.resource.request_ping()

    async def _spot_cancel_check(self) -> Ec2Event:
        _, status = await self._spot_answer(False)
        if status is not None and status.instance_id is not None:
            # The request won the race: terminate its instance the ordinary way.
            return self._adopt(status.instance_id)
        if status is not None and status.state not in _ENDED:
            self._spot_cancelled = False
            self.cancel_failures += 1
            await self.pause(self.config.backoff(self.cancel_failures))
            return _E.STILL_THERE
        self.cancel_failures = 0
        await self._save_request(None)
        self.resource.release(self)
        return _E.CANCELLED_REMOVED if self.status is JobStatus.REMOVED else _E.CANCELLED
