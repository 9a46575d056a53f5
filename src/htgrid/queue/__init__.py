"""The durable job queue (HTCondor's schedd) and what it writes for its jobs.

`JobQueue` (store.py) keeps clusters and procs in SQLite with HTCondor's ids, statuses,
hold codes and policy semantics (the user job event log is `htgrid.eventlog`).

The ids, codes, statuses and errors load with the package; the store, its change feed
and its policies when first asked for: a command that only talks to a daemon (`htgrid
q`, `rm`) needs the former, not SQLite and the rest (~20 ms of each start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.queue._codes import HoldReasonCode, JobAction, VacateReasonCode
from htgrid.queue._errors import (
    InvalidSubmit,
    InvalidTransition,
    InvalidValue,
    JobNotFound,
    NotAuthorized,
    ProtectedAttribute,
    QueueError,
    StoreError,
)
from htgrid.queue._ids import ID_MAX, Identity, JobId
from htgrid.queue._status import TRANSITIONS, JobStatus

if TYPE_CHECKING:
    from htgrid.queue._factory import FactoryInfo
    from htgrid.queue._feed import Change, ChangeKind, feed_gap
    from htgrid.queue._policy import (
        ExitOutcome,
        PolicyAction,
        PolicyDecision,
        SystemPolicy,
        exit_decision,
        periodic_decision,
    )
    from htgrid.queue._quarantine import Quarantined
    from htgrid.queue._submit import StagedProcs, SubmitTransaction
    from htgrid.queue._summary import BatchCounts
    from htgrid.queue.store import JobQueue, JobSpec

#: Where each other name lives, loaded when first asked for.
_LAZY: Final = {
    "Change": "_feed",
    "ChangeKind": "_feed",
    "feed_gap": "_feed",
    "ExitOutcome": "_policy",
    "PolicyAction": "_policy",
    "PolicyDecision": "_policy",
    "SystemPolicy": "_policy",
    "exit_decision": "_policy",
    "periodic_decision": "_policy",
    "Quarantined": "_quarantine",
    "StagedProcs": "_submit",
    "BatchCounts": "_summary",
    "FactoryInfo": "_factory",
    "SubmitTransaction": "_submit",
    "JobQueue": "store",
    "JobSpec": "store",
}


__getattr__ = on_demand(__name__, _LAZY)


__all__ = [
    "ID_MAX",
    "TRANSITIONS",
    "BatchCounts",
    "Change",
    "ChangeKind",
    "ExitOutcome",
    "FactoryInfo",
    "HoldReasonCode",
    "Identity",
    "InvalidSubmit",
    "InvalidTransition",
    "InvalidValue",
    "JobAction",
    "JobId",
    "JobNotFound",
    "JobQueue",
    "JobSpec",
    "JobStatus",
    "NotAuthorized",
    "PolicyAction",
    "PolicyDecision",
    "ProtectedAttribute",
    "Quarantined",
    "QueueError",
    "StagedProcs",
    "StoreError",
    "SubmitTransaction",
    "SystemPolicy",
    "VacateReasonCode",
    "exit_decision",
    "feed_gap",
    "periodic_decision",
]
