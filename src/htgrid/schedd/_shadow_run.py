"""One vanilla job's run on one claim: the shadow itself (see `_shadow` for the whole).

`ShadowRun.run` claims the slot, records the start, activates the claim, sends the input,
follows the claim by long polls, fetches the output and records the end: exit, eviction,
or a hold for a job that could not start or whose files could not move. Every queue
write goes through the `ShadowHost` (the manager's queue thread).

A node of another host may run the job on without the schedd, for the job's lease
(JobLeaseDuration; the node kills it past that). When it stops answering (its keep-alives
go unanswered, `_leases`), or when the schedd starts again with the job running there,
the shadow is disconnected (022) and reconnects (`_lost`): once the node answers within
the lease, it follows the same run on (023, and the job's end as usual); when the node
says the claim is gone, or the lease has surely run out there, it gives the run up
(024) and the job goes back to idle.

The job's files (its executable and input read, its output written into Iwd, an evicted
run's output kept in the spool) are touched with its owner's rights; the transfer tars
are the daemon's own files, opened by the daemon and handed to the owner's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import secrets
import shutil
from collections.abc import Awaitable, Callable, Mapping
from copy import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn, Protocol

from htgrid._aio import wait_event
from htgrid._files import private_file
from htgrid._privsep import Account, OwnerPolicy, OwnerRefused, as_owner, owned_dir
from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.negotiator import Match, Updates, apply_updates
from htgrid.net import SandboxTooLarge
from htgrid.net.server import SizeLimit
from htgrid.queue import (
    HoldReasonCode,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import JobFailure, daemon_fault, problem
from htgrid.schedd._claims import public_claim_id
from htgrid.schedd._leases import NodeLink
from htgrid.schedd._local import SCHEDD
from htgrid.startd import (
    ClaimGrant,
    ClaimNotFound,
    ClaimState,
    ClaimStatus,
    Outcome,
    OutcomeKind,
    Resources,
    StartdClient,
    StartdError,
    StartdUnavailable,
    TransferError,
    input_entries,
    input_size,
    job_lease,
    pack,
    socket_of,
    unpack_output,
    unpack_to,
)

__all__ = [
    "RUNNING",
    "ShadowHost",
    "ShadowRun",
    "ShadowSettings",
    "StopReason",
    "after_stop",
    "claimed_slot",
    "vacate_time",
]

_log = logging.getLogger("htgrid.schedd.shadow")

_RETRY: Final = 1.0
_NO_INPUT_LIMIT: Final = SizeLimit("MAX_TRANSFER_INPUT_MB")
_NO_OUTPUT_LIMIT: Final = SizeLimit("MAX_TRANSFER_OUTPUT_MB")
# How long a long poll of a node of another host waits: its keep-alives are the node's
# link's, so a poll only waits for the claim to change.
_LONG_POLL: Final = 300.0
# Beyond a claim's lease and its job's vacate time: the node's lease check runs every
# half second, and a killed job takes a moment to be gone.
LEASE_MARGIN: Final = 5.0
# HTCondor's reasons (its shadow's and its schedd's), as users and their tools know them.
CUT: Final = "Socket between submit and execute hosts closed unexpectedly"
RESTARTED: Final = "Local schedd and job shadow died, schedd now running again"
_NOT_FOUND: Final = "Job not found at execution machine"
_CLAIM_NOT_FOUND: Final = "Claim not found at execution machine"
RUNNING: Final = (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED)


@dataclass(frozen=True, slots=True)
class ShadowSettings:
    """What every shadow of one daemon shares."""

    schedd_name: str
    spool: Path  # the daemon's spool: transfer files and spooled sandboxes go under it
    alive_interval: float = 60.0
    lease: float = 360.0
    vacate_grace: float = 10.0  # beyond a job's own vacate time, at shutdown
    policy: OwnerPolicy | None = None  # as whom jobs' files are touched (None: the daemon)
    # The certificate and key the schedd presents to execute nodes on other hosts (the
    # pool CA's: they take claims from the pool's daemons only); None: local nodes only.
    identity: tuple[Path, Path] | None = None
    fsync: bool = True  # the claim records on disk before each claim is used
    # MAX_TRANSFER_INPUT_MB and _OUTPUT_MB: a job's own MaxTransferInputMB and
    # MaxTransferOutputMB (-1: none) stand in for them, as in HTCondor.
    max_input: SizeLimit = _NO_INPUT_LIMIT
    max_output: SizeLimit = _NO_OUTPUT_LIMIT

    @property
    def transfers(self) -> Path:
        return self.spool / "transfer"

    def spooled(self, job_id: JobId) -> Path:
        """Where an evicted job's output waits for its next run (ON_EXIT_OR_EVICT)."""
        return self.spool / "sandboxes" / str(job_id)


