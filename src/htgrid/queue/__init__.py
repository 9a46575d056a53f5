"""The durable job queue (HTCondor's schedd) and what it writes for its jobs.

`JobQueue` (store.py) keeps clusters and procs in SQLite with HTCondor's ids, statuses,
hold codes and policy semantics; `eventlog` writes the user job event log.
"""

from htgrid.queue._codes import HoldReasonCode, JobAction
from htgrid.queue._errors import (
    InvalidSubmit,
    InvalidTransition,
    JobNotFound,
    NotAuthorized,
    ProtectedAttribute,
    QueueError,
    StoreError,
)
from htgrid.queue._feed import Change, ChangeKind
from htgrid.queue._ids import Identity, JobId
from htgrid.queue._policy import (
    ExitOutcome,
    PolicyAction,
    PolicyDecision,
    exit_decision,
    periodic_decision,
)
from htgrid.queue._status import TRANSITIONS, JobStatus
from htgrid.queue._submit import SubmitTransaction
from htgrid.queue.store import JobQueue, JobSpec

__all__ = [
    "TRANSITIONS",
    "Change",
    "ChangeKind",
    "ExitOutcome",
    "HoldReasonCode",
    "Identity",
    "InvalidSubmit",
    "InvalidTransition",
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
    "QueueError",
    "StoreError",
    "SubmitTransaction",
    "exit_decision",
    "periodic_decision",
]
