"""What each status change writes into the job ad, as the schedd writes it (schedd.cpp).

Every function changes one `JobEdit` and goes through `set_status`, which checks the
transition table and writes `JobStatus`, `LastJobStatus` and `EnteredCurrentStatus`.
"""

from __future__ import annotations

from typing import Final

from htgrid.classad import ClassAd
from htgrid.queue._codes import HoldReasonCode
from htgrid.queue._errors import InvalidTransition
from htgrid.queue._matches import undo_match
from htgrid.queue._status import JobStatus, check_transition
from htgrid.queue._store import JobEdit

__all__ = [
    "complete",
    "evict",
    "hold",
    "record_exit",
    "release",
    "remove",
    "set_status",
    "start",
]

#: Why the last run stopped before its job ended; dropped when the job runs again.
_VACATE_REASON: Final = ("VacateReason", "VacateReasonCode", "VacateReasonSubCode")


def set_status(edit: JobEdit, new: JobStatus, now: int, what: str) -> None:
    """Change the status if the table allows it; LastJobStatus keeps the old one."""
    old = edit.status
    check_transition(str(edit.job_id), old, new, what)
    edit.set("JobStatus", int(new))
    edit.set("LastJobStatus", int(old))
    edit.set("EnteredCurrentStatus", now)


def _increment(edit: JobEdit, name: str) -> None:
    value = edit.get(name, 0)
    edit.set(name, (value if type(value) is int else 0) + 1)


def _move(edit: JobEdit, old: str, new: str) -> None:
    """moveStrAttr/moveIntAttr: copy `old` to `new` and delete `old`, if `old` is set."""
    if edit.has(old):
        edit.set(new, edit.get(old))
        edit.delete(old)


def hold(edit: JobEdit, reason: str, code: HoldReasonCode, subcode: int, now: int) -> None:
    """holdJobRaw: Held, with HoldReason, HoldReasonCode and HoldReasonSubCode.

    A held job may be held again only to turn a hold not asked for by a user into a user
    hold (condor_hold on a job held by policy); anything else is refused.
    """
    status = edit.status
    if status == JobStatus.HELD:
        old_code = edit.get("HoldReasonCode", 0)
        if code != HoldReasonCode.UserRequest or old_code in (
            HoldReasonCode.UserRequest,
            HoldReasonCode.SpoolingInput,
        ):
            raise InvalidTransition(f"job {edit.job_id}: cannot hold: it is already Held")
        edit.set("EnteredCurrentStatus", now)
    else:
        set_status(edit, JobStatus.HELD, now, "hold")
        _increment(edit, "NumHolds")
        by_reason = edit.get("NumHoldsByReason")
        counts = ClassAd(repr(by_reason)) if isinstance(by_reason, ClassAd) else ClassAd()
        label = code.name
        previous = counts.get(label, 0)
        counts[label] = (previous if type(previous) is int else 0) + 1
        edit.set("NumHoldsByReason", counts)
        if code.is_system_hold:
            _increment(edit, "NumSystemHolds")
    edit.set("HoldReason", reason)
    edit.set("HoldReasonCode", int(code))
    edit.set("HoldReasonSubCode", subcode)
    _move(edit, "ReleaseReason", "LastReleaseReason")
    edit.set("LastSuspensionTime", 0)


def release(edit: JobEdit, reason: str, now: int) -> None:
    """releaseJobRaw: back to Idle, with ReleaseReason; the hold reasons move to Last*;
    a grid job's match is undone (`_matches`).

    (HTCondor releases to `JobStatusOnRelease` when set, which only spooled input uses;
    this queue has no spooling, so release always goes to Idle.)
    """
    if edit.status != JobStatus.HELD:
        raise InvalidTransition(
            f"job {edit.job_id}: cannot release: it is {edit.status.label}, not Held"
        )
    edit.set("ReleaseReason", reason)
    set_status(edit, JobStatus.IDLE, now, "release")
    _move_hold_reasons(edit)
    edit.set("LastSuspensionTime", 0)
    undo_match(edit)  # a grid job back from a site that failed it is matched anew


def remove(edit: JobEdit, reason: str, now: int) -> None:
    """abortJobRaw: Removed, with RemoveReason; hold reasons move to Last*."""
    if edit.status == JobStatus.REMOVED:
        raise InvalidTransition(f"job {edit.job_id}: cannot remove: it is already Removed")
    set_status(edit, JobStatus.REMOVED, now, "remove")
    if reason:
        edit.set("RemoveReason", reason)
    _move_hold_reasons(edit)


def _move_hold_reasons(edit: JobEdit) -> None:
    """fixReasonAttrs for release and remove."""
    _move(edit, "HoldReason", "LastHoldReason")
    _move(edit, "HoldReasonCode", "LastHoldReasonCode")
    _move(edit, "HoldReasonSubCode", "LastHoldReasonSubCode")
    edit.delete("JobStatusOnRelease")


def start(edit: JobEdit, now: int) -> None:
    """The job began running: NumJobStarts, JobStartDate (first run), JobCurrentStartDate."""
    set_status(edit, JobStatus.RUNNING, now, "start")
    for name in _VACATE_REASON:  # those of an earlier run (HTCondor's schedd drops them too)
        edit.delete(name)
    _increment(edit, "NumJobStarts")
    if not edit.has("JobStartDate"):
        edit.set("JobStartDate", now)
    edit.set("JobCurrentStartDate", now)


def evict(edit: JobEdit, now: int, reason: str = "", code: int = 0, subcode: int = 0) -> None:
    """The job stopped without exiting (vacated, preempted) and waits to run again;
    `reason` and its `code` (a `VacateReasonCode`) say why, when known."""
    set_status(edit, JobStatus.IDLE, now, "requeue")
    edit.set("LastVacateTime", now)
    if reason:
        for name, value in zip(_VACATE_REASON, (reason, code, subcode), strict=True):
            edit.set(name, value)


def record_exit(edit: JobEdit, exit_code: int, by_signal: bool) -> None:
    """What the shadow records when the job's process ends, before the policy decides."""
    status = edit.status
    if status not in (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT):
        raise InvalidTransition(
            f"job {edit.job_id}: cannot record an exit: it is {status.label}, not Running"
        )
    edit.set("ExitBySignal", by_signal)
    if by_signal:
        edit.set("ExitSignal", exit_code)
        edit.delete("ExitCode")
    else:
        edit.set("ExitCode", exit_code)
        edit.delete("ExitSignal")
    _increment(edit, "NumJobCompletions")


def complete(edit: JobEdit, now: int) -> None:
    """The job is done: Completed, with CompletionDate."""
    set_status(edit, JobStatus.COMPLETED, now, "complete")
    edit.set("CompletionDate", now)