class StopReason(enum.Enum):
    """Why the schedd stops a job it runs on an execute node."""

    HOLD = "hold"
    REMOVE = "remove"
    SHUTDOWN = "vacate"


class _Evicted(HTGridError):
    """The claim is lost: the node restarted, vanished or dropped it."""


class _Unreachable(_Evicted):
    """The node does not answer: the job may still run there."""


class _GaveUp(HTGridError):
    """A disconnected run was given up on (024): the job is back to idle, its claim
    forgotten."""


class ShadowHost(Protocol):
    """What a shadow needs of its manager."""

    settings: ShadowSettings

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any: ...

    async def record_claim(self, run: ShadowRun) -> None:
        """Write `run`'s claim (for its current job) down, on disk, before it is used."""
        ...

    async def forget_claim(self, run: ShadowRun) -> None:
        """`run`'s claim is released: its record goes."""
        ...

    def hold_lease(self, run: ShadowRun) -> None:
        """Keep `run`'s claim on a node of another host alive (`run.link` set)."""
        ...

    def drop_lease(self, run: ShadowRun) -> None: ...

    async def disconnected(self, run: ShadowRun, why: str, reason: str, deadline: float) -> None:
        """`run`'s node does not answer (`why`): its job Running, disconnected (022 with
        HTCondor's `reason`) until `deadline`, when its lease has surely run out there."""
        ...

    async def reconnected(self, run: ShadowRun) -> None:
        """`run`'s node answers again and runs its job on (023)."""
        ...

    async def gave_up(self, run: ShadowRun, reason: str) -> None:
        """The schedd gives `run` up (024 with `reason`): its job back to idle, the
        claim's record gone."""
        ...

    def idle_scan(self, run: ShadowRun) -> Callable[[JobQueue], list[ClassAd]]:
        """What reads the idle jobs that may run next on `run`'s claim (on the queue
        thread, with the write that records the end of its job)."""
        ...

    def next_job(self, run: ShadowRun, ads: list[ClassAd]) -> tuple[JobId, ClassAd, Updates] | None:
        """An idle job of `ads` to run on `run`'s claim next (now counted as `run`'s), or
        None."""
        ...

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    def failed(self, failure: JobFailure) -> None:
        """A job the shadow failed on for a reason of its own (logged once)."""
        ...


