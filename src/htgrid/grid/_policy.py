"""PeriodicHold and PeriodicRemove of the jobs the grid manager runs.

A hold or removal is made through the queue, and reaches the job through the change feed
like a user's would: its batch job is cancelled. PeriodicRelease is the queue's (a held
job is handed back to it). The pool's SYSTEM_PERIODIC_* apply too, as HTCondor's grid
manager's UserPolicy reads them (a CE holds a grid job submitted to it directly, say).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.gahp import Clock
from htgrid.grid._queueio import QueueIO
from htgrid.grid._values import as_int
from htgrid.pool import ConfigFile, PoolError
from htgrid.queue import (
    HoldReasonCode,
    JobId,
    JobNotFound,
    JobStatus,
    PolicyAction,
    StoreError,
    SystemPolicy,
    periodic_decision,
)
from htgrid.queue.faults import daemon_fault

__all__ = ["Contain", "periodic_policy"]

log = logging.getLogger("htgrid.grid")

#: Holds a job the grid manager failed on: (job, error, what it was doing, hold code).
Contain = Callable[[JobId, Exception, str, HoldReasonCode], Awaitable[None]]


async def periodic_policy(
    io: QueueIO, home: Path, clock: Clock, interval: float, contain: Contain
) -> None:
    """Every `interval`, the policy of each idle or running job the grid manager runs."""
    try:
        system: SystemPolicy | None = ConfigFile.read(home).system_policy()
    except PoolError as err:
        log.error("the pool's SYSTEM_PERIODIC_ policy is not applied: %s", err)
        system = None
    while True:
        await clock.sleep(interval)
        try:
            ads = await io.query('JobUniverse == 9 && Managed =?= "External"')
            now = int(clock.time())
            for ad in ads:
                if ad.get("JobStatus") in (JobStatus.IDLE, JobStatus.RUNNING):
                    await _apply_policy(io, ad, now, system, contain)
        except StoreError as err:
            log.warning("periodic policy: %s", err)


async def _apply_policy(
    io: QueueIO, ad: ClassAd, now: int, system: SystemPolicy | None, contain: Contain
) -> None:
    job_id = JobId(as_int(ad.get("ClusterId")) or 0, as_int(ad.get("ProcId")) or 0)
    try:
        decision = periodic_decision(ad, now, system) if system else periodic_decision(ad, now)
    except Exception as exc:
        if daemon_fault(exc):
            raise
        policy = HoldReasonCode.JobPolicyUndefined
        await contain(job_id, exc, "evaluating its periodic policy", policy)
        return
    if decision is None or decision.action is PolicyAction.RELEASE:
        return
    with contextlib.suppress(JobNotFound):  # it left the queue since the query
        if decision.action is PolicyAction.HOLD:
            await io.hold(job_id, decision.reason, decision.code, decision.subcode)
        else:
            await io.remove(job_id, decision.reason)
