"""Job states and the one table of legal status changes, enforced by the store.

`JobStatus` has HTCondor's codes (proc.h, htcondor2.JobStatus). A status change the table
does not list raises `InvalidTransition`; every writer in the queue goes through
`check_transition`, so no code path can move a job the table forbids.

    from \\ to            Idle  Running  Removed  Completed  Held  TransferOut  Suspended
    Idle                   .      yes      yes       .        yes      .            .
    Running               yes      .       yes      yes       yes     yes          yes
    Removed                .       .        .        .         .       .            .
    Completed              .       .       yes       .         .       .            .
    Held                  yes      .       yes       .         .       .            .
    TransferringOutput    yes      .       yes      yes       yes      .            .
    Suspended             yes     yes      yes       .        yes      .            .

Removed and Completed jobs leave the queue (to the history) once nothing runs them and
`LeaveJobInQueue` is not true; Completed -> Removed is `condor_rm` of a job kept in the
queue by `LeaveJobInQueue`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.queue._errors import InvalidTransition

__all__ = ["ACTIVE", "TRANSITIONS", "JobStatus", "check_transition"]


class JobStatus(enum.IntEnum):
    """HTCondor's `JobStatus` codes."""

    IDLE = 1
    RUNNING = 2
    REMOVED = 3
    COMPLETED = 4
    HELD = 5
    TRANSFERRING_OUTPUT = 6
    SUSPENDED = 7

    @property
    def label(self) -> str:
        """The name condor_q prints: Idle, Running, ..., TransferringOutput."""
        return self.name.title().replace("_", "")


_S = JobStatus

TRANSITIONS: Final[Mapping[JobStatus, frozenset[JobStatus]]] = {
    _S.IDLE: frozenset({_S.RUNNING, _S.REMOVED, _S.HELD}),
    _S.RUNNING: frozenset(
        {_S.IDLE, _S.REMOVED, _S.COMPLETED, _S.HELD, _S.TRANSFERRING_OUTPUT, _S.SUSPENDED}
    ),
    _S.REMOVED: frozenset(),
    _S.COMPLETED: frozenset({_S.REMOVED}),
    _S.HELD: frozenset({_S.IDLE, _S.REMOVED}),
    _S.TRANSFERRING_OUTPUT: frozenset({_S.IDLE, _S.REMOVED, _S.COMPLETED, _S.HELD}),
    _S.SUSPENDED: frozenset({_S.IDLE, _S.RUNNING, _S.REMOVED, _S.HELD}),
}

# Statuses in which something (a shadow, the grid manager) is running the job: removing
# such a job leaves it in the queue as Removed until the runner lets go (`destroy`).
ACTIVE: Final = frozenset({_S.RUNNING, _S.TRANSFERRING_OUTPUT, _S.SUSPENDED})


def check_transition(job: str, old: JobStatus, new: JobStatus, what: str) -> None:
    """Raise `InvalidTransition` unless the table allows `old` -> `new` for `job`."""
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(
            f"job {job}: cannot {what}: it is {old.label}, and {old.label} -> {new.label} "
            "is not a legal status change"
        )