class ShadowRun:
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
        self.start_seq = 1 << 62  # until it starts, no change is about this run
        self.stop_reason: StopReason | None = None
        self.vacate_time = vacate_time(job)
        self.link: NodeLink | None = None  # the keep-alives of a node of another host
        self.task: asyncio.Task[None] | None = None  # the task running it
        self._stopping = asyncio.Event()
        self._started_at = 0.0
        self.slot_ad = ClassAd()  # the claimed slot, once claimed
        self.resources = Resources(0, 0, 0)
        self.account: Account | None = None  # the current job's owner's, once it starts
        self.on_node = False  # the current job may run on the node
        self._settled = False  # the run was given up on: nothing to release
        # The node readying the claim for the next job, while the schedd records the end
        # of the last one and picks the next (`_finish`, `_reused`).
        self._reusing: asyncio.Task[ClaimStatus] | None = None
        self._sent: dict[str, Any] = {}  # the current job's BytesSent, once its input went
        self._spooled = True  # whether the current job may have an evicted run's output
        self._idle: list[ClassAd] = []  # idle jobs that may follow, read with the last exit

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
            await self._release()  # granted perhaps, the answer lost: let it go
            return  # still idle: the next cycle tries again
        self.m.hold_lease(self)
        self.slot_ad = claimed_slot(match.machine_ad, grant)
        self.resources = grant.resources
        updates, expanded = match.job_updates, match.expansion.expanded
        # HTCondor's claim reuse: a job that ended leaves its claim to the next job of
        # the same user that fits it, without waiting for a negotiation cycle.
        while await self._run_job(grant.slot, updates, expanded):
            following = self.m.next_job(self, self._idle)
            if following is None:
                break
            # The job is this shadow's from now on: idle until it starts, and let go
            # (still idle) should the claim not take it.
            self.job_id, self.job, expanded = following
            updates = ()
            self.vacate_time = vacate_time(self.job)
            self.lease = job_lease(self.job, s.lease)
            await self.m.record_claim(self)  # the claim's record names the job it runs
            self.stop_reason, self._stopping = None, asyncio.Event()
            self.start_seq = 1 << 62
            try:
                await self._reused()
            except _Evicted as exc:
                _log.info("claim of %s not reused: %s", grant.slot, exc)
                break
        await self._release()

    async def _resume(self) -> None:
        """Reconnect to the job an earlier daemon left running on a node of another host,
        and see it through (a claim reconnected to runs no other job)."""
        self.m.hold_lease(self)
        if await self._owner():
            await self._attend(self.job, self._lost("the schedd restarted", RESTARTED))
        await self._release()

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

    async def _run_job(self, slot: str, updates: Updates, expanded: Updates) -> bool:
        """Run the current job on the claim; whether the claim may run another."""
        if not await self._owner():
            return False
        self._sent, self._spooled = {}, True
        ad = await self._start(slot, updates, expanded)
        if ad is None:  # held or removed since the match
            return False
        return await self._attend(ad, self._activate(ad))

    async def _attend(self, ad: ClassAd, first: Awaitable[ClaimStatus]) -> bool:
        """Follow the job on the node from `first` (its activation, or a reconnection)
        to its end, and record that; whether the claim may run another job."""
        self.on_node = True
        try:
            status = await first
            while True:
                try:
                    outcome = await self._follow(ad, status)
                    ok = await self._finish(ad, outcome)
                    self.on_node = False
                    return ok
                except _Unreachable as exc:
                    if not self.remote:  # a node of this host's: its jobs go with it
                        raise
                    # It may run the job on: never run it elsewhere too before that is over.
                    status = await self._lost(str(exc), CUT)
        except _GaveUp:
            self.on_node, self._settled = False, True
        except _Evicted as exc:  # the claim is gone: the job runs again, elsewhere or later
            self.on_node = False
            await self._record_evicted(str(exc))
        except TransferError as exc:
            self.on_node = False
            await self._hold(exc.reason, exc.code, exc.subcode)
        return False

    async def _activate(self, ad: ClassAd) -> ClaimStatus:
        try:
            return await self._call(self.client.activate(self.claim_id, ad))
        except _Unreachable as exc:
            if not self.remote:
                raise
            return await self._lost(str(exc), CUT)

    async def _lost(self, why: str, reason: str) -> ClaimStatus:
        """The node of another host does not answer (`why`), or the schedd restarted:
        the job may run on there. Disconnected (022, HTCondor's `reason`) until the node
        answers within the lease: reconnected (023), the claim's status returned. The
        run is given up on (024, the job back to idle: `_GaveUp`) once the node says the
        job or its claim is gone, or the lease has surely run out there."""
        deadline = self.m.now() + self.lease + self.vacate_time + LEASE_MARGIN
        await self.m.disconnected(self, why, reason, deadline)
        link, wait = self.link, self.m.settings.alive_interval
        while True:
            left = deadline - self.m.now()
            if left <= 0:
                await self._give_up(
                    f"Job disconnected too long: JobLeaseDuration ({self.lease:g} seconds) expired"
                )
            if link is not None and not link.up.is_set():
                await wait_event(link.up, left)  # its keep-alives are answered again
                continue
            try:
                status = await asyncio.wait_for(self.client.status(self.claim_id), wait)
            except ClaimNotFound:
                await self._give_up(_CLAIM_NOT_FOUND)
            except (StartdError, TimeoutError) as exc:
                _log.info("job %s: %s does not answer yet: %s", self.job_id, self.address, exc)
                await asyncio.sleep(min(wait, max(0.0, left)))
                continue
            if status.state is ClaimState.RELEASED:
                await self._give_up(_CLAIM_NOT_FOUND)
            if status.state is ClaimState.CLAIMED:  # never activated: nothing runs there
                await self._release()
                await self._give_up(_NOT_FOUND)
            await self.m.reconnected(self)
            return status

    async def _give_up(self, reason: str) -> NoReturn:
        _log.warning("job %s: reconnection to %s failed: %s", self.job_id, self.address, reason)
        await self.m.gave_up(self, reason)
        raise _GaveUp(reason)

    async def _start(self, slot: str, updates: Updates, expanded: Updates) -> ClassAd | None:
        """Record the claim and start the job; its ad to run, or None if it is not idle."""
        jid = self.job_id
        attrs: dict[str, Any] = {name: ExprTree(text) for name, text in updates}
        attrs.update(
            RemoteHost=slot,
            LastRemoteHost=slot,
            StartdIpAddr=self.address,
            PublicClaimId=public_claim_id(self.claim_id),
        )

        def start(q: JobQueue) -> tuple[int, ClassAd] | None:
            try:
                q.job_started(jid, attrs)  # one transaction
            except (InvalidTransition, JobNotFound):
                return None
            return q.last_seq, q.get(jid)  # one writer: last_seq is job_started's change

        started = await self.m.write(start)
        if started is None:
            return None
        self.start_seq, ad = started
        self._started_at = self.m.now()
        self.vacate_time = vacate_time(ad)
        _log.info("job %s started on %s", jid, slot)
        return apply_updates(ad, expanded)

    async def _follow(self, ad: ClassAd, status: ClaimStatus) -> Outcome:
        """Follow the claim from `status` to the job's end (its outcome)."""
        if status.transfer_input:
            await self._send_input(ad)
        last_heard = self.m.monotonic()
        link = self.link
        wait = self.m.settings.alive_interval if link is None else _LONG_POLL
        vacated = False
        while True:
            if status.state is ClaimState.ENDED and status.outcome is not None:
                return status.outcome
            if status.state is ClaimState.RELEASED:
                raise _Evicted("the execute node released the claim")
            if self._stopping.is_set() and not vacated:
                vacated = True
                if status.state in (ClaimState.STARTING, ClaimState.RUNNING):
                    reason = self.stop_reason.value if self.stop_reason else "vacate"
                    status = await self._call(self.client.vacate(self.claim_id, reason))
                continue
            poll = asyncio.create_task(
                self.client.status(self.claim_id, wait=wait, version=status.version)
            )
            # Until the job is told to stop, a stop request cuts the long poll short; and
            # a node of another host that stops answering its keep-alives, too.
            stopping = None if vacated else asyncio.create_task(self._stopping.wait())
            cut = None if link is None else asyncio.create_task(link.down.wait())
            waits = {poll} | {task for task in (stopping, cut) if task is not None}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (stopping, cut):
                    if task is not None:
                        task.cancel()
            if not poll.done():
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)
                if link is not None and link.down.is_set():
                    raise _Unreachable(f"the execute node {self.address} does not answer")
                continue
            try:
                status = poll.result()
                last_heard = self.m.monotonic()
            except ClaimNotFound as exc:
                raise _Evicted(f"the execute node lost the claim: {exc}") from None
            except StartdUnavailable as exc:
                # A node of another host is disconnected when its link says so (its
                # keep-alives unanswered); one of this host's, which ends its jobs with
                # it, is given the whole claim lease.
                silent = self.m.monotonic() - last_heard
                if (link is not None and link.down.is_set()) or (
                    link is None and silent > self.m.settings.lease
                ):
                    raise _Unreachable(
                        f"no word from the execute node for {silent:.0f} s: {exc}"
                    ) from None
                await asyncio.sleep(_RETRY)

    async def _call(self, call: Any) -> ClaimStatus:
        try:
            status: ClaimStatus = await call
        except ClaimNotFound as exc:
            raise _Evicted(f"the execute node lost the claim: {exc}") from None
        except StartdUnavailable as exc:
            raise _Unreachable(f"the execute node does not answer: {exc}") from None
        except StartdError as exc:  # refused: the job cannot run on this claim
            raise _Evicted(f"the execute node refused: {exc}") from None
        return status

    async def _send_input(self, ad: ClassAd) -> None:
        s = self.m.settings
        tar = s.transfers / f"{self.claim_id}.in.tar"
        spooled = s.spooled(self.job_id)
        account = self.account

        limit = _job_limit(ad, "MaxTransferInputMB", s.max_input)

        def build() -> int:
            tar.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with private_file(tar) as out, as_owner(account):
                self._spooled = spooled.is_dir()
                entries = input_entries(ad, spooled)
                try:  # before a byte is packed or sent
                    limit.check(input_size(entries), "the input sandbox")
                except SandboxTooLarge as exc:
                    raise TransferError(
                        f"Transfer input files failure: {exc}",
                        HoldReasonCode.MaxTransferInputSizeExceeded,
                    ) from None
                return pack(entries, out, dereference=True)

        try:
            size = await asyncio.to_thread(build)
            await self._call(self.client.send_input(self.claim_id, tar))
        finally:
            await asyncio.to_thread(_unlink, tar)
        # Recorded with the end of the run: one queue transaction fewer a job.
        self._sent = {"BytesSent": size}

    async def _fetch(self, ad: ClassAd, *, spool: bool) -> int:
        """Bring the output sandbox back: into Iwd (or the spool, for an eviction)."""
        s = self.m.settings
        tar = s.transfers / f"{self.claim_id}.out.tar"
        limit = _job_limit(ad, "MaxTransferOutputMB", s.max_output)

        def check(size: int) -> None:
            limit.check(size, "the output sandbox", at_least=True)

        try:
            if not self._sent:  # else the input's tar has made the directory
                await asyncio.to_thread(tar.parent.mkdir, parents=True, exist_ok=True)
            try:
                await self.client.fetch_output(self.claim_id, tar, check)
            except SandboxTooLarge as exc:  # the rest is not read; nothing is placed
                raise TransferError(
                    f"Transfer output files failure: {exc}",
                    HoldReasonCode.MaxTransferOutputSizeExceeded,
                ) from None
            except StartdUnavailable as exc:
                if self.remote:  # cut off, perhaps for a while: the output waits there
                    raise _Unreachable(f"the output sandbox did not arrive: {exc}") from None
                raise _Evicted(f"the output sandbox is lost with the execute node: {exc}") from None
            except ClaimNotFound as exc:
                # The node died with the output: its run is lost, not the job.
                raise _Evicted(f"the output sandbox is lost with the execute node: {exc}") from None
            except StartdError as exc:
                raise TransferError(
                    f"Transfer output files failure: {exc}", HoldReasonCode.TransferOutputError
                ) from exc
            account, kept = self.account, s.spooled(self.job_id)

            def place() -> int:
                try:
                    with open(tar, "rb") as source:  # the daemon's file, read by the owner's
                        if spool:
                            owned_dir(kept.parent, None, 0o711)  # users pass through
                            owned_dir(kept, account)
                            with as_owner(account):
                                return unpack_to(source, kept)
                        with as_owner(account):
                            return unpack_output(source, ad, limit)
                finally:
                    _unlink(tar)

            return await asyncio.to_thread(place)
        except BaseException:
            await asyncio.to_thread(_unlink, tar)
            raise

    async def _finish(self, ad: ClassAd, outcome: Outcome) -> bool:
        """Record how the run ended; whether the claim may take another job."""
        reason = self.stop_reason
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
                    received = await self._fetch(ad, spool=evicted)
                except TransferError as exc:
                    await self._hold(exc.reason, exc.code, exc.subcode)
                    return False
        usage = self._usage(ad, outcome, received)
        if outcome.kind is OutcomeKind.EXITED:
            if reason is None:  # the node readies the claim while the exit is recorded
                self._reusing = asyncio.create_task(self._call(self.client.reuse(self.claim_id)))
            await self._record_exit(usage, outcome, scan=reason is None)
            return reason is None
        await self._record_stop(usage, "evicted by the execute node")
        return False

    def _usage(self, ad: ClassAd, outcome: Outcome, received: int) -> dict[str, Any]:
        def num(name: str) -> float:
            value = ad.get(name, 0)
            return float(value) if isinstance(value, int | float) else 0.0

        usage: dict[str, Any] = {
            "RemoteUserCpu": outcome.user_cpu,
            "RemoteSysCpu": outcome.sys_cpu,
            "CumulativeRemoteUserCpu": num("CumulativeRemoteUserCpu") + outcome.user_cpu,
            "CumulativeRemoteSysCpu": num("CumulativeRemoteSysCpu") + outcome.sys_cpu,
            "RemoteWallClockTime": num("RemoteWallClockTime") + max(0.0, outcome.wall),
            "BytesRecvd": received,
            **self._sent,
        }
        if outcome.disk_kb:
            usage["DiskUsage"] = max(outcome.disk_kb, 1)
        return usage

    async def _record_exit(
        self, usage: Mapping[str, Any], outcome: Outcome, *, scan: bool = False
    ) -> None:
        """Record the exit; with `scan`, read the idle jobs that may follow on the claim
        in the same call on the queue thread (`_idle`)."""
        jid = self.job_id
        spooled = self.m.settings.spooled(jid)
        idle = self.m.idle_scan(self) if scan else None

        def record(q: JobQueue) -> str:
            by_signal = outcome.signal is not None
            code = outcome.signal if by_signal else outcome.exit_code
            try:  # the usage with the exit, in its transaction: one commit
                return q.job_exited(jid, code or 0, by_signal=by_signal, usage=usage).value
            except InvalidTransition:  # held or removed as it ended: that stands
                with contextlib.suppress(InvalidTransition, JobNotFound):
                    q.update(jid, usage)
                return after_stop(q, jid)
            except JobNotFound:
                return "gone from the queue"

        def record_and_scan(q: JobQueue) -> tuple[str, list[ClassAd]]:
            return record(q), ([] if idle is None else idle(q))

        result, self._idle = await self.m.write(record_and_scan)
        if self._spooled:
            await asyncio.to_thread(_remove_tree, spooled)
        how = (
            f"signal {outcome.signal}"
            if outcome.signal is not None
            else f"exit {outcome.exit_code}"
        )
        _log.info("job %s ended (%s): %s", jid, how, result)

    async def _record_stop(self, usage: Mapping[str, Any], why: str) -> None:
        """The run stopped before the job ended: back to idle, or held/removed as asked."""
        jid, reason = self.job_id, self.stop_reason

        def record(q: JobQueue) -> str:
            try:
                q.update(jid, usage)
                status = JobStatus(q.get(jid)["JobStatus"])
                if status in RUNNING:
                    q.job_evicted(jid)
                    return "back to idle"
                return after_stop(q, jid)
            except (InvalidTransition, JobNotFound):
                return "gone from the queue"

        result = await self.m.write(record)
        if reason is StopReason.REMOVE:
            await asyncio.to_thread(_remove_tree, self.m.settings.spooled(jid))
        _log.info("job %s stopped (%s): %s", jid, reason.value if reason else "evicted", result)

    async def _record_evicted(self, why: str) -> None:
        _log.warning("job %s: %s", self.job_id, why)
        with contextlib.suppress(HTGridError):
            await self._record_stop(self._sent, why)

    async def _hold(self, reason: str, code: HoldReasonCode, subcode: int) -> bool:
        """Hold the job (a removed one leaves the queue); whether this held it."""
        jid, sent = self.job_id, self._sent
        _log.warning("job %s held: %s", jid, reason)

        def hold(q: JobQueue) -> bool:
            held = False
            with contextlib.suppress(InvalidTransition, JobNotFound):
                if sent:
                    q.update(jid, sent)
                held = bool(q.act(JobAction.Hold, jid, SCHEDD, reason, code=code, subcode=subcode))
            with contextlib.suppress(InvalidTransition, JobNotFound):
                after_stop(q, jid)
            return held

        return bool(await self.m.write(hold))

    async def _reused(self) -> None:
        """Once the node has readied the claim for another job (_Evicted if it has not)."""
        task, self._reusing = self._reusing, None
        if task is not None:
            await task

    async def _release(self) -> None:
        with contextlib.suppress(HTGridError):
            await self._reused()  # never release a claim while it is being reused
        if self._settled:
            return
        self._settled = True  # once: a claim released (or left to its lease) is over
        # The node answers once the job is gone: its vacate time, and a margin; a node
        # that does not answer must not hold the shadow (nor a shutdown) forever.
        wait = self.vacate_time + self.m.settings.alive_interval
        try:
            await asyncio.wait_for(self.client.release(self.claim_id), wait)
        except ClaimNotFound:
            pass  # released, expired, or the node restarted: the claim is gone all the same
        except (StartdError, TimeoutError) as exc:
            # Its record stays: the schedd's next start asks the node again.
            why = exc if isinstance(exc, StartdError) else f"no answer within {wait:g} s"
            _log.warning("claim of job %s: the node did not release it: %s", self.job_id, why)
            return
        await self.m.forget_claim(self)


