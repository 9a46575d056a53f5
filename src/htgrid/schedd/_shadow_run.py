"""One vanilla job's run on one claim: the shadow itself (see `_shadow` for the whole).

`ShadowRun.run` claims the slot, activates the claim with the input (a small one in the
same request), records the start once the node took it (no 001 for a job it refused),
follows the claim by long polls until the job's end (a small output with it), and
records that: exit, eviction, or a hold for a job that could not start or whose files
could not move. Every queue write goes through the `ShadowHost` (the queue thread).

A node of another host may run the job on without the schedd, for the job's lease
(JobLeaseDuration; the node kills it past that). When it stops answering (its keep-alives
go unanswered, `_leases`), or when the schedd starts again with the job running there,
the shadow is disconnected (022) and reconnects (`_lost`): once the node answers within
the lease, it follows the same run on (023, and the job's end as usual); when the node
says the claim is gone, or the lease has surely run out there, it gives the run up
(024) and the job goes back to idle. (Its sandboxes' transfers are `_shadow_files`', the
queue records of its end `_shadow_record`'s.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Final

from htgrid._privsep import Account, OwnerRefused, as_owner
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.negotiator import Match, Updates
from htgrid.queue import (
    HoldReasonCode,
    JobId,
)
from htgrid.queue.faults import JobFailure, daemon_fault, problem
from htgrid.schedd._leases import NodeLink
from htgrid.schedd._shadow_base import (
    RESTARTED,
    Evicted,
    GaveUp,
    NotStarted,
    ShadowHost,
    StopReason,
    Unreachable,
    claimed_slot,
    reconnected_slot,
    vacate_time,
)
from htgrid.schedd._shadow_files import fetch_output, send_input, small_input
from htgrid.schedd._shadow_reconnect import ShadowReconnects
from htgrid.schedd._shadow_record import ShadowRecords
from htgrid.schedd._shadow_suspend import ShadowSuspensions
from htgrid.startd import (
    ClaimNotFound,
    ClaimState,
    ClaimStateError,
    ClaimStatus,
    OutcomeKind,
    Resources,
    StartdClient,
    StartdError,
    StartdUnavailable,
    TransferError,
    job_lease,
    socket_of,
)

__all__ = ["ShadowRun"]

_log = logging.getLogger("htgrid.schedd.shadow")

_RETRY: Final = 1.0
_NOT_STARTED: Final = 1 << 62  # the start_seq of a job not started: no change is about it
# How long a long poll of one claim on a node of another host waits (a node that has no
# node-wide poll): its keep-alives are the node's link's, so it only waits for news.
_LONG_POLL: Final = 300.0
#: A claim whose job may be told to stop (`StartdClient.vacate`).
_ACTIVE: Final = frozenset(
    {ClaimState.STARTING, ClaimState.RUNNING, ClaimState.SUSPENDED, ClaimState.RETIRING}
)


class ShadowRun(ShadowRecords, ShadowSuspensions, ShadowReconnects):
    """One job's run on one claim."""

    def __init__(
        self,
        manager: ShadowHost,
        job_id: JobId,
        job: ClassAd,
        client: StartdClient,
        address: str,
        *,
        match: Match | None = None,
        certificate: str | None = None,
        claim_id: str | None = None,
    ) -> None:
        """A run of the `match` given; or, without one, the reconnection to the run of
        `job` on the claim `claim_id` an earlier daemon left on a node of another host."""
        self.m = manager
        self.job_id = job_id
        self.match = match
        self.job = job
        self.client = client
        self.address = address
        self.certificate = certificate  # the node's, pinned (a node of another host)
        self.claim_id = claim_id or secrets.token_urlsafe(24)
        self.lease = job_lease(job, manager.settings.lease)
        self.start_seq = _NOT_STARTED  # until it starts, no change is about this run
        self.stop_reason: StopReason | None = None
        self.vacate_time = vacate_time(job)
        self.link: NodeLink | None = None  # the keep-alives of a node of another host
        self.task: asyncio.Task[None] | None = None  # the task running it
        self._stopping = asyncio.Event()
        # The current wait of `_follow`'s, which a stop request cuts short (None).
        self._wake: asyncio.Future[ClaimStatus | None] | None = None
        self.start_attrs: dict[str, Any] = {}  # what the start records (`_prepare`'s)
        self.slot_ad = ClassAd()  # the claimed slot, once claimed
        self.resources = Resources(0, 0, 0)
        self.account: Account | None = None  # the current job's owner's, once it starts
        self.on_node = False  # the current job may run on the node
        self.lost = False  # disconnected from the node, reconnecting (`_lost`)
        self.renewed = 0  # the job's LastJobLeaseRenewal, as last recorded
        self._settled = False  # the run was given up on: nothing to release
        self._quiet = True  # no job of ours runs on the claim: its release is quick
        # The claim's last job, ended and recorded: the next activation reuses the claim
        # (the node readies it for the next job in the same request, `_activate`).
        self._after: str | None = None
        # The claim was activated with its node's feed's token (the feed's poll follows
        # it on the node), since its status was last heard otherwise.
        self._watched = False
        self._sent: dict[str, Any] = {}  # the current job's BytesSent, once its input went
        self._spooled = True  # whether the current job may have an evicted run's output
        # Idle jobs that may follow, read with the last exit (None: those read before).
        self._idle: list[ClassAd] | None = []

    @property
    def started(self) -> bool:
        """Whether the current job's start was recorded (it may have ended since)."""
        return self.start_seq < _NOT_STARTED

    @property
    def remote(self) -> bool:
        """Whether the node is of another host: it may run the job on without us."""
        return socket_of(self.address) is None

    async def forward_proxy(self, proxy: Path) -> None:
        """Hand the job on the claim its renewed X.509 proxy (the spooled file `proxy`);
        logged when it cannot (the job then keeps the copy it has)."""
        account = self.account

        def read() -> bytes:
            with as_owner(account):
                return proxy.read_bytes()

        try:
            data = await asyncio.to_thread(read)
            await self.client.put_proxy(self.claim_id, data)
        except (OSError, StartdError) as exc:
            _log.warning(
                "job %s: its renewed proxy did not reach %s: %s", self.job_id, self.address, exc
            )
        else:
            _log.info("job %s: its renewed proxy went to %s", self.job_id, self.address)

    def stop(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self._stopping.set()
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)

    async def run(self) -> None:
        try:
            await (self._run() if self.match is not None else self._resume())
        except asyncio.CancelledError:
            # A job that may run on a node of another host stays Running with its claim
            # recorded (the schedd stopping): the next start has the node end it first.
            if not (self.on_node and self.remote):
                await asyncio.shield(self._abandon("the schedd stopped following it"))
            raise
        except Exception as exc:
            if not daemon_fault(exc):
                await self._contain(exc)
                return
            # The queue failed a write, say: never leave the job Running with no shadow.
            await self._abandon(f"the shadow failed: {exc}")
            if not isinstance(exc, HTGridError):
                raise
        finally:
            self.m.drop_lease(self)

    async def _contain(self, exc: Exception) -> None:
        """Hold a job the shadow failed on for a reason of the job's own (an attribute of
        the wrong type, an expression that cannot be evaluated, a bug it alone meets):
        back to idle, it would be matched and fail again at every cycle."""
        what = problem(exc)
        held = False
        try:
            held = await self._hold(
                f"The shadow failed while running this job: {what}", HoldReasonCode.Unspecified, 0
            )
        except Exception as again:
            if daemon_fault(again) and not isinstance(again, HTGridError):
                raise
        finally:
            await self._release()
        self.m.failed(JobFailure(self.job_id, what, held=held, error=exc))

    async def _abandon(self, why: str) -> None:
        await self._record_evicted(why)
        await self._release()

    async def _run(self) -> None:
        jid, s, match = self.job_id, self.m.settings, self.match
        assert match is not None  # run() calls this for a match only
        claimed_job = match.job_ad(self.job)
        await self.m.record_claim(self)  # a schedd killed from now on ends it at restart
        try:
            grant = await self.client.request_claim(
                self.claim_id, claimed_job, s.schedd_name, self.lease
            )
        except StartdError as exc:
            _log.info("job %s: %s did not take the claim: %s", jid, match.machine, exc)
            self.m.claim_answered(match, False)
            await self._release()  # granted perhaps, the answer lost: let it go
            return  # still idle: the next cycle tries again
        self.m.claim_answered(match, True)
        self.m.hold_lease(self)
        self.slot_ad = claimed_slot(match.machine_ad, grant)
        self.resources = grant.resources
        updates, expanded = match.job_updates, match.expansion.expanded
        if await self._run_job(grant.slot, updates, expanded):
            await self._run_next(grant.slot)
        await self._release()

    async def _run_next(self, slot: str) -> None:
        """HTCondor's claim reuse: a job that ended leaves its claim to the next job of
        the same user that fits it, without waiting for a negotiation cycle."""
        s = self.m.settings
        while True:
            following = self.m.next_job(self, self._idle)
            if following is None and self._idle is None:  # those read before are gone
                await self.m.scanned(self)  # another claim's read under way: its jobs
                following = self.m.next_job(self, None)
            if following is None and self._idle is None and not self.m.exhausted(self):
                self._idle = await self.m.write(self.m.idle_scan(self, fresh=True))
                following = self.m.next_job(self, self._idle)
            if following is None:
                return
            # The job is this shadow's from now on: idle until it starts, and let go
            # (still idle) should the claim not take it.
            self.job_id, self.job, expanded = following
            self.vacate_time = vacate_time(self.job)
            self.lease = job_lease(self.job, s.lease)
            await self.m.record_claim(self)  # the claim's record names the job it runs
            self.stop_reason, self._stopping = None, asyncio.Event()
            self.start_seq = _NOT_STARTED
            if not await self._run_job(slot, (), expanded, read=self.job):
                return

    async def _resume(self) -> None:
        """Reconnect to the job an earlier daemon left running on a node of another host,
        and see it through; then its claim runs the owner's next jobs as any other."""
        self.m.hold_lease(self)
        self._suspensions_from(self.job, fresh=False)
        if await self._owner() and await self._attend(
            self.job, self._lost("the schedd restarted", RESTARTED)
        ):
            slot = self.job.get("RemoteHost")
            if isinstance(slot, str) and await self._learn_slot(slot):
                await self._run_next(slot)
        await self._release()

    async def _learn_slot(self, slot: str) -> bool:
        """Learn from the node what the claim reconnected to holds (its dynamic slot
        `slot`), which the match told a claim of this daemon's; whether it could."""
        try:
            found = reconnected_slot(await self.client.slots(), slot)
        except StartdError as exc:
            _log.info("claim of %s not reused: its slot is not known: %s", slot, exc)
            return False
        if found is None:
            _log.info("claim of %s not reused: the node does not show that slot", slot)
            return False
        self.slot_ad, self.resources = found
        return True

    async def _owner(self) -> bool:
        """Whether the current job's owner may run jobs here (held if not)."""
        policy = self.m.settings.policy
        if policy is not None:
            try:
                self.account = policy.account(self.job.get("Owner"))
            except OwnerRefused as exc:
                await self._hold(str(exc), HoldReasonCode.FailedToAccessUserAccount, 0)
                return False
        return True

    async def _run_job(
        self, slot: str, updates: Updates, expanded: Updates, *, read: ClassAd | None = None
    ) -> bool:
        """Run the current job on the claim (`read`: its ad as the idle jobs' read found
        it, `_prepare`); whether the claim may run another."""
        if not await self._owner():
            return False
        self._sent, self._spooled = {}, True
        ad = await self._prepare(slot, updates, expanded, read)
        if ad is None:  # held or removed since the match
            return False
        self._suspensions_from(ad, fresh=True)
        return await self._attend(ad, self._activate(ad))

    async def _attend(self, ad: ClassAd, first: Awaitable[ClaimStatus]) -> bool:
        """Follow the job on the node from `first` (its activation, or a reconnection)
        to its end, and record that; whether the claim may run another job."""
        self.on_node, self._quiet = True, False
        try:
            status = await first
            while True:
                try:
                    ended = await self._follow(ad, status)
                    self._quiet = True  # ENDED: the job is over on the node
                    ok = await self._finish(ad, ended)
                    self.on_node = False
                    return ok
                except Unreachable as exc:
                    if not self.remote:  # a node of this host's: its jobs go with it
                        raise
                    # It may run the job on: never run it elsewhere too before that is over.
                    status = await self._cut(str(exc))
        except NotStarted as exc:  # still idle (or held, removed): the claim goes
            self.on_node = False
            _log.info("job %s did not start on %s: %s", self.job_id, self.address, exc)
        except GaveUp:
            self.on_node, self._settled = False, True
        except Evicted as exc:  # the claim is gone: the job runs again, elsewhere or later
            self.on_node = False
            await self._record_evicted(str(exc))
        except TransferError as exc:
            self.on_node = False
            await self._hold(exc.reason, exc.code, exc.subcode)
        return False

    async def _activate(self, ad: ClassAd) -> ClaimStatus:
        """Activate the claim with the job; once the node took it (its answer), record
        the start (001). NotStarted when it did not: refused, or the claim gone."""
        small = await small_input(self, ad)  # sent with the activation
        data = None if small is None else small[0]
        after, self._after = self._after, None  # the last job's end, if reused: once
        watch = None if self.link is None else self.link.feed.token
        try:
            status = await self.call(
                self.client.activate(self.claim_id, ad, data, after=after, watch=watch)
            )
            self._watched = watch is not None
        except Unreachable as exc:
            if not self.remote:
                raise
            status = await self._in_doubt(str(exc))
        except Evicted as exc:
            raise NotStarted(str(exc)) from None
        if small is not None and not status.transfer_input:  # taken
            self._sent, self._spooled = {"BytesSent": small[1]}, small[2]
        await self._record_start()
        return status

    async def _follow(self, ad: ClassAd, status: ClaimStatus) -> ClaimStatus:
        """Follow the claim from `status` to the job's end (the claim's status then,
        with the outcome)."""
        if status.transfer_input:  # BytesSent is recorded with the end: one commit fewer
            size, self._spooled = await send_input(self, ad)
            self._sent = {"BytesSent": size}
        last_heard = self.m.monotonic()
        link = self.link
        vacated = False
        while True:
            if status.suspensions or self._suspended:
                await self._record_suspensions(status)
            if status.state is ClaimState.ENDED and status.outcome is not None:
                return status
            if status.state is ClaimState.RELEASED:
                raise Evicted("the execute node released the claim")
            if self._stopping.is_set() and not vacated:
                if status.state in _ACTIVE:
                    reason = self.stop_reason.value if self.stop_reason else "vacate"
                    try:
                        status = await self.call(self.client.vacate(self.claim_id, reason))
                    except Unreachable:
                        # As for a poll: a node of another host is disconnected when its
                        # link says so. Until then the request, lost on its way (as the
                        # node's broker connection dropped, say), is made again shortly.
                        if link is None or link.down.is_set():
                            raise
                        await asyncio.sleep(_RETRY)
                        continue
                vacated = True
                continue
            # Until the job is told to stop, a stop request cuts the long poll short; and
            # a node of another host that stops answering its keep-alives, too: each
            # sets the one future waited on (None), as the poll's answer does.
            if link is not None and link.down.is_set():
                raise Unreachable(f"the execute node {self.address} does not answer")
            wake: asyncio.Future[ClaimStatus | None] = asyncio.get_running_loop().create_future()
            poll: asyncio.Task[ClaimStatus] | None = None
            # A node of another host: its feed's one poll follows all our claims there.
            feed = link.feed if link is not None and link.feed.supported else None
            if feed is not None:
                feed.expect(self.claim_id, status.version, wake, activated=self._watched)
            else:
                wait = self.m.settings.alive_interval if link is None else _LONG_POLL
                poll = asyncio.create_task(
                    self.client.status(self.claim_id, wait=wait, version=status.version)
                )
                poll.add_done_callback(functools.partial(_wake, wake))
            if not vacated:
                self._wake = wake
            if link is not None:
                link.waiting.add(wake)
            try:
                answer: ClaimStatus | BaseException | None = await wake
            except Exception as exc:  # the feed's poll's, for this claim
                answer = exc
            finally:
                self._wake = None
                if link is not None:
                    link.waiting.discard(wake)
                if feed is not None:
                    feed.forget(self.claim_id, wake)
                elif poll is not None and not poll.done():
                    poll.cancel()
                    await asyncio.gather(poll, return_exceptions=True)
            if poll is not None and poll.done() and not poll.cancelled():
                answer = poll.exception() or poll.result()
            if answer is None:  # woken: told to stop, or the node is taken as down
                # The feed's poll may have answered for the claim meanwhile, unheard:
                # the next one names it.
                self._watched = False
                if link is not None and link.down.is_set():
                    raise Unreachable(f"the execute node {self.address} does not answer")
                continue
            try:
                if isinstance(answer, BaseException):
                    raise answer
                status = answer
                last_heard = self.m.monotonic()
                # The node-wide poll answered for the claim (a suspension, say): the
                # next one names it, the node having left it with that answer.
                self._watched = False
            except (ClaimNotFound, ClaimStateError) as exc:
                # A status read is refused so only for a claim whose lease ran out on the
                # node (the schedd was cut off): its job is being killed there.
                raise Evicted(f"the execute node lost the claim: {exc}") from None
            except StartdUnavailable as exc:
                self._watched = False
                # A node of another host is disconnected when its link says so (its
                # keep-alives unanswered); one of this host's, which ends its jobs with
                # it, is given the whole claim lease.
                silent = self.m.monotonic() - last_heard
                if (link is not None and link.down.is_set()) or (
                    link is None and silent > self.m.settings.lease
                ):
                    raise Unreachable(
                        f"no word from the execute node for {silent:.0f} s: {exc}"
                    ) from None
                await asyncio.sleep(_RETRY)

    async def call(self, call: Any) -> ClaimStatus:
        try:
            status: ClaimStatus = await call
        except ClaimNotFound as exc:
            raise Evicted(f"the execute node lost the claim: {exc}") from None
        except StartdUnavailable as exc:
            raise Unreachable(f"the execute node does not answer: {exc}") from None
        except StartdError as exc:  # refused: the job cannot run on this claim
            raise Evicted(f"the execute node refused: {exc}") from None
        return status

    async def _finish(self, ad: ClassAd, ended: ClaimStatus) -> bool:
        """Record how the run ended; whether the claim may take another job."""
        reason, outcome = self.stop_reason, ended.outcome
        assert outcome is not None  # `_follow` returns an ended claim
        if outcome.kind is OutcomeKind.FAILED:
            await self._hold(
                outcome.reason, HoldReasonCode(outcome.hold_code), outcome.hold_subcode
            )
            return False
        received = 0
        if outcome.output:
            evicted = outcome.kind is OutcomeKind.EVICTED
            if not evicted or reason is StopReason.SHUTDOWN or reason is None:
                try:
                    received = await fetch_output(
                        self,
                        ad,
                        spool=evicted,
                        inline=ended.output_data,
                        dir_made=bool(self._sent),
                    )
                except TransferError as exc:
                    await self._hold(exc.reason, exc.code, exc.subcode)
                    return False
        usage = self._usage(ad, outcome, received)
        if outcome.kind is OutcomeKind.EXITED:
            # A claim past the node's CLAIM_WORKLIFE (`closing`) is released: the next
            # job waits for a new match.
            reuse = reason is None and not ended.closing
            if reuse:  # the next job's activation reuses the claim
                self._after = str(self.job_id)
            await self._record_exit(usage, outcome, scan=reuse)
            return reuse
        if reason is StopReason.SHUTDOWN:
            await self._record_stop(usage, "The schedd is shutting down")
        else:  # the node's own doing: its policy (PREEMPT), its shutdown...
            why = outcome.reason or "The execute node evicted the job"
            await self._record_stop(usage, why, outcome.hold_code)
        return False

    async def _release(self) -> None:
        if self._settled:
            return
        self._settled = True  # once: a claim released (or left to its lease) is over
        # The node answers once the job is gone: its vacate time, and a margin; a node
        # that does not answer must not hold the shadow (nor a shutdown) forever.
        wait = self.vacate_time + self.m.settings.alive_interval
        try:
            async with asyncio.timeout(wait):  # no task of its own, as wait_for's
                await self.client.release(self.claim_id, idle=self._quiet)
        except ClaimNotFound:
            pass  # released, expired, or the node restarted: the claim is gone all the same
        except (StartdError, TimeoutError) as exc:
            # Its record stays, and the node is asked again: until it answers, the
            # claim holds the node's resources from other jobs.
            why = exc if isinstance(exc, StartdError) else f"no answer within {wait:g} s"
            _log.warning(
                "claim of job %s: the node did not release it: %s (asked again)", self.job_id, why
            )
            self.m.release_later(self)
            return
        await self.m.forget_claim(self)


def _wake(wake: asyncio.Future[ClaimStatus | None], _: object) -> None:
    """A claim's own poll (a task) is done: its shadow reads it."""
    if not wake.done():
        wake.set_result(None)
