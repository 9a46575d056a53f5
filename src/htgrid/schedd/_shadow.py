"""Running vanilla jobs on execute nodes: one shadow (a task) per running job.

For each match of a vanilla job, a shadow (HTCondor's condor_shadow):

1. claims the matched slot on its startd with a fresh random claim id (the claim id is
   the capability: only its holder can use or release the claim);
2. activates the claim with the job ad (its `$$()` macros filled, where it runs: as
   HTCondor's starter gets it) and, once the node took it (its answer), records the
   claim in the job (RemoteHost, StartdIpAddr, the match's history) and starts it:
   `job_started`, which the event log writer turns into 001. A job the node refuses
   gets no 001 and stays idle, as in HTCondor, whose shadow writes the execute event
   once the starter began the job; an answer lost is asked for until the node says
   (`_in_doubt`), a restart asks the node too (`_shadow_recover`). When the job's
   files travel, the input sandbox goes with the activation (a small one) or after it;
3. follows the claim with long polls. The claim's lease is the job's JobLeaseDuration
   (ALIVE_INTERVAL * MAX_CLAIM_ALIVES_MISSED for a job that names none): the node
   kills a job whose schedd it has not heard from for that long, and releases its
   claim. A node of this host's hears from the polls; one of another host from one
   keep-alive an ALIVE_INTERVAL for all the schedd's claims there (`_leases`);
4. when the job's run is over, records it: an exit goes to `job_exited` after the
   output files are back (the job's policy then completes, requeues or holds it: 005,
   004 or 012); an eviction (the node restarted or lost the claim) to `job_evicted`,
   back to idle (004), its output spooled first if ON_EXIT_OR_EVICT; a failure to start
   or to transfer files holds the job. A node of another host that stops answering may
   run the job on: the job stays Running, disconnected (022), and the shadow reconnects
   to it when the node answers again within the lease (023); it gives the run up (024)
   and the job goes back to idle (004) once the node says the claim is gone or the
   lease has surely run out there. A schedd that stops (`htgrid down`, or killed)
   leaves such jobs running, and its next start reconnects to each the same way
   (`recover`);
5. releases the claim.

A job held or removed while it runs has its claim vacated (HoldKillSig, RemoveKillSig)
and a removed one then leaves the queue (`destroy`). A job is never reported done
unless its node said it exited; a node that vanished means eviction, never completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.classad.fast import requirements_hold
from htgrid.collector import ReverseConnector, ccb_contact, private_network
from htgrid.negotiator import Expansion, Match, Updates, dollar_attributes, expand
from htgrid.net.security import CertificateError, pinned_ssl_context
from htgrid.queue import (
    Change,
    ChangeKind,
    InvalidTransition,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem
from htgrid.schedd._claims import ClaimBook, ClaimRecord
from htgrid.schedd._leases import NodeLeases
from htgrid.schedd._shadow_base import (
    DISCONNECTED,
    VANILLA,
    ShadowSettings,
    StopReason,
    no_lease,
)
from htgrid.schedd._shadow_files import InputTars
from htgrid.schedd._shadow_recover import end_claim_later, recover_claims, requeue
from htgrid.schedd._shadow_run import ShadowRun
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

_FEED_BATCH: Final = 2000
_REUSE_SCAN: Final = 64  # idle jobs read beyond those shadows hold, for claims to reuse
_CHANGES_JOB: Final = (ChangeKind.STATUS, ChangeKind.ATTRIBUTES, ChangeKind.LEFT_QUEUE)


class ShadowManager:
    """Starts a shadow per vanilla match, stops them on hold, removal or shutdown."""

    def __init__(
        self,
        worker: QueueWorker,
        settings: ShadowSettings,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        reverse: ReverseConnector | None = None,
        private_network: str | None = None,
    ) -> None:
        """`reverse` takes the connections of execute nodes behind NAT (CCB), unless
        they are on our `private_network` (PRIVATE_NETWORK_NAME)."""
        self._worker = worker
        self._reverse = reverse
        self._private_network = private_network
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
        self.claims = ClaimBook(settings.spool / "claims", fsync=settings.fsync)
        # What each claim's record says it takes to end it (its lease, its vacate time).
        self._recorded: dict[str, tuple[float, float]] = {}
        self.leases = NodeLeases(settings.alive_interval, monotonic=monotonic)
        self.input_tars = InputTars()
        # Jobs whose claim of an earlier daemon is not yet known to be over.
        self._settling: set[JobId] = set()
        self._settlers: set[asyncio.Task[None]] = set()
        self._freed: list[Callable[[], None]] = []
        self._answered: list[Callable[[Match, bool], None]] = []
        # Per owner, idle jobs read for claims whose job ended and not yet taken: one read
        # serves the next jobs of many claims (of an autocluster, as a rule), and the
        # claims ending at once share it, none of them finding its own read taken.
        self._idle: dict[str, dict[JobId, ClassAd]] = {}
        # Per owner, a read of its idle jobs under way (done once they are in `_idle`):
        # the claims ending meanwhile wait for it rather than each reading the same jobs
        # (at a burst of ends, hundreds of reads of hundreds of ads each).
        self._scanning: dict[str, asyncio.Future[None]] = {}
        self._applied: dict[str, list[ClassAd]] = {}  # the read `_idle` holds, per owner
        # Owners whose last read found all their idle jobs (fewer than it could take),
        # none made idle since nor let go by a claim: reading again finds none that
        # `next_job` has not seen (at the end of a run, each claim ending read the ~100
        # jobs the others had taken, and was let go).
        self._complete: set[str] = set()

    @property
    def busy(self) -> frozenset[JobId]:
        """Jobs with a shadow, or whose earlier claim may still run them: not idle for
        the negotiator, whatever the queue says."""
        return frozenset(self._shadows) | frozenset(self._settling)

    def status(self) -> dict[str, Any]:
        return {"vanilla_jobs_running": len(self._shadows)}

    # -- start-up -----------------------------------------------------------------------

    async def recover(self) -> list[JobId]:
        """Reconnect to the jobs an earlier daemon left running on nodes of other hosts;
        put back to idle those that surely run nowhere (returned, when at once):
        `recover_claims`."""
        return await recover_claims(self)

    def follow_from(self, seq: int) -> None:
        """Follow the change feed from after `seq` on (the queue as recovery found it)."""
        self._seq = seq

    def settle(self, job: JobId | None, ending: Coroutine[Any, Any, None], name: str) -> None:
        """Run `ending` (the end of an earlier daemon's claim) in the background until
        it is done or we stop; `job`, which that claim may still run, stays busy until
        `settled`."""
        if job is not None:
            self._settling.add(job)
        task = asyncio.create_task(ending, name=name)
        self._settlers.add(task)
        task.add_done_callback(self._settlers.discard)

    def settled(self, job: JobId) -> None:
        """`job`'s claim of an earlier daemon is over: it may run again."""
        self._settling.discard(job)

    async def stamp_disconnected(self, job: JobId, reason: str, deadline: float) -> None:
        """The job disconnected (022, `reason`) until `deadline`."""
        stamp = {
            "JobDisconnectedDate": int(self._clock()),
            "JobLeaseExpiration": int(deadline) + 1,
            "DisconnectReason": reason,
        }

        def note(q: JobQueue) -> None:
            with contextlib.suppress(InvalidTransition, JobNotFound):
                q.update(job, stamp)

        await self._worker.write(note)

    # -- matches --------------------------------------------------------------------------

    def start(self, match: Match, job: ClassAd) -> bool:
        """Run a matched vanilla job on its slot; False when it runs already or we stop."""
        jid = match.job_id
        if not self._accepting or jid in self._shadows:
            return False
        address = match.machine_ad.get("MyAddress")
        pem = match.machine_ad.get(TLS_CERTIFICATE)
        client = (
            self.client(address, pem if isinstance(pem, str) else None)
            if isinstance(address, str)
            else None
        )
        if client is None:
            _log.warning("job %s: %s cannot be reached at %r", jid, match.machine, address)
            return False
        cert = pem if isinstance(pem, str) else None
        self.launch(ShadowRun(self, jid, job, client, str(address), match=match, certificate=cert))
        return True

    def launch(self, shadow: ShadowRun) -> None:
        """Run `shadow` (a match's, or a reconnection's) as a task of this manager's."""
        jid = shadow.job_id
        self._shadows[jid] = shadow
        task = asyncio.create_task(shadow.run(), name=f"shadow {jid}")
        shadow.task = task
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._done, jid, shadow))

    def client(self, address: str, pem: str | None) -> StartdClient | None:
        """The client of the node at `address`: its Unix socket on this host, or TLS to
        another, pinning the certificate `pem` its ad carries (which the collector took
        from the holder of the node's token alone) and presenting the schedd's own; for
        a node behind NAT (a CCBID in its address, and another PrivNet than ours), the
        same TLS on the connections it makes back to us through its broker."""
        path = socket_of(address)
        if path is not None:
            key: tuple[str, ...] = (str(path),)
            if key not in self._clients:
                self._clients[key] = StartdClient(path)
            return self._clients[key]
        where = host_port_of(address)
        contact = ccb_contact(address)
        ours = self._private_network
        if contact is not None and ours is not None and private_network(address) == ours:
            contact = None  # on our private network: reached directly
        identity = self.settings.identity
        if (where is None and contact is None) or pem is None or identity is None:
            return None
        key = (address, pem)
        client = self._clients.get(key)
        if client is None:
            try:
                tls = pinned_ssl_context(pem, identity)
            except CertificateError as exc:
                _log.warning("%s: cannot call it over TLS: %s", address, exc)
                return None
            if contact is not None and self._reverse is not None:
                connect = functools.partial(self._reverse.connect, contact)
                client = StartdClient.over_ccb(str(contact), contact.ccbid, tls, connect)
            elif where is not None:
                client = StartdClient.over_tls(where, tls)
            else:
                return None
            self._clients[key] = client
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

    def on_slot_freed(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a shadow whose claim was granted ends: a slot freed
        for the negotiator (a job that ended on a claim the next job reuses frees none)."""
        self._freed.append(callback)

    def on_claim_answered(self, callback: Callable[[Match, bool], None]) -> None:
        """Call `callback(match, granted)` once the node answered the claim of a match
        (or did not: not granted), for the negotiator's view of the slot."""
        self._answered.append(callback)

    def claim_answered(self, match: Match, granted: bool) -> None:
        for callback in self._answered:
            callback(match, granted)

    def _done(self, jid: JobId, shadow: ShadowRun, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._shadows.get(shadow.job_id) is shadow:  # its last job (claims are reused)
            del self._shadows[shadow.job_id]
            if not shadow.started:  # idle still perhaps, and no claim's now
                self._complete.discard(str(shadow.job.get("Owner")))
        if shadow.resources.cpus:  # a claim was granted: given back now, or lost
            for callback in self._freed:
                callback()

    def idle_scan(
        self, run: ShadowRun, *, fresh: bool = False
    ) -> Callable[[JobQueue], list[ClassAd] | None]:
        """What reads the idle jobs of the same user that may run next on `run`'s claim
        (`next_job` picks one): on the queue thread, in the call that records the end of
        `run`'s job, one call for both. None (nothing read) while the jobs read before
        for the user's claims last, unless `fresh`."""
        owner = run.job.get("Owner")
        if not isinstance(owner, str):
            return lambda q: []
        held = self._idle.get(owner)
        if not fresh and (
            owner in self._scanning
            or owner in self._complete
            or (held and any(jid not in self._shadows for jid in held))
        ):
            return lambda q: None
        constraint = (
            f"JobStatus == 1 && JobUniverse == {VANILLA} && Owner == {quote(owner)}"
            ' && Managed =!= "External"'
        )
        # Jobs shadows took but have not started yet are idle still: read past them.
        limit = _REUSE_SCAN + len(self._shadows)
        loop = asyncio.get_running_loop()
        done = self._scanning.setdefault(owner, loop.create_future())

        def read(q: JobQueue) -> list[ClassAd] | None:
            ads = None
            try:
                ads = q.query(constraint, limit=limit)
                return ads
            finally:  # before the caller has the answer: the worker answers the same way
                loop.call_soon_threadsafe(self._scanned, owner, done, ads, limit)

        return read

    def _scanned(
        self, owner: str, done: asyncio.Future[None], ads: list[ClassAd] | None, limit: int
    ) -> None:
        """A read of `owner`'s idle jobs came (`ads`, of at most `limit`; None: it failed)."""
        if ads is not None:
            self._idle[owner] = {JobId(ad["ClusterId"], ad["ProcId"]): ad for ad in ads}
            self._applied[owner] = ads
            if len(ads) < limit:
                self._complete.add(owner)
            else:
                self._complete.discard(owner)
        if self._scanning.get(owner) is done:
            del self._scanning[owner]
        if not done.done():
            done.set_result(None)

    def exhausted(self, run: ShadowRun) -> bool:
        """Whether the last read of the idle jobs of `run`'s owner found them all, and
        none came since: another read would find no job `next_job` has not seen."""
        return run.job.get("Owner") in self._complete

    async def scanned(self, run: ShadowRun) -> None:
        """Once the read of the idle jobs of `run`'s owner under way, if any, came."""
        done = self._scanning.get(str(run.job.get("Owner")))
        if done is not None:
            await asyncio.shield(done)

    def next_job(
        self, run: ShadowRun, ads: list[ClassAd] | None
    ) -> tuple[JobId, ClassAd, Updates] | None:
        """An idle job that fits `run`'s claim, now `run`'s: of `ads` (`idle_scan`'s,
        which replace those read before for the user), or of those read before (`ads`
        None); or None."""
        if not self._accepting:  # shutting down (perhaps since the read): no next job
            return None
        owner = run.job.get("Owner")
        if not isinstance(owner, str):
            return None
        if ads is not None and self._applied.get(owner) is not ads:
            self._idle[owner] = {JobId(ad["ClusterId"], ad["ProcId"]): ad for ad in ads}
        held = self._idle.get(owner, {})
        taken: list[JobId] = []  # another claim's, or the negotiator's: let go of after
        found: tuple[JobId, ClassAd, Updates] | None = None
        # No copy of `held` a call (up to a few hundred jobs, at every end of a job).
        for jid, ad in held.items():
            if jid in self._shadows:
                taken.append(jid)
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
            found = jid, ad, expansion.expanded
            break
        for jid in taken:
            del held[jid]
        if found is None:
            return None
        if self._shadows.get(run.job_id) is run:
            del self._shadows[run.job_id]
        self._shadows[found[0]] = run
        del held[found[0]]
        return found

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
        if self._idle and change.kind in _CHANGES_JOB:
            for held in self._idle.values():  # read before: not to be run as it was read
                if _forget(held, change) and change.kind is ChangeKind.ATTRIBUTES:
                    self._complete.clear()  # idle still, no longer among those read
        if self._complete and (
            change.kind is ChangeKind.SUBMITTED or change.status == JobStatus.IDLE
        ):
            self._complete.clear()  # a job idle that no read saw
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

    # -- job leases -----------------------------------------------------------------------

    async def renew_leases(self) -> None:
        """Each ALIVE_INTERVAL, record in the running jobs' LastJobLeaseRenewal when
        their claims' leases were last renewed on their nodes, all in one transaction
        (HTCondor's schedd does so on the same timer): a restart reconnects only to jobs
        whose JobLeaseDuration has not passed since."""
        while True:
            await asyncio.sleep(self.settings.alive_interval)
            renewals = self._renewals()
            if renewals:
                await self._worker.write(functools.partial(_renewed, renewals=renewals))

    def _renewals(self) -> list[tuple[JobId, dict[str, Any]]]:
        now, mono = self._clock(), self._monotonic()
        renewals: list[tuple[JobId, dict[str, Any]]] = []
        for jid, run in self._shadows.items():
            if jid != run.job_id or not run.on_node or run.lost:
                continue
            link = run.link
            if link is not None:  # a node of another host: its last answered keep-alive
                if not link.up.is_set():
                    continue
                when = int(now - (mono - link.heard))
            elif run.remote:
                continue
            else:  # a node of this host's: followed by polls, it stops with the daemon
                when = int(now)
            if when > run.renewed:
                run.renewed = when
                renewals.append((jid, {"LastJobLeaseRenewal": when}))
        return renewals

    # -- shutdown -------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Vacate every job running on a node of this host's (back to idle) and wait
        until each is recorded. Jobs on nodes of other hosts run on, within their
        lease, their claims recorded: the next start reconnects to them (HTCondor's
        graceful shutdown leaves jobs with a JobLeaseDuration alone, too), but for
        those that ask for none (JobLeaseDuration 0), vacated as the others."""
        self._accepting = False
        for settler in list(self._settlers):
            settler.cancel()  # their records stay: the next daemon settles them
        await asyncio.gather(*self._settlers, return_exceptions=True)
        for shadow in list(self._shadows.values()):
            if shadow.remote and shadow.on_node and shadow.task is not None:
                if no_lease(shadow.job):
                    shadow.stop(StopReason.SHUTDOWN)  # never reconnected to: vacated
                    continue
                shadow.task.cancel()  # the job runs on there
            else:
                shadow.stop(StopReason.SHUTDOWN)
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=self._shutdown_wait())
            for task in late:
                task.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)
        await self.leases.close()
        for client in self._clients.values():
            await client.aclose()

    def _shutdown_wait(self) -> float:
        vacate = max((s.vacate_time for s in self._shadows.values()), default=0.0)
        return vacate + self.settings.vacate_grace

    # -- what shadows call -------------------------------------------------------------

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any:
        return await self._worker.write(fn)

    async def read(self, fn: Callable[[JobQueue], Any]) -> Any:
        return await self._worker.read(fn)

    async def record_claim(self, run: ShadowRun) -> None:
        record = _record_of(run)
        ending = (record.lease, record.vacate)
        if self._recorded.get(run.claim_id) == ending:
            return  # the claim's next job: its record (and the queue's PublicClaimId) do
        await asyncio.to_thread(self.claims.write, record)
        self._recorded[run.claim_id] = ending

    def hold_lease(self, run: ShadowRun) -> None:
        if run.remote and run.link is None:
            run.link = self.leases.hold(run.client, run.address, run.claim_id)

    def drop_lease(self, run: ShadowRun) -> None:
        if run.link is not None:
            self.leases.drop(run.link, run.claim_id)
            run.link = None

    async def disconnected(self, run: ShadowRun, why: str, reason: str, deadline: float) -> None:
        _log.warning(
            "job %s: disconnected from %s (%s): it may run on there; reconnecting until "
            "its lease has surely run out (%s)",
            run.job_id,
            run.address,
            why,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline)),
        )
        await self.stamp_disconnected(run.job_id, reason, deadline)

    async def reconnected(self, run: ShadowRun) -> None:
        _log.info("job %s: reconnected to %s", run.job_id, run.address)
        job = run.job_id
        run.renewed = int(self._clock())  # the node just answered: the lease is renewed

        def note(q: JobQueue) -> None:
            with contextlib.suppress(InvalidTransition, JobNotFound):
                count = q.get(job).get("NumJobReconnects", 0)
                cleared: dict[str, Any] = {n: ExprTree("undefined") for n in DISCONNECTED}
                number = count if isinstance(count, int) and not isinstance(count, bool) else 0
                renewed = {"LastJobLeaseRenewal": run.renewed}
                q.update(job, {**cleared, **renewed, "NumJobReconnects": number + 1})

        await self._worker.write(note)

    async def gave_up(self, run: ShadowRun, reason: str, *, forget: bool = True) -> None:
        self.drop_lease(run)
        give_up = functools.partial(requeue, job=run.job_id, reason=reason, failed=True)
        await self._worker.write(give_up)
        if forget:
            await self.forget_claim(run)

    async def forget_claim(self, run: ShadowRun) -> None:
        self._recorded.pop(run.claim_id, None)
        await asyncio.to_thread(self.claims.forget, run.claim_id)

    def release_later(self, run: ShadowRun) -> None:
        """The node did not release `run`'s claim, whose job is over: asked again in
        the background (its record kept until then) until its lease is surely over."""
        self._recorded.pop(run.claim_id, None)
        self.settle(None, end_claim_later(self, _record_of(run)), f"claim of {run.job_id}")

    def now(self) -> float:
        return self._clock()

    def monotonic(self) -> float:
        return self._monotonic()

    def failed(self, failure: JobFailure) -> None:
        self._faults.report(failure)


def _record_of(run: ShadowRun) -> ClaimRecord:
    return ClaimRecord(
        run.claim_id, run.job_id, run.address, run.certificate, run.lease, run.vacate_time
    )


def _fits(job: ClassAd, slot: ClassAd, resources: Resources) -> bool:
    """Whether the job may run on a claimed slot: both Requirements, and its size."""
    if not (requirements_hold(job, slot) and requirements_hold(slot, job)):
        return False
    try:
        return resources.fits(request_of(job, slot, resources.gpus))
    except StartdError:  # more GPUs than the claim has
        return False


def _renewed(q: JobQueue, *, renewals: list[tuple[JobId, dict[str, Any]]]) -> None:
    q.update_many(renewals)  # a job that ended meanwhile is refused alone


def _changes(q: JobQueue, *, seq: int, limit: int) -> list[Change]:
    return q.changes_since(seq, limit=limit)


def _forget(held: dict[JobId, ClassAd], change: Change) -> bool:
    """Drop the jobs `change` touched from `held` (looking up the fewer of the two);
    whether there were any."""
    before = len(held)
    if len(change.procs) <= len(held):
        for jid in change.job_ids:
            held.pop(jid, None)
        return len(held) < before
    for jid in [j for j in held if j.cluster == change.cluster and j.proc in change.procs]:
        del held[jid]
    return len(held) < before
