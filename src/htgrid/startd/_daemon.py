"""The execute node (HTCondor's condor_startd): one partitionable slot, claimed piecewise.

Start-up: take the node's lock (waiting for a startd still shutting down), kill what a
killed predecessor's jobs left running (found by their marker) and remove its sandboxes
(`_startup`), detect the machine, serve the API, advertise. Then, until stopped:

- claims carve dynamic slots; activations start a `Starter` each;
- claims whose lease ran out are vacated and released (their schedd is gone; for a
  job with no lease, once its schedd's keep-alives stopped), idle claims past
  CLAIM_WORKLIFE are released, and STARTD_NOCLAIM_SHUTDOWN is checked: unclaimed that
  long, the node exits with `EXIT_IDLE` (so the master shuts the pool down and runs its
  shutdown script). These checks run at the next deadline among them, after each
  change of the claims or keep-alive, and at least every `_NAP` seconds (the wall clock
  may jump), not on a fixed tick: an idle node sleeps;
- the slot ads go to the collector every UPDATE_INTERVAL and soon after each change
  (`_advertise`).

Stopping (SIGTERM, the master gone, idle): the slot becomes Drained, every job is
vacated, the schedds get a moment to collect what they may, claims are released, the
ads are invalidated.

A node on its own (`network`: `htgrid startd`, perhaps on another host) also serves its
API over TLS, and registers with a broker when schedds cannot connect to it
(`_network`). It presents the token of its etc/tokens.d to the collector: should the
pool refuse it before its first update was taken (no token, a token of another pool,
revoked, or for another node's name), it stops at once, saying why
(`ExitReason.REFUSED`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request

from htgrid._aio import on_parent_gone, take_sighup, wait_event
from htgrid._privsep import OwnerPolicy, closed_to_others
from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.classad.fast import requirements_hold
from htgrid.collector import CollectorClient
from htgrid.errors import HTGridError
from htgrid.pool import LaunchError, family_marker, trusted_ca_files
from htgrid.queue import VacateReasonCode
from htgrid.startd._ads import AdContext, dynamic_ad, partitionable_ad, slot_state
from htgrid.startd._advertise import Advertiser
from htgrid.startd._api import create_app, start_unix_server
from htgrid.startd._claims import Claim, Slots, has_lease, job_lease, request_of
from htgrid.startd._config import StartdConfig
from htgrid.startd._errors import ClaimRefused, ClaimStateError, StartdError
from htgrid.startd._machine import MachineInfo, detect
from htgrid.startd._network import NodeNetwork
from htgrid.startd._policy import PolicyPoller
from htgrid.startd._reconfig import reread
from htgrid.startd._starter import Starter
from htgrid.startd._startup import clean_up_after_predecessor, hold_lock
from htgrid.startd._states import ACTIVE, ClaimState, Outcome, OutcomeKind, SlotState
from htgrid.startd._wire import AdChanges, ClaimGrant, ClaimStatus

__all__ = ["EXIT_IDLE", "ExitReason", "Startd"]

_log = logging.getLogger("htgrid.startd")

EXIT_IDLE: Final = 99  # HTCondor's DAEMON_NO_RESTART: the master must not restart it
VANILLA: Final = 5
#: The longest the node's checks sleep without a deadline or a change (the worklife is
#: counted on the wall clock, which may jump).
_NAP: Final = 5.0
#: How far past a deadline the checks run (a lease ran out once exceeded, not reached).
_PAST: Final = 0.01
_COLLECT_WAIT: Final = 5.0  # how long a stopping node lets schedds fetch ended jobs


class ExitReason(enum.Enum):
    """Why the execute node stopped."""

    STOPPED = "stopped"  # SIGTERM or SIGINT
    IDLE = "idle"  # STARTD_NOCLAIM_SHUTDOWN
    PARENT_GONE = "parent gone"  # the master that started it died
    REFUSED = "refused by the pool"  # the collector refused its token or its ads


class Startd:
    """One execute node for one pool home."""

    def __init__(
        self,
        config: StartdConfig,
        *,
        pool: str | None = None,
        parent_fd: int | None = None,
        network: bool = False,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        machine: MachineInfo | None = None,
    ) -> None:
        self.config = config
        self.pool = pool or config.collector_host
        self._parent_fd = parent_fd
        self.network = network
        self._clock = clock
        self._monotonic = monotonic
        self._machine = machine
        self.started = int(clock())
        self.marker = family_marker(config.execute_dir)
        # Whose jobs run here, and as whom: the node's user (root: each job as its owner).
        self.policy = OwnerPolicy(allow_root=config.allow_root_jobs)
        self._stop = asyncio.Event()
        self._reason = ExitReason.STOPPED
        self._slots: Slots | None = None
        self._ctx: AdContext | None = None
        self._last_in_use = monotonic()
        self._check = asyncio.Event()  # the claims changed: their deadlines too
        self._net = NodeNetwork(self, clock)  # the TLS API and the broker, if on its own
        self._ads = Advertiser(self, clock, lambda: self.request_stop(ExitReason.REFUSED))
        self._reconfigs: set[asyncio.Task[None]] = set()
        # SUSPEND, PREEMPT...: evaluated on the running jobs (`_policy`).
        self.policy_poller = PolicyPoller(
            lambda: (self.slots, self.ctx), lambda: self.config.policy, clock
        )

    # -- what the API calls -------------------------------------------------------------

    @property
    def slots(self) -> Slots:
        if self._slots is None:
            raise StartdError("the execute node is starting")
        return self._slots

    @property
    def ctx(self) -> AdContext:
        if self._ctx is None:
            raise StartdError("the execute node is starting")
        return self._ctx

    def health(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "name": self.slots.name,
            "started": self.started,
            "address": self.ctx.address,
            "state": self.slots.state.value,
            "claims": len(self.slots.claims),
        }

    def slot_ads(self) -> list[ClassAd]:
        now = self._clock()
        slots, ctx = self.slots, self.ctx
        return [partitionable_ad(ctx, slots, now)] + [
            dynamic_ad(ctx, slots, claim, now) for claim in slots.claims.values()
        ]

    def request_claim(
        self, claim_id: str, job_ad: ClassAd, schedd: str, lease: float
    ) -> ClaimGrant:
        slots = self.slots
        slots.move(slot_state(self.ctx, slots))
        pslot = partitionable_ad(self.ctx, slots, self._clock())
        universe = job_ad.get("JobUniverse", VANILLA)
        if universe != VANILLA:
            raise ClaimRefused(f"{slots.name} runs vanilla jobs only, not universe {universe}")
        if ExprTree(self.config.start).eval(pslot, job_ad) is not True:
            raise ClaimRefused(f"{slots.name} does not take this job: START is not true for it")
        if not requirements_hold(job_ad, pslot):
            raise ClaimRefused(f"the job's Requirements do not match {slots.name} now")
        request = request_of(job_ad, pslot, slots.free.gpus)  # carve() checks the sizes
        worklife = self.config.claim_worklife
        claim = slots.carve(claim_id, request, job_ad, schedd, lease, worklife=worklife)
        _log.info(
            "%s claimed by %s for job %s (%d cpus, %d MB, %d KB%s)",
            claim.name,
            schedd,
            claim.job_id,
            request.cpus,
            request.memory,
            request.disk,
            f", GPUs {','.join(request.gpus)}" if request.gpus else "",
        )
        self._changed()
        return ClaimGrant(
            claim_id,
            claim.name,
            lease,
            self.started,
            request,
            tar_activation=True,
            reuse_changes=True,
        )

    async def claim_status(
        self, claim_id: str, wait: float, version: int, *, renew: bool = True
    ) -> ClaimStatus:
        claim = self.slots.get(claim_id, renew=renew)
        claim.watchers += 1
        try:
            await claim.wait_change(version, wait)
        finally:
            claim.watchers -= 1
        # Not renewed as the wait ends: a schedd cut off meanwhile sent nothing since.
        return claim.status()

    async def activate(
        self,
        claim_id: str,
        job_ad: ClassAd | AdChanges,
        input_data: bytes | None = None,
        after: str | None = None,
        *,
        input_again: bool = False,
    ) -> ClaimStatus:
        """Start the job on the claim; its input sandbox follows (`receive_input`), or
        comes with the activation (`input_data`, a small one's tar). With `after`, the
        job ("cluster.proc") whose end the schedd has recorded: a claim ENDED for that
        job is reused for this one first, in the same request (`reuse`); the job's ad
        may then come as its changes from that job's, and its input as that job's
        again (`input_again`)."""
        claim = self.slots.get(claim_id)
        if isinstance(job_ad, AdChanges) or input_again:
            if after is None or str(claim.job_id) != after:
                raise ClaimStateError(f"claim {claim_id} ran job {claim.job_id}, not {after}")
            if isinstance(job_ad, AdChanges):
                job_ad = job_ad.applied_to(claim.job_ad)
            if input_again:
                if claim.last_input is None:
                    raise ClaimStateError(f"claim {claim_id} keeps no input of job {after}")
                input_data = claim.last_input
        previous = None  # the last job's starter, whose files go as this one's sandbox comes
        if after is not None and claim.state is ClaimState.ENDED:
            if str(claim.job_id) != after:
                raise ClaimStateError(f"claim {claim_id} ran job {claim.job_id}, not {after}")
            previous = await self._reuse(claim, remove=False)
        try:
            status = await self._start(claim, job_ad, input_data, previous)
            previous = None  # removed with the new sandbox's making
        finally:
            if previous is not None:
                await asyncio.to_thread(previous.remove)
        return status

    async def _start(
        self, claim: Claim, job_ad: ClassAd, input_data: bytes | None, previous: Starter | None
    ) -> ClaimStatus:
        claim_id = claim.claim_id
        if claim.state is not ClaimState.CLAIMED:
            raise ClaimStateError(f"claim {claim_id} is {claim.state.value}: already activated")
        if self.slots.state is SlotState.DRAINED:
            raise ClaimRefused(f"{claim.name} is shutting down: it starts no job")
        machine_ad = dynamic_ad(self.ctx, self.slots, claim, self._clock())
        if claim.uses:  # a reused claim takes another job: one that fits it
            self._check_fits(claim, job_ad, machine_ad)
        elif _ids(job_ad) != _ids(claim.job_ad):
            raise ClaimStateError(f"claim {claim_id} was made for job {claim.job_id}")
        starter = Starter(
            claim,
            job_ad,
            self.config,
            machine_ad,
            marker=self.marker,
            clock=self._clock,
            changed=self._active,
            policy=self.policy,
        )
        claim.job_ad = job_ad
        claim.lease = job_lease(job_ad, claim.lease)  # the job's own lease, from now on
        claim.no_lease = not has_lease(job_ad)
        claim.starter = starter
        claim.transfer_input = starter.transfer
        claim.move(ClaimState.STARTING, self._clock())
        try:
            took = await starter.prepare(input_data, previous)
        except OSError as exc:
            claim.outcome = Outcome(OutcomeKind.FAILED, reason=f"cannot make the sandbox: {exc}")
            claim.move(ClaimState.ENDED, self._clock())
        except LaunchError as exc:  # the job's owner may not run jobs here: it is held
            _log.warning("%s: job %s refused: %s", claim.name, claim.job_id, exc.reason)
            claim.outcome = Outcome(OutcomeKind.FAILED, reason=exc.reason, hold_code=int(exc.code))
            claim.move(ClaimState.ENDED, self._clock())
        else:
            if input_data is not None and starter.transfer:
                claim.transfer_input = False  # taken: the schedd sends it no more
                if not took:
                    await starter.receive_input(_chunk(input_data))
        claim.last_input = input_data if starter.transfer else None
        self._active()
        return claim.status()

    def _check_fits(self, claim: Claim, job_ad: ClassAd, machine_ad: ClassAd) -> None:
        if job_ad.get("JobUniverse", VANILLA) != VANILLA:
            raise ClaimRefused(f"{claim.name} runs vanilla jobs only")
        if ExprTree(self.config.start).eval(machine_ad, job_ad) is not True:
            raise ClaimRefused(f"{claim.name} does not take this job: START is not true for it")
        if not requirements_hold(job_ad, machine_ad):
            raise ClaimRefused(f"the job's Requirements do not match {claim.name}")
        if not claim.resources.fits(request_of(job_ad, machine_ad, claim.resources.gpus)):
            raise ClaimRefused(f"the job does not fit in {claim.name}")

    def alive(self, claim_ids: list[str], every: float | None = None) -> list[str]:
        """The schedd's keep-alive for its claims here (sent each `every` seconds);
        those this node has not."""
        unknown = self.slots.renew(claim_ids, every)
        if every is not None:
            self._check.set()  # a job with no lease lasts as long as its keep-alives say
        return unknown

    async def reuse(self, claim_id: str) -> ClaimStatus:
        """The schedd has the job's end and keeps the claim for its next job."""
        claim = self.slots.get(claim_id)
        if claim.state is not ClaimState.ENDED:
            raise ClaimStateError(f"claim {claim_id} is {claim.state.value}: its job is not over")
        await self._reuse(claim)
        return claim.status()

    async def _reuse(self, claim: Claim, *, remove: bool = True) -> Starter | None:
        """Ready the claim for its next job; with `remove` false, its last job's files
        are left for the caller to remove: that job's starter (if any)."""
        if claim.closing:  # past CLAIM_WORKLIFE at its last job's end: it is over
            await self._release(claim)
            raise ClaimRefused(
                f"{claim.name} takes no more jobs: its claim is older than CLAIM_WORKLIFE "
                f"({claim.worklife:g} seconds) and was released"
            )
        previous = claim.starter
        if previous is not None:
            await (previous.cleanup() if remove else previous.stop())
        claim.starter, claim.outcome, claim.job_start = None, None, None
        claim.transfer_input = False
        claim.uses += 1
        claim.move(ClaimState.CLAIMED, self._clock())
        self._active()
        return None if remove else previous

    async def receive_input(self, claim_id: str, request: Request) -> ClaimStatus:
        claim = self.slots.get(claim_id)
        starter = claim.starter
        if (
            starter is None
            or not starter.transfer
            or starter.input_received
            or claim.state is not ClaimState.STARTING
        ):
            raise ClaimStateError(f"claim {claim_id} does not wait for input files")
        await starter.receive_input(request.stream())
        return claim.status()

    async def refresh_proxy(self, claim_id: str, data: bytes) -> ClaimStatus:
        """The running job's renewed X.509 proxy, from the shadow (see Starter)."""
        claim = self.slots.get(claim_id)
        starter = claim.starter
        if starter is None or claim.state not in ACTIVE:
            raise ClaimStateError(f"claim {claim_id} runs no job: no proxy to refresh")
        await starter.replace_proxy(data)
        return claim.status()

    def output(self, claim_id: str) -> bytes | Path:
        """The ended job's output tar: held in memory (a small one), or its file."""
        claim = self.slots.get(claim_id)
        outcome = claim.outcome
        if claim.starter is None or outcome is None or not outcome.output:
            raise ClaimStateError(f"claim {claim_id} has no output sandbox (yet)")
        held = claim.starter.output_inline
        return claim.starter.output_tar if held is None else held

    def vacate(self, claim_id: str, reason: str) -> ClaimStatus:
        claim = self.slots.get(claim_id)
        if claim.starter is not None:
            claim.starter.vacate(reason)
        return claim.status()

    async def release(self, claim_id: str) -> None:
        claim = self.slots.get(claim_id)
        await self._release(claim)

    async def _release(self, claim: Claim) -> None:
        if claim.state is ClaimState.RELEASED:
            return
        if claim.starter is not None:
            await claim.starter.cleanup()  # vacates a job still running, first
        if claim.claim_id in self.slots.claims:  # not released while the job was stopped
            self.slots.release(claim)
            _log.info("%s released", claim.name)
            self._changed()

    def _changed(self) -> None:
        """Resources were claimed or given back: advertised at once (`Advertiser`)."""
        self._last_in_use = self._monotonic()
        self._check.set()
        self._ads.changed()

    def _active(self) -> None:
        """A claim's activity changed: advertised soon, with the others' (`Advertiser`)."""
        self._check.set()
        self._ads.active()

    # -- running ------------------------------------------------------------------------

    def _on_sighup(self) -> None:
        task = asyncio.create_task(self.reconfig(), name="reconfig")
        self._reconfigs.add(task)
        task.add_done_callback(self._reconfigs.discard)

    async def reconfig(self) -> None:
        """condor_reconfig (SIGHUP): the knobs a running node takes (`StartdConfig.
        reconfigured`), its ads sent again at once (Start, STARTD_ATTRS)."""
        config = await reread(self.config)
        if config is None:
            return
        self.config = config
        if self._ctx is not None:
            self._ctx.config = config
        self.policy = OwnerPolicy(allow_root=config.allow_root_jobs)
        self.policy_poller.wake.set()
        self._check.set()
        self._ads.soon()

    def request_stop(self, reason: ExitReason = ExitReason.STOPPED) -> None:
        if not self._stop.is_set():
            self._reason = reason
            self._stop.set()

    async def run(self) -> ExitReason:
        """Serve until stopped; why it stopped."""
        cfg = self.config
        cfg.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = await asyncio.to_thread(hold_lock, cfg.lock_file)
        try:
            await asyncio.to_thread(cfg.make_execute_dir)
            closed = closed_to_others(cfg.execute_dir) if self.policy.shared else None
            if closed is not None:
                _log.warning(
                    "%s is closed to other users: their jobs cannot enter their sandboxes "
                    "in EXECUTE (%s)",
                    closed,
                    cfg.execute_dir,
                )
            await asyncio.to_thread(clean_up_after_predecessor, self.marker, cfg.execute_dir)
            machine = self._machine
            if machine is None:
                machine = await asyncio.to_thread(detect, cfg)
            self._slots = Slots(
                machine.offered, machine.hostname, clock=self._clock, monotonic=self._monotonic
            )
            address = f"<{machine.hostname}?sock={cfg.socket}>"
            self._ctx = AdContext(cfg, machine, address, self.started)
            await self._serve()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(cfg.socket)
            os.close(lock)
        _log.info("htgrid startd (pid %d) stopped: %s", os.getpid(), self._reason.value)
        return self._reason

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        take_sighup(loop, self._on_sighup)
        if self._parent_fd is not None:
            on_parent_gone(loop, self._parent_fd, self._parent_gone)
        limits = self.config.api_limits
        server, serving = await start_unix_server(
            create_app(self, limits), self.config.socket, limits
        )
        servers = [(server, serving)]
        where = str(self.config.socket)
        cas = await asyncio.to_thread(trusted_ca_files, self.config) if self.network else []
        if self.network and not cas:
            _log.warning(
                "no CA certificate to trust in %s, to know the pool's schedds by: serving "
                "this host only. To join a pool of other hosts, add its CA (`htgrid trust "
                "add NAME ca.crt`, with the pool's etc/ca/ca.crt)",
                self.config.ca_dir,
            )
        elif self.network:
            try:
                tls_server, tls_serving, where = await self._net.serve_tls(cas)
            except BaseException:
                server.should_exit = True
                await serving
                raise
            servers.append((tls_server, tls_serving))
        slots = self.slots
        _log.info(
            "htgrid startd (pid %d) serving %s: %s, %d cpus, %d MB, %d KB, %d GPUs; pool %s",
            os.getpid(),
            where,
            slots.name,
            slots.offered.cpus,
            slots.offered.memory,
            slots.offered.disk,
            len(slots.offered.gpus),
            self.pool,
        )
        async with CollectorClient(
            self.pool, timeout=10.0, home=self.config.home, daemon=True
        ) as collector:
            tasks = [
                asyncio.create_task(self._ads.run(collector), name="advertise"),
                asyncio.create_task(self._tick_loop(), name="leases"),
                asyncio.create_task(self.policy_poller.run(), name="policy"),
            ]
            broker = self.config.broker(self.pool)
            if broker is not None and self._net.tls is not None:
                tasks.append(asyncio.create_task(self._net.ccb_loop(broker), name="ccb"))
            try:
                await self._stop.wait()
            finally:
                await self._shut_down(collector)
                for task in tasks:
                    task.cancel()
                await self._net.close()
                await asyncio.gather(*tasks, return_exceptions=True)
                for each, _ in servers:
                    each.should_exit = True
                for _, task in servers:
                    await task

    def _parent_gone(self) -> None:
        _log.warning("the master that started this startd is gone: stopping")
        self.request_stop(ExitReason.PARENT_GONE)

    async def _tick_loop(self) -> None:
        while True:
            await wait_event(self._check, self._next_check())
            self._check.clear()
            slots = self.slots
            for claim in slots.expired():
                await self._expire(claim)
            wall = self._clock()
            for claim in [c for c in slots.claims.values() if c.worn_out(wall)]:
                _log.info(
                    "%s: idle claim of %s older than CLAIM_WORKLIFE (%g seconds): released",
                    claim.name,
                    claim.schedd,
                    claim.worklife,
                )
                await self._release(claim)
            now = self._monotonic()
            if slots.claims:
                self._last_in_use = now
            limit = self.config.noclaim_shutdown
            if limit and now - self._last_in_use > limit:
                _log.info("no claim for %g s (STARTD_NOCLAIM_SHUTDOWN): shutting down", limit)
                self.request_stop(ExitReason.IDLE)

    def _next_check(self) -> float:
        """Seconds until the next check is due: the first lease to run out, idle claim
        to wear out or STARTD_NOCLAIM_SHUTDOWN, at most `_NAP`."""
        due = self.slots.next_due()
        limit = self.config.noclaim_shutdown
        if due is None and limit:
            due = self._last_in_use + limit - self._monotonic()
        return _NAP if due is None else min(_NAP, due + _PAST)

    async def _expire(self, claim: Claim) -> None:
        if claim.state in ACTIVE:
            if claim.limit() < claim.lease:
                _log.warning(
                    "%s: the keep-alives of %s stopped and job %s has no lease "
                    "(JobLeaseDuration): vacating",
                    claim.name,
                    claim.schedd,
                    claim.job_id,
                )
            else:
                _log.warning(
                    "%s: no word from %s within the lease: vacating", claim.name, claim.schedd
                )
            if claim.starter is not None:
                claim.starter.vacate("vacate")
        elif claim.state in (ClaimState.CLAIMED, ClaimState.ENDED):
            _log.warning("%s: the lease of %s ran out: released", claim.name, claim.schedd)
            await self._release(claim)

    # -- stopping -----------------------------------------------------------------------

    async def _shut_down(self, collector: CollectorClient) -> None:
        slots = self.slots
        slots.move(SlotState.DRAINED)
        with contextlib.suppress(HTGridError):
            await self._ads.advertise(collector)  # no new matches while the jobs go
        claims = list(slots.claims.values())
        for claim in claims:
            if claim.starter is not None:
                claim.starter.vacate(
                    "vacate",
                    why="The execute node is shutting down",
                    code=VacateReasonCode.StartdShutdown,
                )
        await asyncio.gather(*(c.starter.wait() for c in claims if c.starter is not None))
        if self._reason is ExitReason.STOPPED:
            # The schedds see their jobs evicted and may fetch what ON_EXIT_OR_EVICT keeps:
            # wait while some schedd still follows a claim, but not for one that left.
            deadline = self._monotonic() + _COLLECT_WAIT
            while self._monotonic() < deadline and any(
                c.watchers or self._monotonic() - c.renewed < 1.0 for c in slots.claims.values()
            ):
                await asyncio.sleep(0.05)
        for claim in list(slots.claims.values()):
            await self._release(claim)
        query = ClassAd({"MyType": "Query", "TargetType": "Machine"})
        query["Requirements"] = ExprTree(f"MyAddress == {quote(self.ctx.address)}")
        with contextlib.suppress(HTGridError):
            await collector.invalidate("INVALIDATE_STARTD_ADS", query)


async def _chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _ids(ad: ClassAd) -> tuple[object, object]:
    return ad.get("ClusterId"), ad.get("ProcId")
