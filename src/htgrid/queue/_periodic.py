"""The schedd's periodic pass over the queue (`JobQueue.evaluate_periodic`): the job
policies of every job that may have one, and completed jobs that LeaveJobInQueue no
longer keeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from htgrid.queue._codes import HoldReasonCode
from htgrid.queue._ids import JobId
from htgrid.queue._policy import PolicyDecision, lease_decision, periodic_decision, truth, with_time
from htgrid.queue._status import JobStatus
from htgrid.queue._store import JobEdit, Store, Txn

__all__ = ["keep_in_queue", "periodic_pass"]

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


def periodic_pass(txn: Txn, apply: Apply) -> list[tuple[JobId, PolicyDecision]]:
    """Evaluate every job not Removed at `txn.now`; the decisions applied (by `apply`)."""
    applied: list[tuple[JobId, PolicyDecision]] = []
    rows = txn.conn.execute(
        "SELECT cluster, proc, status, ad, masked FROM jobs WHERE status <> ? "
        "ORDER BY cluster, proc",
        (int(JobStatus.REMOVED),),
    ).fetchall()
    policy_clusters: dict[int, bool] = {}
    for cluster, proc, status, text, masked in rows:
        if status != JobStatus.COMPLETED and not _may_have_policy(
            txn.store, policy_clusters, cluster, text
        ):
            continue
        edit = txn.edit_of(JobId(cluster, proc), text, masked)
        if status == JobStatus.COMPLETED:
            if not keep_in_queue(edit, txn.now):
                txn.leave(edit)
            continue
        decision = _decision(edit, txn.now)
        if decision is not None:
            apply(txn, edit, decision)
            applied.append((edit.job_id, decision))
    return applied


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


def _decision(edit: JobEdit, now: int) -> PolicyDecision | None:
    view = edit.view()
    lease = lease_decision(view, now)
    if lease is not None:  # whoever manages the job, its submitter is gone
        return lease
    if view.get("Managed") == "External":
        return None
    if edit.status == JobStatus.HELD and view.get("HoldReasonCode") == HoldReasonCode.SpoolingInput:
        return None
    return periodic_decision(view, now)
