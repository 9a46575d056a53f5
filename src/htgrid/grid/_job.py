"""A grid job: its task (`_task`) with the actions every type takes the same way.

The shared actions (`_init`, `_unsubmitted`, `save_key`, `_submitted`, `_done_save`,
`_hold`, `_cancel`, `_clear`, and `abandon`) and steps (a submit's back-off and
refusal, a call retried until it works, the wait after a lost answer) answer with the
events every type's Enum names alike (READY, WANT_SUBMIT, SAVED, SUBMIT_RETRY,
SUBMIT_REFUSED, STATUS, EXITED, REQUEUED, POLICY_HELD, CANCEL_NEEDED, NOTHING_TO_CANCEL,
CANCEL_FAILED, CANCELLED, CANCELLED_REMOVED, RESUBMIT, CLEARED, LOCAL_HELD,
LOCAL_REMOVED). A state's action is the method named after it (`JobTask.actions`), these
or the type's own, and a type fills in the hooks that say what is its own (`_new_key`,
`_on_remote_status`, `_remote_live`, `_cancel_remote`...).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from htgrid.classad import ClassAd
from htgrid.gahp import GahpRequestRefused, LocalGahpError
from htgrid.grid._errors import ANSWER_LOST, GahpUnavailable
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._task import E, JobTask, S, Services
from htgrid.grid._values import format_time
from htgrid.queue import ExitOutcome, HoldReasonCode, InvalidTransition, JobId, JobStatus

if TYPE_CHECKING:
    from htgrid.grid._resource import Resource

__all__ = ["SUBMIT_ATTRS", "GridJob", "Words"]

log = logging.getLogger("htgrid.grid")

_T = TypeVar("_T")

#: What every type's submit saves, and CLEAR undefines.
SUBMIT_ATTRS = ("GridJobId", "GridJobStatus", "GridJobSubmitTime")
#: The job's status once the queue took its exit.
_AFTER_EXIT = {ExitOutcome.HELD: JobStatus.HELD, ExitOutcome.REQUEUED: JobStatus.IDLE}
#: The event an exit's outcome gives.
_OUTCOME_EVENTS = {ExitOutcome.HELD: "POLICY_HELD", ExitOutcome.REQUEUED: "REQUEUED"}


@dataclass(frozen=True, slots=True)
class Words:
    """How a type's GridWaitReason names its work."""

    #: "submit attempt 2 failed ...", "create attempt ...".
    submit: str = "submit"
    #: "submits to R are paused ...", "creates on R ...".
    submits_to: str = "submits to"
    #: "R takes at most 1000 submitted jobs at once", "... VMs at once".
    slots: str = "submitted jobs"


