"""Running vanilla jobs on execute nodes: one shadow (a task) per running job.

For each match of a vanilla job, a shadow (HTCondor's condor_shadow):

1. claims the matched slot on its startd with a fresh random claim id (the claim id is
   the capability: only its holder can use or release the claim);
2. records the claim in the job (RemoteHost, StartdIpAddr, the match's history) and
   starts it: `job_started`, which the event log writer turns into 001;
3. activates the claim with the job ad (its `$$()` macros filled) and, when the job's
   files travel, sends the input sandbox;
4. follows the claim with long polls, which are also its keep-alives: a claim not
   heard of within the lease (ALIVE_INTERVAL * MAX_CLAIM_ALIVES_MISSED) is given up on
   both sides;
5. when the job's run is over, records it: an exit goes to `job_exited` after the
   output files are back (the job's policy then completes, requeues or holds it: 005,
   004 or 012); an eviction (the node stopped or restarted, the lease ran out) to
   `job_evicted`, back to idle (004), its output spooled first if ON_EXIT_OR_EVICT; a
   failure to start or to transfer files holds the job;
6. releases the claim.

A job held or removed while it runs has its claim vacated (HoldKillSig, RemoveKillSig)
and a removed one then leaves the queue (`destroy`). A job is never reported done
unless its node said it exited; a node that vanished means eviction, never completion.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from htgrid.classad import ClassAd, quote
from htgrid.classad.fast import requirements_hold
from htgrid.negotiator import Expansion, Match, Updates, dollar_attributes, expand
from htgrid.net.security import CertificateError, pinned_ssl_context
from htgrid.queue import Change, ChangeKind, JobId, JobQueue, JobStatus
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem
from htgrid.schedd._shadow_run import RUNNING, ShadowRun, ShadowSettings, StopReason
from htgrid.schedd._worker import QueueWorker
from htgrid.startd import (
    TLS_CERTIFICATE,
    Resources,
    StartdClient,
    StartdError,
    host_port_of,
    request_of,
    socket_of,
)

__all__ = ["VANILLA", "ShadowManager", "ShadowSettings", "StopReason"]

_log = logging.getLogger("htgrid.schedd.shadow")

VANILLA: Final = 5
_FEED_BATCH: Final = 2000
_REUSE_SCAN: Final = 64  # idle jobs looked at for a claim whose job ended


class ShadowManager:
    """Starts a shadow per vanilla match, stops them on hold, removal or shutdown."""

    def __init__(
        self,
        worker: QueueWorker,
        settings: ShadowSettings,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._worker = worker
        self.settings = settings
        self._clock = clock
        self._monotonic = monotonic
        self._shadows: dict[JobId, ShadowRun] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._clients: dict[tuple[str, ...], StartdClient] = {}
        self._accepting = True
        self._seq = 0
        self._wake = worker.subscribe()
        self._faults = FaultLog(_log, "shadow")

    @property
    def busy(self) -> frozenset[JobId]:
        """Jobs with a shadow: not idle for the negotiator, whatever the queue says."""
        return frozenset(self._shadows)

    def status(self) -> dict[str, Any]:
        return {"vanilla_jobs_running": len(self._shadows)}

    # -- start-up -----------------------------------------------------------------------

    async def recover(self) -> list[JobId]:
        """Jobs left running on execute nodes by an earlier daemon go back to idle.

        The nodes were this daemon's children and stopped with it (their jobs killed),
        so the jobs are not running anywhere: evicting them is the truth, not a guess.
        """

        def evict(q: JobQueue) -> tuple[int, list[JobId]]:
            seq = q.last_seq
            evicted = []
            for ad in q.query(f"JobUniverse == {VANILLA} && JobStatus != 1 && JobStatus != 5"):
                jid = JobId(ad["ClusterId"], ad["ProcId"])
                if ad["JobStatus"] == JobStatus.REMOVED:
                    q.destroy(jid)
                elif ad["JobStatus"] in RUNNING:
                    q.job_evicted(jid)
                    evicted.append(jid)
            return seq, evicted

        self._seq, evicted = await self._worker.write(evict)
        for jid in evicted:
            _log.info("job %s had no execute node after the restart: back to idle", jid)
        return evicted

    # -- matches --------------------------------------------------------------------------

    def start(self, match: Match, job: ClassAd) -> bool:
        """Run a matched vanilla job on its slot; False when it runs already or we stop."""
        jid = match.job_id
        if not self._accepting or jid in self._shadows:
            return False
        address = match.machine_ad.get("MyAddress")
        client = self._client(match.machine_ad, address) if isinstance(address, str) else None
        if client is None:
            _log.warning("job %s: %s cannot be reached at %r", jid, match.machine, address)
            return False
        shadow = ShadowRun(self, jid, match, job, client, str(address))
        self._shadows[jid] = shadow
        task = asyncio.create_task(shadow.run(), name=f"shadow {jid}")
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._done, jid, shadow))
        return True

    def _client(self, slot: ClassAd, address: str) -> StartdClient | None:
        """The client of the node at `address`: its Unix socket on this host, or TLS to
        another, pinning the certificate its ad carries (which the collector took from
        the holder of the node's token alone) and presenting the schedd's own."""
        path = socket_of(address)
        if path is not None:
            key: tuple[str, ...] = (str(path),)
            if key not in self._clients:
                self._clients[key] = StartdClient(path)
            return self._clients[key]
        where, pem = host_port_of(address), slot.get(TLS_CERTIFICATE)
        identity = self.settings.identity
        if where is None or not isinstance(pem, str) or identity is None:
            return None
        key = (address, pem)
        client = self._clients.get(key)
        if client is None:
            try:
                tls = pinned_ssl_context(pem, identity)
            except CertificateError as exc:
                _log.warning("%s: cannot call it over TLS: %s", address, exc)
                return None
            client = self._clients[key] = StartdClient.over_tls(where, tls)
        return client

    def proxy_renewed(self, job_id: JobId, proxy: Path) -> None:
        """The job's X.509 proxy was renewed in its spool (`proxy`): if it runs on an
        execute node, the node gets the new one too, as HTCondor's shadow hands it to the
        starter."""
        shadow = self._shadows.get(job_id)
        if shadow is None:
            return
        task = asyncio.create_task(shadow.forward_proxy(proxy), name=f"proxy of {job_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _done(self, jid: JobId, shadow: ShadowRun, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._shadows.get(shadow.job_id) is shadow:  # its last job (claims are reused)
            del self._shadows[shadow.job_id]

    async def next_job(self, run: ShadowRun) -> tuple[JobId, ClassAd, Updates] | None:
        """An idle job of the same user that fits `run`'s claim, now `run`'s; or None."""
        owner = run.job.get("Owner")
        if not isinstance(owner, str):
            return None
        constraint = f"JobStatus == 1 && JobUniverse == {VANILLA} && Owner == {quote(owner)}"
        ads = await self._worker.read(lambda q: q.query(constraint, limit=_REUSE_SCAN))
        if not self._accepting:  # shutting down (perhaps since the read): no next job
            return None
        for ad in ads:
            jid = JobId(ad["ClusterId"], ad["ProcId"])
            if jid in self._shadows:
                continue
            try:
                if not _fits(ad, run.slot_ad, run.resources):
                    continue
                names = dollar_attributes(ad)
                expansion = expand(ad, run.slot_ad, names) if names else Expansion()
            except Exception as exc:
                if daemon_fault(exc):
                    raise
                # Not this claim's to hold: the negotiator holds it at its next cycle.
                self.failed(JobFailure(jid, problem(exc), held=False, error=exc))
                continue
            if expansion.error:
                continue  # the negotiator holds it, matched to a slot of its own
            if self._shadows.get(run.job_id) is run:
                del self._shadows[run.job_id]
            self._shadows[jid] = run
            return jid, ad, expansion.expanded
        return None

    # -- the change feed: holds and removals of running jobs ---------------------------

    @property
    def seq(self) -> int:
        """The last change of the queue's feed this follower has read."""
        return self._seq

    async def run(self) -> None:
        """Follow the change feed, stopping the shadows of held and removed jobs."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                changes = await self._worker.read(
                    functools.partial(_changes, seq=self._seq, limit=_FEED_BATCH)
                )
                if not changes:
                    break
                self._seq = changes[-1].seq
                for change in changes:
                    self._note(change)

    def _note(self, change: Change) -> None:
        if change.kind is not ChangeKind.STATUS:
            return
        for jid in change.job_ids:
            shadow = self._shadows.get(jid)
            if shadow is None or change.seq <= shadow.start_seq:
                continue  # not ours, or about the job before this run started
            if change.status == JobStatus.HELD:
                shadow.stop(StopReason.HOLD)
            elif change.status == JobStatus.REMOVED:
                shadow.stop(StopReason.REMOVE)

    # -- shutdown -------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Vacate every running job (back to idle) and wait until each is recorded."""
        self._accepting = False
        for shadow in list(self._shadows.values()):
            shadow.stop(StopReason.SHUTDOWN)
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=self._shutdown_wait())
            for task in late:
                task.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)
        for client in self._clients.values():
            await client.aclose()

    def _shutdown_wait(self) -> float:
        vacate = max((s.vacate_time for s in self._shadows.values()), default=0.0)
        return vacate + self.settings.vacate_grace

    # -- what shadows call -------------------------------------------------------------

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any:
        return await self._worker.write(fn)

    def now(self) -> float:
        return self._clock()

    def monotonic(self) -> float:
        return self._monotonic()

    def failed(self, failure: JobFailure) -> None:
        self._faults.report(failure)


def _fits(job: ClassAd, slot: ClassAd, resources: Resources) -> bool:
    """Whether the job may run on a claimed slot: both Requirements, and its size."""
    if not (requirements_hold(job, slot) and requirements_hold(slot, job)):
        return False
    try:
        return resources.fits(request_of(job, slot, resources.gpus))
    except StartdError:  # more GPUs than the claim has
        return False


def _changes(q: JobQueue, *, seq: int, limit: int) -> list[Change]:
    return q.changes_since(seq, limit=limit)
