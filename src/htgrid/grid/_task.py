"""A grid job's task: its type's state machine run to the end, and what it hears from outside.

A job is one asyncio task running its type's state machine: the action of the state it is
in returns an event, the type's transition table gives the next state. Everything that
happens to a job from outside (a status change in the queue, a status poll's answer, its
resource going down) sets a field and wakes the task; the action then looks and decides.
The actions themselves, those every type shares and its own, are `GridJob`'s (`_job`).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from htgrid.classad import ClassAd
from htgrid.client.myproxy import MyProxyError, MyProxyRefused
from htgrid.errors import HTGridError
from htgrid.gahp import Clock, first_of
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import GridError
from htgrid.grid._leftovers import LeftoverSweep
from htgrid.grid._myproxy import RETRY_AFTER, MyProxyRenewer, MyProxySettings, NoMyProxyPassword
from htgrid.grid._proxy import ProxyWatch, _utc, proxy_path
from htgrid.grid._queueio import UNDEFINED, QueueIO
from htgrid.grid._table import Table
from htgrid.grid._turns import Turns
from htgrid.grid._userlog import EventLogs, user_log_path
from htgrid.grid._values import as_int, as_number, as_str
from htgrid.queue import (
    HoldReasonCode,
    InvalidTransition,
    JobId,
    JobNotFound,
    JobStatus,
    StoreError,
)

if TYPE_CHECKING:
    from htgrid.grid._resource import Resource

__all__ = ["E", "JobGone", "JobTask", "S", "Services"]

log = logging.getLogger("htgrid.grid")

_T = TypeVar("_T")
#: A type's state Enum and event Enum.
S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


@dataclass(slots=True)
class Services:
    """What jobs and resources are given: settings, time, the queue, the user logs. One
    is shared by all; `config` is replaced at a reconfig (`GridManager.reconfig`)."""

    config: GridManagerConfig
    clock: Clock
    io: QueueIO
    logs: EventLogs
    #: The pool's home (HTGRID_HOME), for what a type finds there (security material).
    home: Path | None = None
    #: Where the jobs' CPU-heavy steps take their turn (remote ads built by the hundred).
    turns: Turns = field(default_factory=Turns)
    #: Renews proxies from MyProxy (jobs with MyProxyHost); None: nothing is renewed.
    myproxy: MyProxyRenewer | None = None
    #: Tries again the removals of remote copies that failed; None: they are not.
    leftovers: LeftoverSweep | None = None


class JobGone(GridError):
    """The job left the queue: its task ends (never raised out of `GridJob.run`)."""


class JobTask(abc.ABC, Generic[S, E]):
    """One grid job's task and what it knows; `GridJob` brings the actions."""

    #: The type's state machine: its events, its transitions, its first and last states
    #: (the action of a last one is `finish`).
    table: Table[S, E]

    def __init__(
        self, job_id: JobId, ad: ClassAd, resource: Resource[Any, Any], services: Services
    ) -> None:
        self.job_id = job_id
        self.ad = ad
        self.resource = resource
        self.services = services
        self.clock = services.clock
        self.io = services.io
        self.status = JobStatus(as_int(ad.get("JobStatus")) or 1)
        self.grid_resource = str(ad.get("GridResource", ""))
        self.user_log = user_log_path(ad)
        self.state: S = self.table.initial
        self.state_since = self.clock.time()
        self.transitions = 0
        self.gone = False
        self._wait_reason = as_str(ad.get("GridWaitReason"))
        self._down_logged = as_number(ad.get("GridResourceUnavailableTime")) is not None
        #: What the job's task waits on in `wait` (one at a time: only it waits).
        self._waker: asyncio.Future[None] | None = None
        #: A wake that came while the task was not waiting: its next `wait` returns at
        #: once (a slot freed while the job wrote its wait reason must not be lost).
        self._woken = False
        #: When (monotonic) a status poll last answered about the job; None while the job's
        #: status is not asked (the clock starts when it is, as HTCondor's does at submit).
        self._status_seen: float | None = None
        self._status_news = False  # an answer came since the last check
        self._status_unknown = ad.get("CurrentStatusUnknown") is True
        #: What HOLD writes: (HoldReason, code, subcode); None: a generic reason.
        self._holding: tuple[str, int, int] | None = None
        #: The job's exit let it leave the queue (not kept by LeaveJobInQueue).
        self._left_queue = False
        #: Its X.509 proxy (x509userproxy), watched for expiry; None without one.
        proxy = proxy_path(ad)
        self.proxy = None if proxy is None else ProxyWatch(proxy)
        #: Where its proxy is renewed from (MyProxyHost...), or why that cannot be read.
        self._myproxy: MyProxySettings | None = None
        self._myproxy_problem: str | None = None
        if self.proxy is not None:
            try:
                self._myproxy = MyProxySettings.of(ad)
            except MyProxyError as err:
                self._myproxy_problem = f"Cannot renew the job's X.509 proxy from MyProxy: {err}"
        self._renewal: asyncio.Task[None] | None = None
        self._renewal_tried: float | None = None  # monotonic

    @property
    def config(self) -> GridManagerConfig:
        """The settings in force (a reconfig may change them while the job runs)."""
        return self.services.config

    # ---- the type's part ---------------------------------------------------------------------

    def actions(self) -> Mapping[S, Callable[[], Awaitable[E]]]:
        """The action of every non-terminal state: the method named after it (`_submit`
        for SUBMIT), the shared ones `GridJob`'s."""
        table = self.table
        states = [state for state in table.transitions if state not in table.terminal]
        return {state: getattr(self, f"_{state.name.lower()}") for state in states}

    async def abandon(self) -> None:
        """The job left the queue while its remote part may live on: clean up if possible."""

    async def _finishing(self) -> None:
        """What the type cleans up as the job ends, its slot released (`finish`)."""

    def wants_status(self) -> bool:
        """Whether the resource's status poll should ask about this job."""
        return False

    # ---- the task ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Drive the machine to a terminal state (or until the job leaves the queue)."""
        actions = self.actions()
        failures = 0
        await self._submit_event_due()
        try:
            while self.state not in self.table.terminal:
                if self.gone:
                    raise JobGone
                try:
                    event = await actions[self.state]()
                except StoreError as err:
                    # The queue was busy or failing: the action did nothing; try it again.
                    failures += 1
                    log.warning("job %s in %s: %s", self.job_id, self.state.name, err)
                    await self.pause(self.config.backoff(failures))
                    continue
                failures = 0
                new = self.table.next_state(self.state, event)
                log.debug(
                    "job %s: %s --%s--> %s", self.job_id, self.state.name, event.name, new.name
                )
                if new is not self.state:
                    self.state_since = self.clock.time()
                self.state = new
                self.transitions += 1
            await self.finish()
        except (JobGone, JobNotFound):
            self.gone = True
            log.info("job %s left the queue (in %s)", self.job_id, self.state.name)

    async def finish(self) -> None:
        """DELETE: a removed job leaves the queue; a held one goes back to the queue's care."""
        self.resource.release(self)
        await self._finishing()
        if self.status is JobStatus.REMOVED:
            try:
                await self.io.destroy(self.job_id)
            except InvalidTransition:
                log.warning("job %s: cannot destroy it: it is no longer removed", self.job_id)
        elif self.status is JobStatus.COMPLETED:
            if not self._left_queue:  # kept by LeaveJobInQueue: never pick it up again
                await self.io.update(self.job_id, {"Managed": "ScheddDone"})
        else:
            await self.io.update(self.job_id, {"Managed": "Schedd", **self.clear_wait_attrs()})

    async def _submit_event_due(self) -> None:
        """The 027 of a job found with its submit saved, if its log lacks it.

        Every type saves GridJobId with GridJobSubmitTime, then writes the event (and
        clears both to submit again): a kill -9 between the save and the write lost it.
        """
        submitted = self.ad.get("GridJobSubmitTime")
        grid_job_id = self.ad.get("GridJobId")
        if self.user_log is None or not isinstance(grid_job_id, str):
            return
        if not isinstance(submitted, int) or isinstance(submitted, bool):
            return
        await self.services.logs.grid_submit_once(
            self.user_log,
            self.job_id.cluster,
            self.job_id.proc,
            submitted,
            self.grid_resource,
            grid_job_id,
        )

    # ---- inputs from outside ------------------------------------------------------------------

    def wake(self) -> None:
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)
        else:
            self._woken = True

    def local_change(self, status: JobStatus | None, attrs: ClassAd) -> None:
        """The queue's change feed reported a change of this job."""
        if status is not None:
            self.status = status
        self.wake()

    def left_queue(self) -> None:
        self.gone = True
        self.wake()

    def remote_status_seen(self) -> None:
        """A status poll answered about this job (the types call it with each answer)."""
        self._status_seen = self.clock.monotonic()
        self._status_news = True

    @property
    def status_unknown(self) -> bool:
        """Whether no poll has answered about the job for `status_unknown_after` (029)."""
        return self._status_unknown

    async def check_remote_status(self) -> None:
        """Log 029 and set CurrentStatusUnknown when no poll answered about the job for
        `status_unknown_after`; 030 and clear it at the next answer. The resource calls
        this after each poll (HTCondor's BaseJob::CheckRemoteStatus, SetRemoteJobStatus)."""
        if self._status_unknown and self._status_news:
            await self._write_status_known(known=True)
        self._status_news = False
        if not self.wants_status():
            self._status_seen = None
            return
        now = self.clock.monotonic()
        if self._status_seen is None:
            self._status_seen = now
        elif not self._status_unknown and now - self._status_seen > (
            self.config.status_unknown_after
        ):
            log.warning(
                "job %s: no status answer for %.0f s; its status is unknown",
                self.job_id,
                now - self._status_seen,
            )
            await self._write_status_known(known=False)
            self.wake()

    async def check_proxy(self, *, wait: bool = False) -> None:
        """Hold the job (code 4, CorruptedCredential) if its X.509 proxy expired or cannot
        be read; its type then cancels the remote part as for a user's hold. A proxy
        MyProxy renews (MyProxyHost) is renewed when due, in a task of its own (`wait`:
        its end awaited, before a submit); while that runs the expiry waits for its
        outcome. The resource calls this after each poll, and a job before it submits."""
        if self.proxy is None or not self._proxy_in_use():
            return
        state = await self.proxy.check()
        if self._myproxy_problem is not None:
            await self._credential_hold(self._myproxy_problem)
            return
        now = self.clock.time()
        if self._renewal_due(state.expiration, now):
            self._renewal_tried = self.clock.monotonic()
            self._renewal = asyncio.create_task(self._renew_proxy(now))
        if self._renewal is not None and not self._renewal.done():
            if not wait:
                return  # the renewal's outcome decides
            await asyncio.wait([self._renewal])
            if not self._proxy_in_use():
                return
            state = await self.proxy.check()
        reason = state.hold_reason(self.clock.time())
        if reason is not None:
            await self._credential_hold(reason)

    def _proxy_in_use(self) -> bool:
        return self.status in (JobStatus.IDLE, JobStatus.RUNNING)

    def _renewal_due(self, expiration: int | None, now: float) -> bool:
        settings = self._myproxy
        if settings is None or self.services.myproxy is None or expiration is None:
            return False
        if self._renewal is not None and not self._renewal.done():
            return False
        tried = self._renewal_tried
        if tried is not None and self.clock.monotonic() - tried < RETRY_AFTER:
            return False
        return settings.due(expiration, now)

    async def _renew_proxy(self, now: float) -> None:
        """Renew the proxy from MyProxy: a refusal holds the job, a server that cannot be
        asked is tried again (RETRY_AFTER), and the expiry holds the job in the end."""
        renewer, settings, proxy = self.services.myproxy, self._myproxy, self.proxy
        assert renewer is not None and settings is not None and proxy is not None
        refused: str | None = None
        try:
            expiration = await renewer.renew(self.job_id, self.ad, settings, proxy.path, now)
        except MyProxyRefused as err:
            refused = f"Cannot renew the job's X.509 proxy: {err}"
        except NoMyProxyPassword as err:
            # Submitted without one (no -p): nothing to renew with, said once.
            log.warning("job %s: %s; its proxy is not renewed", self.job_id, err)
            self._myproxy = None
            return
        except (HTGridError, OSError) as err:  # tried again after RETRY_AFTER
            log.warning("job %s: cannot renew its X.509 proxy from MyProxy: %s", self.job_id, err)
            return
        if refused is not None:
            if self._proxy_in_use():
                try:
                    await self._credential_hold(refused)
                except (StoreError, JobNotFound) as err:  # the next check tries again
                    log.warning("job %s: cannot hold it: %s", self.job_id, err)
                    self._renewal_tried = None
            return
        log.info(
            "job %s: X.509 proxy %s renewed from MyProxy server %s, valid until %s",
            self.job_id,
            proxy.path,
            settings.server,
            _utc(expiration),
        )
        try:
            await self.io.update(self.job_id, {"x509UserProxyExpiration": expiration})
        except (StoreError, JobNotFound) as err:
            log.warning("job %s: cannot record its renewed proxy: %s", self.job_id, err)
        await proxy.check()
        self.wake()  # the type delegates the renewed proxy again at its next look

    async def _credential_hold(self, reason: str) -> None:
        log.warning("job %s: %s: holding it", self.job_id, reason)
        self._will_hold(reason, HoldReasonCode.CorruptedCredential)
        await self._hold_here()
        self.wake()

    async def _write_status_known(self, *, known: bool) -> None:
        # The attribute first: should the queue fail, the next check tries both again.
        await self.io.update(self.job_id, {"CurrentStatusUnknown": not known})
        self._status_unknown = not known
        await self.services.logs.status_known(
            self.user_log, self.job_id.cluster, self.job_id.proc, self.clock.time(), known=known
        )

    # ---- helpers for actions -------------------------------------------------------------------

    def _event(self, name: str) -> E:
        """The type's event of that name (the shared actions answer with these)."""
        return self.table.events[name]

    def _stopped(self) -> E | None:
        """LOCAL_REMOVED or LOCAL_HELD when the job was removed or held here."""
        if self.status is JobStatus.REMOVED:
            return self._event("LOCAL_REMOVED")
        if self.status is JobStatus.HELD:
            return self._event("LOCAL_HELD")
        return None

    def _will_hold(self, reason: str, code: int = 0, subcode: int = 0) -> None:
        """What HOLD will write: HoldReason, HoldReasonCode, HoldReasonSubCode."""
        self._holding = (reason, int(code), subcode)

    async def _refresh_status(self) -> None:
        """Read the job's status again (after a status change raced with ours)."""
        ad = await self.io.get(self.job_id)
        self.status = JobStatus(as_int(ad.get("JobStatus")) or 1)

    async def _log_grid_submit(self, when: float, grid_job_id: str) -> None:
        """Log 027, the submit saved under `grid_job_id` (written after the save)."""
        await self.services.logs.grid_submit(
            self.user_log,
            self.job_id.cluster,
            self.job_id.proc,
            when,
            self.grid_resource,
            grid_job_id,
        )

    async def _hold_here(self) -> None:
        """HOLD's local part: hold the job with `_will_hold`'s reason (remove it if Nonessential)."""
        reason, code, subcode = self._holding or ("Unspecified gridmanager error", 0, 0)
        self._holding = None
        try:
            hold_code = HoldReasonCode(code)
        except ValueError:
            hold_code = HoldReasonCode.Unspecified
        nonessential = self.ad.get("Nonessential") is True
        if nonessential:
            # HTCondor removes a non-essential job rather than hold it.
            done = await self.io.remove(self.job_id, reason)
        else:
            done = await self.io.hold(self.job_id, reason, hold_code, subcode)
        if done:
            self.status = JobStatus.REMOVED if nonessential else JobStatus.HELD
        else:
            await self._refresh_status()  # the user held or removed it first

    async def wait(self, seconds: float | None = None) -> None:
        """Sleep until woken (or woken since the last wait), or `seconds` pass."""
        if self._woken:
            self._woken = False
            if self.gone:
                raise JobGone
            return
        waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waker = waker
        try:
            if seconds is None:
                await waker
            else:
                await first_of(waker, max(0.0, seconds), self.clock)
        finally:
            self._waker = None
        if self.gone:
            raise JobGone

    async def pause(self, seconds: float) -> None:
        """Sleep `seconds` even if woken (the job is re-evaluated afterwards anyway)."""
        end = self.clock.monotonic() + seconds
        while (left := end - self.clock.monotonic()) > 0:
            await self.wait(left)

    async def said_if_slow(self, work: Awaitable[_T], reason: str) -> _T:
        """`work`'s result; GridWaitReason says `reason` only if it takes longer than
        `config.slow_step_after` (left set: the next write of the job clears it)."""
        task = asyncio.ensure_future(work)
        try:
            await first_of(task, self.config.slow_step_after, self.clock)
            if not task.done():
                await self.set_wait_reason(reason)
        except BaseException:
            task.cancel()
            raise
        return await task

    @property
    def wait_reason(self) -> str | None:
        return self._wait_reason

    async def set_wait_reason(self, text: str | None, **more: Any) -> None:
        """Write GridWaitReason (what the job waits for) with `more` attributes, if it changed."""
        if text == self._wait_reason and not more:
            return
        attrs: dict[str, Any] = dict(more)
        if text != self._wait_reason:
            attrs["GridWaitReason"] = UNDEFINED if text is None else text
        await self.io.update(self.job_id, attrs)
        self._wait_reason = text

    def clear_wait_attrs(self) -> dict[str, Any]:
        """The attributes that clear GridWaitReason, for a write about to happen anyway."""
        if self._wait_reason is None:
            return {}
        self._wait_reason = None
        return {"GridWaitReason": UNDEFINED}

    async def sync_resource(self) -> None:
        """Log 026/025 and set GridResourceUnavailableTime when the resource changed state."""
        down = self.resource.down
        if down == self._down_logged or self.resource.unknown:
            return
        when = self.resource.state_since
        self._down_logged = down
        # The ad first: whoever reads 026 in the log finds GridResourceUnavailableTime set.
        await self.io.update(
            self.job_id, {"GridResourceUnavailableTime": int(when) if down else UNDEFINED}
        )
        await self.services.logs.resource(
            self.user_log,
            self.job_id.cluster,
            self.job_id.proc,
            when,
            self.grid_resource,
            up=not down,
        )
        self.wake()

    async def until_resource_up(self, stop: Callable[[], E | None] | None = None) -> E | None:
        """Wait while the resource is down or unknown (the job waits, it does not fail);
        `stop()`'s event if it gives one first."""
        while not self.resource.up:
            event = None if stop is None else stop()
            if event is not None:
                return event
            await self.wait()
        return None
