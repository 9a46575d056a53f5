"""Start-up: the claims an earlier daemon left (`recover_claims`). A job still running on
a node of another host within its lease is reconnected to, and so is one whose start
that daemon did not record (killed between the node's taking the activation and the
001: `_unrecorded_starts`); any other recorded claim is ended on its node (`_settle`,
in the background) before its job goes back to idle."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue import InvalidTransition, JobId, JobNotFound, JobQueue, JobStatus
from htgrid.schedd._claims import ClaimRecord, jobs_on_claims, started_on
from htgrid.schedd._shadow_base import (
    ACTIVATED,
    CUT,
    DISCONNECTED,
    LEASE_MARGIN,
    RUNNING,
    VANILLA,
    after_stop,
    lease_valid,
)
from htgrid.schedd._shadow_run import ShadowRun
from htgrid.startd import (
    ClaimNotFound,
    ClaimStatus,
    StartdClient,
    StartdError,
    StartdUnavailable,
    socket_of,
)

if TYPE_CHECKING:
    from htgrid.schedd._shadow import ShadowManager

__all__ = ["end_claim_later", "recover_claims", "requeue"]

_log = logging.getLogger("htgrid.schedd.shadow")

_SETTLE_RETRY: Final = 2.0  # how often an unreachable node is asked again
# ... at most, about a claim that runs no job (asked less often each time).
_SETTLE_RETRY_MAX: Final = 60.0
# How long start-up waits for a node to say what a claim runs (then it is ended).
_ASK_WAIT: Final = 5.0


async def recover_claims(manager: ShadowManager) -> list[JobId]:
    """Reconnect to the jobs an earlier daemon left running on nodes of other hosts;
    put back to idle those that surely run nowhere (returned, when at once).

    A running job whose claim on a node of another host was recorded is reconnected
    to (`ShadowRun` without a match) when its lease allows it, as HTCondor decides:
    its JobLeaseDuration neither 0 nor passed since its LastJobLeaseRenewal (kept
    by `renew_leases`). 022 at once, 023 when the node answers that it runs it
    still, and its run is followed to its end as if the schedd had never stopped;
    or given up on (024, 004) when the node has no such claim, or does not answer
    before the lease has surely run out there. Any other recorded claim is
    ended on its node (the job killed, the slot released: `_settle`, in the
    background), and only then does its job go back to idle (004). A running job
    with no claim recorded ran on a node of this pool's own, which stopped with the
    daemon (its jobs killed): back to idle at once.
    """
    records = await asyncio.to_thread(manager.claims.load)
    recorded = {r.public_id: r for r in records}
    settling: dict[str, JobId] = {}
    resuming: dict[str, ClassAd] = {}
    expired: list[JobId] = []
    now = manager.now()

    def evict(q: JobQueue) -> tuple[int, list[JobId]]:
        seq = q.last_seq
        evicted = []
        # A job the job router manages (Managed = "External") mirrors its routed
        # copy: nothing of this daemon's runs it.
        running = f"JobUniverse == {VANILLA} && JobStatus != 1 && JobStatus != 5"
        ads = q.query(f'{running} && Managed =!= "External"')
        on_claim = jobs_on_claims(ads, recorded)
        for ad in ads:
            jid = JobId(ad["ClusterId"], ad["ProcId"])
            record = recorded.get(str(ad.get("PublicClaimId")))
            if record is not None and on_claim.get(record.claim_id) is ad:
                remote = socket_of(record.address) is None
                if remote and ad["JobStatus"] in RUNNING:
                    if lease_valid(ad, now):
                        resuming[record.claim_id] = ad  # it may run there still
                        continue
                    expired.append(jid)
                settling[record.claim_id] = jid  # running perhaps: the node says
            elif ad["JobStatus"] == JobStatus.COMPLETED:
                continue  # an earlier job of a claim that ran the next one
            elif ad["JobStatus"] == JobStatus.REMOVED:
                q.destroy(jid)
            elif ad["JobStatus"] in RUNNING:
                q.job_evicted(jid)
                evicted.append(jid)
        return seq, evicted

    evicted: list[JobId]
    seq, evicted = await manager.write(evict)
    manager.follow_from(seq)
    for jid in evicted:
        _log.info("job %s had no execute node after the restart: back to idle", jid)
    for jid in expired:
        _log.info(
            "job %s: no lease to reconnect to it within (JobLeaseDuration 0, or past "
            "since its LastJobLeaseRenewal): its claim is ended, and it goes back to idle",
            jid,
        )
    orphans = [
        r
        for r in records
        if r.claim_id not in resuming and r.claim_id not in settling and not _local(r)
    ]
    resuming.update(await _unrecorded_starts(manager, orphans))
    for record in records:
        ad = resuming.get(record.claim_id)
        if ad is not None and not _resume(manager, record, ad):
            settling[record.claim_id] = _job_id(ad)
    for record in records:
        if record.claim_id in resuming and record.claim_id not in settling:
            continue
        job = settling.get(record.claim_id)
        manager.settle(job, _settle(manager, record, job), f"claim of {record.job_id}")
    return evicted


def _local(record: ClaimRecord) -> bool:
    return socket_of(record.address) is not None


async def _unrecorded_starts(
    manager: ShadowManager, records: list[ClaimRecord]
) -> dict[str, ClassAd]:
    """The jobs the claims of `records` (on nodes of other hosts, no running job on
    them) run that the queue has idle, never started on that claim: an earlier daemon
    was killed after the node took the activation and before it recorded the start.
    Each node is asked once; such a job's start is recorded now (its 001), and its ad
    returned by claim id, to be reconnected to. The others are ended as before."""

    async def ask(record: ClaimRecord) -> tuple[ClaimRecord, ClaimStatus] | None:
        client = manager.client(record.address, record.certificate)
        if client is None:
            return None
        try:
            status = await asyncio.wait_for(client.status(record.claim_id), _ASK_WAIT)
        except (StartdError, TimeoutError):
            return None
        return (record, status) if status.job is not None and status.state in ACTIVATED else None

    found = [each for each in await asyncio.gather(*map(ask, records)) if each is not None]
    now = int(manager.now())

    def start(q: JobQueue) -> dict[str, ClassAd]:
        started = {}
        for record, status in found:
            try:
                jid = JobId.parse(str(status.job))
                ad = q.get(jid)
                if (
                    ad["JobStatus"] != JobStatus.IDLE
                    or ad.get("JobUniverse") != VANILLA
                    or ad.get("PublicClaimId") == record.public_id  # its run's end recorded
                ):
                    continue
                q.job_started(jid, started_on(status.slot, record.address, record.claim_id, now))
            except (ValueError, InvalidTransition, JobNotFound):
                continue
            _log.info(
                "job %s: %s took it before the restart: started, reconnecting", jid, status.slot
            )
            started[record.claim_id] = q.get(jid)
        return started

    return await manager.write(start) if found else {}


def _resume(manager: ShadowManager, record: ClaimRecord, ad: ClassAd) -> bool:
    """Reconnect to `record`'s job, running on a node of another host; False when
    that node cannot be called (its address or certificate unusable)."""
    client = manager.client(record.address, record.certificate)
    if client is None:
        return False
    jid = _job_id(ad)
    run = ShadowRun(
        manager,
        jid,
        ad,
        client,
        record.address,
        certificate=record.certificate,
        claim_id=record.claim_id,
    )
    run.lease, run.start_seq = record.lease, manager.seq
    _log.info("job %s: reconnecting to it on %s", jid, record.address)
    manager.launch(run)
    return True


def end_claim_later(manager: ShadowManager, record: ClaimRecord) -> Coroutine[Any, Any, None]:
    """The release of a claim whose job is over, asked again in the background: the
    node did not answer the first."""
    return _settle(manager, record, None)


async def _settle(manager: ShadowManager, record: ClaimRecord, job: JobId | None) -> None:
    """End a claim an earlier daemon left that may still run `job` (held or removed
    since, or on a node of this pool's own); then the job goes back to idle. An
    unreachable node's job stays Running, disconnected (022), and the node is asked
    again until the claim's lease has surely run out there; then the schedd gives up
    on the job (024) and requeues it. A claim that runs no job (`job` None) is asked
    again too, less often each time, until its lease is over."""
    client = manager.client(record.address, record.certificate)
    local = socket_of(record.address) is not None
    deadline: float | None = None
    why, answered = await _end_claim(manager, client, record)
    gave_up = "The execute node has ended the job and released its claim"
    told = False  # whether the job was marked disconnected (022)
    retry = _SETTLE_RETRY
    while why is not None:
        if local:
            # A node of this pool's own that does not answer stopped with the pool
            # (its jobs with it).
            _log.info("claim of job %s on %s: %s", record.job_id, record.address, why)
            break
        if deadline is None:
            deadline = manager.now() + record.lease + record.vacate + LEASE_MARGIN
        if job is not None and not answered and not told:
            # Only a node that does not answer disconnects the job: one that answers
            # (ending the claim already, its lease having run out) is asked again.
            told = True
            await _disconnected(manager, job, record, deadline, why)
        if manager.now() >= deadline:
            if job is None:  # a claim that runs no job: its lease has ended it there
                _log.info("claim of job %s on %s: %s", record.job_id, record.address, why)
                break
            _log.warning(
                "job %s: the lease of its claim on %s has run out: it runs no more there",
                job,
                record.address,
            )
            gave_up = (
                f"Job disconnected too long: JobLeaseDuration ({record.lease:g} seconds) expired"
            )
            break
        await asyncio.sleep(min(retry, max(0.0, deadline - manager.now())))
        if job is None:
            # Its lease would end it, but a node asked again frees the slot for other
            # jobs the sooner (the lease may be 40 minutes): less often each time.
            retry = min(retry * 2, _SETTLE_RETRY_MAX)
        why, answered = await _end_claim(manager, client, record)
    if job is not None:
        await manager.write(functools.partial(requeue, job=job, reason=gave_up))
        manager.settled(job)
        _log.info("job %s: its claim on %s is over: back to idle", job, record.address)
    await asyncio.to_thread(manager.claims.forget, record.claim_id)


async def _end_claim(
    manager: ShadowManager, client: StartdClient | None, record: ClaimRecord
) -> tuple[str | None, bool]:
    """Ask the node to release the claim (killing its job): why it is not released yet
    (None once it is, or the node has no such claim), and whether the node answered."""
    if client is None:
        return "the node's address or certificate cannot be used", False
    # The node answers once the job is gone: its vacate time, and a margin.
    wait = record.vacate + manager.settings.alive_interval
    try:
        await asyncio.wait_for(client.release(record.claim_id), wait)
    except ClaimNotFound:
        return None, True
    except TimeoutError:
        return f"no answer within {wait:g} s", False
    except StartdUnavailable as exc:
        return str(exc), False
    except StartdError as exc:
        return str(exc), True
    return None, True


async def _disconnected(
    manager: ShadowManager, job: JobId, record: ClaimRecord, deadline: float, why: str
) -> None:
    _log.warning(
        "job %s: its execute node %s cannot be reached (%s): it may still run there, "
        "so it waits for the lease of that claim to run out (%s) before it runs again",
        job,
        record.address,
        why,
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline)),
    )
    await manager.stamp_disconnected(job, CUT, deadline)


def _job_id(ad: ClassAd) -> JobId:
    return JobId(ad["ClusterId"], ad["ProcId"])


def requeue(q: JobQueue, *, job: JobId, reason: str, failed: bool = False) -> str:
    """A job whose claim is over: back to idle (004), unless it was held or removed
    meanwhile (a removed one leaves the queue). A disconnected one is given up on first
    (024, `reason` its VacateReason); a running one whose run is `failed` too (one with
    no lease that lost its node, never disconnected: HTCondor's shadow writes the 024)."""
    try:
        ad = q.get(job)
        running = JobStatus(ad["JobStatus"]) in RUNNING
        if any(name in ad for name in DISCONNECTED) or (failed and running):
            cleared: dict[str, Any] = {name: ExprTree("undefined") for name in DISCONNECTED}
            q.update(job, {**cleared, "VacateReason": reason})
        if running:
            q.job_evicted(job)
            return "back to idle"
        return after_stop(q, job)
    except (InvalidTransition, JobNotFound):
        return "gone from the queue"