class GridJob(JobTask[S, E]):
    """One grid job: its task, the shared actions, and the hooks its type fills in."""

    #: How the type's GridWaitReason names its work.
    words: Words = Words()

    def __init__(
        self, job_id: JobId, ad: ClassAd, resource: Resource[Any, Any], services: Services
    ) -> None:
        super().__init__(job_id, ad, resource, services)
        #: The last failure's text (for logs and the debugger).
        self.last_error: str | None = None
        #: Failed submits (the last one held), and failed cancels, in a row.
        self.submit_failures = 0
        self.cancel_failures = 0
        #: A status answer came that SUBMITTED has not acted on yet.
        self._fresh = False
        #: A submission found without its answer was in flight when something died: its
        #: lookup waits `lost_submit_grace` first (a submit a dead GAHP left running lands).
        self._grace_due = True
        #: When the last submit request was sent (monotonic), for the resource's count of
        #: failures (one outage's failures in flight count once); None: not known.
        self._submit_sent: float | None = None

    # ---- the shared actions --------------------------------------------------------------------

    async def _init(self) -> E:
        """INIT: wait for the resource's first ping, then log where it stands (025 or 026)."""
        while self.resource.unknown:
            await self.wait()
        await self.sync_resource()
        return self._event("READY")

    async def _unsubmitted(self) -> E:
        """UNSUBMITTED: wait for a submit slot (the resource's limit), first come first served."""
        since: str | None = None
        while True:
            stop = await self._until_submittable()
            if stop is not None:
                self.resource.release(self)
                return stop
            if self.resource.try_acquire(self):
                return self._event("WANT_SUBMIT")
            since = since or format_time(self.clock.time())
            _, limit, _ = self.resource.slots()
            await self.set_wait_reason(
                f"waiting for a submit slot since {since}: {self.resource.name} takes at "
                f"most {limit} {self.words.slots} at once"
            )
            await self.wait()

    async def save_key(self) -> E:
        """SAVE_TAG and its kin (a type names its state's action after it: `_save_tag =
        GridJob.save_key`): this submission's idempotency key (`_new_key`) committed to
        the job ad, on disk, before anything is sent: a lost answer is looked up by it."""
        attrs = {**self._new_key(), "Managed": "External", **self.clear_wait_attrs()}
        await self.io.update(self.job_id, attrs, durable=True)
        return self._event("SAVED")

    async def _submitted(self) -> E:
        """SUBMITTED: act on each status answer the resource's poll hands over."""
        while (stop := self._stopped()) is None:
            if self._fresh:
                self._fresh = False
                return await self._on_remote_status() or self._event("STATUS")
            await self.wait()
        return stop

    async def _done_save(self) -> E:
        """DONE_SAVE: the remote part ended: the job's exit into the queue, whose OnExit
        policy may complete, requeue or hold it."""
        while (stop := self._stopped()) is None:
            end = await self._remote_end()
            if not isinstance(end, tuple):
                return end
            code, by_signal = end
            outcome = await self._exited(code, by_signal=by_signal)
            if outcome is not None:
                return self._event(_OUTCOME_EVENTS.get(outcome, "EXITED"))
        return stop

    async def _hold(self) -> E:
        """HOLD: the job held here with its reason; then what lives remotely is cancelled."""
        await self._hold_here()
        return self._event("CANCEL_NEEDED" if self._remote_live() else "NOTHING_TO_CANCEL")

    async def _cancel(self) -> E:
        """CANCEL: the remote part ended before the job may go, tried until it works."""
        if self._remote_live():
            await self.until_resource_up()
            error = await self._cancel_remote()
            if error is not None:
                self.cancel_failures += 1
                await self._try_again(self._remote_name(), error, self.cancel_failures)
                return self._event("CANCEL_FAILED")
            self.cancel_failures = 0
        self.resource.release(self)
        return self._cancelled()

    async def _clear(self) -> E:
        """CLEAR: the submission forgotten (its attributes undefined, durably, and the slot
        released); the job submits again if it is idle, else it is let go."""
        self.resource.release(self)
        attrs = self.clear_wait_attrs()
        for name in self._submit_attrs():
            attrs[name] = UNDEFINED
        if attrs:
            await self.io.update(self.job_id, attrs, durable=True)
        self.submit_failures = self.cancel_failures = 0
        self._fresh = False
        await self._forget()
        return self._event("RESUBMIT" if self.status is JobStatus.IDLE else "CLEARED")

    async def abandon(self) -> None:
        """The job left the queue behind our back (condor_rm -forcex): its remote part is
        cancelled, best effort."""
        if self._remote_live() and self.resource.up:
            error = await self._cancel_remote()
            if error is not None:
                log.warning("job %s: %s failed: %s", self.job_id, self._remote_name(), error)

    # ---- the shared steps ----------------------------------------------------------------------

    async def _until_submittable(self) -> E | None:
        """Wait for the resource to be up and its submits not paused; a stop event if any."""
        self._submit_sent = None  # a new attempt: not sent yet
        await self.check_proxy(wait=True)  # an expired proxy holds the job: nothing is sent
        while (stop := self._stopped()) is None:
            if not self.resource.up:
                await self.wait()
                continue
            pause = self.resource.submit_pause()
            if pause <= 0:
                return None
            await self._paused(pause)
        return stop

    async def _turn_to_submit(self) -> E | None:
        """SUBMIT's wait (`_until_submittable`), then the job holds its submit slot; the
        event instead if the job was held or removed meanwhile."""
        stop = await self._until_submittable()
        if stop is None:
            self.resource.hold_slot(self)
        return stop

    def _not_found(self, *, hold_slot: bool = False) -> E:
        """A lookup of a lost submission found nothing: the job's stop if it was held or
        removed meanwhile, else NOT_FOUND (the submit goes again; `hold_slot`: in the slot
        the job keeps)."""
        stop = self._stopped()
        if stop is not None:
            return stop
        if hold_slot:
            self.resource.hold_slot(self)
        return self._event("NOT_FOUND")

    async def _paused(self, pause: float) -> None:
        """Wait out the resource's pause after failed submits, GridWaitReason saying so."""
        await self.set_wait_reason(
            f"{self.words.submits_to} {self.resource.name} are paused until "
            f"{format_time(self.clock.time() + pause)} after {self.resource.failures} "
            f"failed {self.words.submit}s in a row"
        )
        await self.wait(pause)

    async def _send_submit(
        self, request: Awaitable[_T], lost: E, *, subcode: int = 0, what: str | None = None
    ) -> _T | E:
        """A submit's GAHP request: its result, or the event instead: `lost` when its answer
        was lost (it may have happened: the key will say), a refusal when the GAHP does not
        know the command, a retry (or a refusal, too often) when it was never sent."""
        self._submit_sent = self.clock.monotonic()
        try:
            return await request
        except ANSWER_LOST as err:
            self.last_error = str(err)
            self._grace_due = True
            return lost
        except LocalGahpError as err:
            return self._submit_refused(str(err), subcode)
        except (GahpRequestRefused, GahpUnavailable) as err:
            error = str(err)
            transient = self._unsent_transient(error)
            return await self._submit_failed(error, transient=transient, subcode=subcode, what=what)

    async def _submit_failed(
        self, error: str, *, transient: bool, subcode: int = 0, what: str | None = None
    ) -> E:
        """A failed submit, counted by the resource too: SUBMIT_RETRY after the back-off
        (waited here) when it may work later; SUBMIT_REFUSED once it cannot, or too often."""
        self.last_error = error
        sent, self._submit_sent = self._submit_sent, None
        self.resource.submit_failed(transient=transient, sent_at=sent)
        self.submit_failures += 1
        if not transient or self.submit_failures >= self.config.max_submit_attempts:
            return self._submit_refused(error, subcode)
        attempt = f"{what or self.words.submit} attempt {self.submit_failures}"
        await self._retry_later(attempt, error, self.submit_failures)
        return self._event("SUBMIT_RETRY")

    def _submit_refused(self, error: str, subcode: int = 0) -> E:
        """The submit cannot work: its slot released, HOLD told why (`_refusal`)."""
        self.last_error = error
        self.resource.release(self)
        self._will_hold(*self._refusal(error, subcode))
        return self._event("SUBMIT_REFUSED")

    async def _retry_later(
        self, what: str, error: str, failures: int, stop: Callable[[], E | None] | None = None
    ) -> None:
        """GridWaitReason says `what` failed and when it is tried again; wait until then,
        or until `stop()` (the job held or removed) says otherwise."""
        delay = self.config.backoff(failures)
        now = self.clock.time()
        await self.set_wait_reason(
            f"{what} failed at {format_time(now)}: {error}; trying again at "
            f"{format_time(now + delay)}"
        )
        end = self.clock.monotonic() + delay
        while (stop or self._stopped)() is None and (left := end - self.clock.monotonic()) > 0:
            await self.wait(left)

    async def _try_again(self, what: str, error: str, failures: int) -> None:
        """A call that has to work in the end failed: said in GridWaitReason, the resource
        pinged, and the back-off waited out before the state's action runs again."""
        self.last_error = error
        self.resource.request_ping()
        await self.set_wait_reason(
            f"{what} failed at {format_time(self.clock.time())}: {error}; trying again"
        )
        await self.pause(self.config.backoff(failures))

    async def _lost_submit_grace(self) -> None:
        """Before looking up a submission whose answer was lost: wait `lost_submit_grace`
        (once), for a submit a dead GAHP server left on its way to land first."""
        if self._grace_due:
            self._grace_due = False
            await self.pause(self.config.lost_submit_grace)

    def _heard(self) -> None:
        """A status answer was stored for SUBMITTED: its age restarts (029/030), the task wakes."""
        self.remote_status_seen()
        self._fresh = True
        self.wake()

    async def _mirror_run(
        self, *, running: bool, idle: bool = False, attrs: Mapping[str, Any] | None = None
    ) -> bool:
        """001 when the remote job runs (`running`) and the local one is idle; 004 when it
        went back to idle (`idle`) and the local one runs. `attrs` (what the remote status
        changed: GridJobStatus...) go in the same transaction, as HTCondor's gridmanager
        commits them with the status, else on their own: the queue never shows the remote
        job's new state beside the local one's old. False if the job was held or removed
        here meanwhile (its status read again)."""
        changes: Mapping[str, Any] = attrs or {}
        try:
            if idle and self.status is JobStatus.RUNNING:
                await self.io.evicted(self.job_id, changes)
                self.status = JobStatus.IDLE
            elif running and self.status is JobStatus.IDLE:
                await self.io.started(self.job_id, changes)
                self.status = JobStatus.RUNNING
            else:
                await self.io.update(self.job_id, changes)
        except InvalidTransition:
            # The transaction that refused the move wrote none of them.
            await self.io.update(self.job_id, changes)
            await self._refresh_status()  # held or removed meanwhile: the loop sees it
            return False
        return True

    async def _exited(self, code: int, *, by_signal: bool) -> ExitOutcome | None:
        """The job's exit into the queue (001 first if it never ran), its slot released;
        None if it was held or removed meanwhile (its status read again)."""
        try:
            if self.status is JobStatus.IDLE:
                await self.io.started(self.job_id)
                self.status = JobStatus.RUNNING
            outcome = await self.io.exited(self.job_id, code, by_signal=by_signal)
        except InvalidTransition:
            await self._refresh_status()
            return None
        self.resource.release(self)
        self.status = _AFTER_EXIT.get(outcome, JobStatus.COMPLETED)
        self._left_queue = outcome is ExitOutcome.COMPLETED
        return outcome

    # ---- the hooks of the shared actions -------------------------------------------------------

    def _new_key(self) -> dict[str, Any]:
        """SAVE_TAG's attributes: a fresh idempotency key for this submission, kept."""
        raise NotImplementedError

    async def _on_remote_status(self) -> E | None:
        """SUBMITTED's look at the status answer stored; an event if the job moves on."""
        raise NotImplementedError

    async def _remote_end(self) -> tuple[int, bool] | E:
        """DONE_SAVE's exit code and whether it is a signal, or the event that holds the job
        instead. A VM has no exit code: its end is the job's normal end."""
        return 0, False

    def _remote_live(self) -> bool:
        """Whether something remote lives on that a hold or removal must cancel."""
        return False

    async def _cancel_remote(self) -> str | None:
        """Cancel the remote part once; None if done (or nothing was left), else why not."""
        return None

    def _remote_name(self) -> str:
        """What cancelling means, for the wait reason and the log: "cancelling batch job X"."""
        return "cancelling the remote job"

    def _cancelled(self) -> E:
        """CANCEL's event once the remote part is gone."""
        return self._event("CANCELLED_REMOVED" if self.status is JobStatus.REMOVED else "CANCELLED")

    def _submit_attrs(self) -> Iterable[str]:
        """What CLEAR undefines: the attributes the submission wrote (none if none)."""
        return ()

    async def _forget(self) -> None:
        """CLEAR's part of the type: what it knew of the submission, forgotten."""

    def _unsent_transient(self, error: str) -> bool:
        """Whether a submit the GAHP refused or could not take (no server) may work later."""
        return True

    def _refusal(self, error: str, subcode: int) -> tuple[str, int, int]:
        """HOLD's reason, code and subcode for a refused submit."""
        return f"Attempts to submit failed: {error}", HoldReasonCode.Unspecified, subcode