def claimed_slot(machine_ad: ClassAd, grant: ClaimGrant) -> ClassAd:
    """The claimed dynamic slot, as the next job on it is matched against."""
    ad = copy(machine_ad)
    have = grant.resources
    for name, value in (
        ("Cpus", have.cpus),
        ("Memory", have.memory),
        ("Disk", have.disk),
        ("GPUs", len(have.gpus)),
    ):
        ad[name] = value
    ad["Name"] = grant.slot
    ad["State"], ad["Activity"] = "Claimed", "Idle"
    return ad


def _job_limit(ad: ClassAd, attr: str, default: SizeLimit) -> SizeLimit:
    """The job's own cap on a sandbox (`attr`, MiB; -1: none), else the daemon's."""
    value = ad.eval(attr) if attr in ad else None
    if isinstance(value, int) and not isinstance(value, bool):
        return SizeLimit(f"{attr} (the job's)", None if value < 0 else value)
    return default


def vacate_time(ad: ClassAd) -> float:
    """How long the node gives the job to stop before killing it (JobMaxVacateTime)."""
    vacate = ad.get("JobMaxVacateTime")
    if isinstance(vacate, int | float) and not isinstance(vacate, bool) and vacate >= 0:
        return float(vacate)
    return 10.0


def after_stop(q: JobQueue, jid: JobId) -> str:
    """A job no longer running that was removed meanwhile leaves the queue."""
    status = JobStatus(q.get(jid)["JobStatus"])
    if status == JobStatus.REMOVED:
        q.destroy(jid)
        return "removed"
    return status.label.lower()


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
