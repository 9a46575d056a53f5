"""The schedd's periodic pass over the queue (`JobQueue.evaluate_periodic`): the job
policies of every job that may have one, and completed jobs that LeaveJobInQueue no
longer keeps.

A job whose policy cannot be evaluated (an expression that fails, a bug it alone meets)
is held for it (JobPolicyUndefined, as HTCondor held jobs whose policy gave no answer)
and the pass goes on with the others; a job that cannot be held is skipped. Both are
reported as `JobFailure`s for the daemon to log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from htgrid.queue import _actions as actions
from htgrid.queue._codes import HoldReasonCode
from htgrid.queue._ids import JobId
from htgrid.queue._policy import (
    PolicyDecision,
    SystemPolicy,
    lease_decision,
    periodic_decision,
    truth,
    with_time,
)
from htgrid.queue._status import TRANSITIONS, JobStatus
from htgrid.queue._store import JobEdit, Store, Txn
from htgrid.queue.faults import JobFailure, daemon_fault, problem

__all__ = ["POLICY_FAILED", "contain", "keep_in_queue", "periodic_pass"]

#: The HoldReason of a job whose periodic policy could not be evaluated.
POLICY_FAILED: Final = "The schedd's periodic policy evaluation failed for this job: {}"

_POLICY_ATTRS: Final = (
    "PeriodicHold",
    "PeriodicRelease",
    "PeriodicRemove",
    "TimerRemove",
    "JobLeaseExpiration",
)
_POLICY_KEYS: Final = tuple(f'"{name.lower()}"' for name in _POLICY_ATTRS)

#: Applies a decision to a job in the transaction (the queue's hold, release, remove).
Apply = Callable[[Txn, JobEdit, PolicyDecision], None]


def periodic_pass(
    txn: Txn, apply: Apply, system: SystemPolicy | None = None
) -> tuple[list[tuple[JobId, PolicyDecision]], list[JobFailure]]:
    """Evaluate every job not Removed at `txn.now` (with the pool's `system` policy, if
    any); the decisions applied (by `apply`), and the jobs that failed (held for it when
    they could be)."""
    if system is not None and not system:
        system = None
    applied: list[tuple[JobId, PolicyDecision]] = []
    failures: list[JobFailure] = []
    rows = txn.conn.execute(
        "SELECT cluster, proc, status, ad, masked FROM jobs WHERE status <> ? "
        "ORDER BY cluster, proc",
        (int(JobStatus.REMOVED),),
    ).fetchall()
    policy_clusters: dict[int, bool] = {}
    for cluster, proc, status, text, masked in rows:
        job_id = JobId(cluster, proc)
        try:
            if (
                status != JobStatus.COMPLETED
                and system is None
                and not _may_have_policy(txn.store, policy_clusters, cluster, text)
            ):
                continue
            edit = txn.edit_of(job_id, text, masked)
            if status == JobStatus.COMPLETED:
                if not keep_in_queue(edit, txn.now):
                    txn.leave(edit)
                continue
            decision = _decision(edit, txn.now, system)
            if decision is not None:
                apply(txn, edit, decision)
                applied.append((edit.job_id, decision))
        except Exception as exc:
            if daemon_fault(exc):
                raise
            # Nothing of this job's was written: its writes come after the evaluation.
            failures.append(contain(txn, job_id, exc, POLICY_FAILED))
    return applied, failures


def contain(txn: Txn, job_id: JobId, exc: BaseException, reason: str) -> JobFailure:
    """Hold the job `exc` was raised for, with `reason` (a format of the problem) and
    JobPolicyUndefined, in `txn`; what happened, for the daemon's log."""
    what = problem(exc)
    try:
        edit = txn.load(job_id)
        if JobStatus.HELD not in TRANSITIONS[edit.status]:
            return JobFailure(job_id, what, held=False, error=exc)
        actions.hold(edit, reason.format(what), HoldReasonCode.JobPolicyUndefined, 0, txn.now)
        txn.save(edit)
    except Exception as again:
        if daemon_fault(again):
            raise
        return JobFailure(job_id, what, held=False, error=exc)
    return JobFailure(job_id, what, held=True, error=exc)


def keep_in_queue(edit: JobEdit, now: int) -> bool:
    """Whether LeaveJobInQueue keeps a finished job in the queue (absent: it leaves)."""
    if not edit.has("LeaveJobInQueue"):
        return False
    return truth(with_time(edit.view(), now).eval("LeaveJobInQueue"))


def _may_have_policy(store: Store, seen: dict[int, bool], cluster: int, text: str) -> bool:
    # A cheap test before decoding 100,000 ads: a policy is an attribute of the cluster
    # ad or of the proc's own, whose stored form has the name as a JSON key.
    has = seen.get(cluster)
    if has is None:
        ad = store.cluster_ad(cluster)
        has = any(name in ad for name in _POLICY_ATTRS)
        seen[cluster] = has
    lowered = text.lower()
    return has or any(key in lowered for key in _POLICY_KEYS)


def _decision(edit: JobEdit, now: int, system: SystemPolicy | None) -> PolicyDecision | None:
    view = edit.view()
    lease = lease_decision(view, now)
    if lease is not None:  # whoever manages the job, its submitter is gone
        return lease
    if view.get("Managed") == "External":
        return None
    if edit.status == JobStatus.HELD and view.get("HoldReasonCode") == HoldReasonCode.SpoolingInput:
        return None
    if system is None:  # the pool sets none: the job's own policy alone
        return periodic_decision(view, now)
    return periodic_decision(view, now, system)
