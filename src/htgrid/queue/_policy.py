"""The job's own policy expressions, decided as HTCondor decides them (user_job_policy.cpp).

Pure functions of a job ad: they say what should happen and never change anything, so the
store, the grid manager and tests share them.

Periodic (the schedd, every PERIODIC_EXPR_INTERVAL), first that fires wins:
`TimerRemove` (an epoch time in the past), `PeriodicHold` (unless held), `PeriodicRelease`
(only when held), `PeriodicRemove`. Before them, `lease_decision`: a job whose
`JobLeaseExpiration` has passed is removed (HTCondor-C's remote copy, whose submitter
stopped renewing its lease).

At exit (the shadow, when the job's process ends): the periodic ones again (a firing
`PeriodicRemove` then ends the job as completed, as ShadowUserPolicy::doAction does),
then `OnExitHold`, then `OnExitRemove`: true or absent completes the job, anything else
puts it back to idle. `max_retries` needs nothing here: condor_submit turns it into
`OnExitRemove = NumJobCompletions > JobMaxRetries || ExitCode == 0` (or the
`success_exit_code`), and the store counts `NumJobCompletions`.

An expression counts when it evaluates to a number (booleans included) that is not 0;
undefined, error and strings count as false (HTCondor 9.1.3 and later ignore undefined
policy results instead of holding the job). `<Attr>Reason` and `<Attr>SubCode` supply the
hold reason and subcode; the default reason names the expression.

The pool's own policy (`SystemPolicy`: SYSTEM_PERIODIC_HOLD, _RELEASE and _REMOVE, each
with its _REASON and _SUBCODE expression) follows the job's of the same kind, as in
user_job_policy.cpp: its holds carry HoldReasonCode SystemPolicy, and SYSTEM_PERIODIC_RELEASE
never releases a job its user held.

`time()` in an expression reads the real clock, as in HTCondor; `CurrentTime` reads the
queue's clock (the store sets it in the evaluation scope), so tests and simulations can
move time.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue._codes import HoldReasonCode
from htgrid.queue._serial import overlay
from htgrid.queue._status import JobStatus

__all__ = [
    "SYSTEM_POLICY_KNOBS",
    "ExitOutcome",
    "PolicyAction",
    "PolicyDecision",
    "SystemPolicy",
    "exit_decision",
    "lease_decision",
    "periodic_decision",
    "truth",
    "with_time",
]


class PolicyAction(enum.Enum):
    """What a policy decided."""

    HOLD = "hold"
    RELEASE = "release"
    REMOVE = "remove"
    COMPLETE = "complete"  # at exit: the job is done and leaves (unless LeaveJobInQueue)
    REQUEUE = "requeue"  # at exit: back to idle, to run again


class ExitOutcome(enum.Enum):
    """What became of a job whose process exited (`JobQueue.job_exited`)."""

    COMPLETED = "completed"  # Completed, and moved to the history
    LEFT_IN_QUEUE = "left_in_queue"  # Completed, kept in the queue by LeaveJobInQueue
    REQUEUED = "requeued"  # back to Idle (OnExitRemove false, e.g. max_retries left)
    HELD = "held"  # OnExitHold (or PeriodicHold) fired


LEASE_EXPIRED: Final = "The job's lease expired: its submitter did not renew it (JobLeaseDuration)"


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """A decision, the attribute that made it, and the reason HTCondor would record."""

    action: PolicyAction
    attribute: str
    reason: str
    code: HoldReasonCode = HoldReasonCode.JobPolicy
    subcode: int = 0


def truth(value: Any) -> bool:
    """A policy result as HTCondor reads it: a non-zero number (or true) fires."""
    t = type(value)
    if t is bool:
        return bool(value)
    if t is int:
        return bool(value != 0)
    if t is float:
        # C++ truncates the real to an integer: 0.5 does not fire.
        return math.isfinite(value) and int(value) != 0
    return False


def with_time(ad: ClassAd, now: int) -> ClassAd:
    """`ad` with `CurrentTime` set to the queue's clock, for evaluating policies."""
    clock = ClassAd()
    clock["CurrentTime"] = now
    return overlay(ad, clock)


#: The knobs of `SystemPolicy`, each with its _REASON and _SUBCODE.
SYSTEM_POLICY_KNOBS: Final = (
    "SYSTEM_PERIODIC_HOLD",
    "SYSTEM_PERIODIC_RELEASE",
    "SYSTEM_PERIODIC_REMOVE",
)


#: A system policy: its expression, its _REASON and its _SUBCODE expressions.
_Rule = tuple[ExprTree, ExprTree | None, ExprTree | None]


@dataclass(frozen=True, slots=True)
class SystemPolicy:
    """The pool's periodic policy for every job (SYSTEM_PERIODIC_*), parsed once: for
    each of hold, release and remove, (expression, reason expression, subcode
    expression), or None where the knob is unset."""

    hold: _Rule | None = None
    release: _Rule | None = None
    remove: _Rule | None = None

    def __bool__(self) -> bool:
        return bool(self.hold or self.release or self.remove)

    @classmethod
    def parse(cls, knobs: Callable[[str], str]) -> SystemPolicy:
        """The policy from `knobs(name)` (\"\" for an unset knob). A knob that is not an
        expression raises the parser's error, whose message the caller prefixes with
        the knob's name (see `SystemPolicy.problem`)."""
        parts: list[_Rule | None] = []
        for name in SYSTEM_POLICY_KNOBS:
            text = knobs(name).strip()
            if not text or text in ("0", "false", "FALSE", "False"):
                parts.append(None)
                continue
            reason, subcode = knobs(f"{name}_REASON").strip(), knobs(f"{name}_SUBCODE").strip()
            parts.append(
                (
                    ExprTree(text),
                    ExprTree(reason) if reason else None,
                    ExprTree(subcode) if subcode else None,
                )
            )
        return cls(*parts)


def _system(
    scope: ClassAd,
    name: str,
    policy: _Rule | None,
    action: PolicyAction,
) -> PolicyDecision | None:
    if policy is None:
        return None
    expr, reason_expr, subcode_expr = policy
    if not truth(expr.eval(scope)):
        return None
    reason = reason_expr.eval(scope) if reason_expr is not None else None
    if type(reason) is not str or not reason:
        reason = f"The system macro {name} expression '{expr}' evaluated to TRUE"
    subcode = subcode_expr.eval(scope) if subcode_expr is not None else 0
    if type(subcode) is float and math.isfinite(subcode):
        subcode = int(subcode)
    if type(subcode) is not int:
        subcode = 0
    return PolicyDecision(action, name, reason, HoldReasonCode.SystemPolicy, subcode)


def periodic_decision(
    ad: ClassAd, now: int, system: SystemPolicy | None = None
) -> PolicyDecision | None:
    """What the schedd's periodic evaluation does to this job, or None."""
    scope = with_time(ad, now)
    status = scope.get("JobStatus")
    decision = _timer_remove(scope, now, PolicyAction.REMOVE)
    if decision is None and status != JobStatus.HELD:
        decision = _single(scope, "PeriodicHold", PolicyAction.HOLD)
        if decision is None and system is not None and status != JobStatus.COMPLETED:
            decision = _system(scope, "SYSTEM_PERIODIC_HOLD", system.hold, PolicyAction.HOLD)
    if decision is None and status == JobStatus.HELD:
        decision = _single(scope, "PeriodicRelease", PolicyAction.RELEASE)
        if (
            decision is None
            and system is not None
            and scope.get("HoldReasonCode") != HoldReasonCode.UserRequest
        ):
            decision = _system(
                scope, "SYSTEM_PERIODIC_RELEASE", system.release, PolicyAction.RELEASE
            )
    if decision is None:
        decision = _single(scope, "PeriodicRemove", PolicyAction.REMOVE)
    if decision is None and system is not None:
        decision = _system(scope, "SYSTEM_PERIODIC_REMOVE", system.remove, PolicyAction.REMOVE)
    return decision


def lease_decision(ad: ClassAd, now: int) -> PolicyDecision | None:
    """Remove the job if its `JobLeaseExpiration` (epoch seconds) is in the past."""
    if "JobLeaseExpiration" not in ad:
        return None
    when = ad.eval("JobLeaseExpiration")
    if type(when) not in (int, float) or not when < now:
        return None
    return PolicyDecision(PolicyAction.REMOVE, "JobLeaseExpiration", LEASE_EXPIRED)


def exit_decision(ad: ClassAd, now: int) -> PolicyDecision:
    """What happens to a job whose process exited (its ad already has ExitCode etc.)."""
    scope = with_time(ad, now)
    decision = _timer_remove(scope, now, PolicyAction.COMPLETE)
    if decision is None:
        decision = _single(scope, "PeriodicHold", PolicyAction.HOLD)
    if decision is None:
        decision = _single(scope, "PeriodicRemove", PolicyAction.COMPLETE)
    if decision is None:
        decision = _single(scope, "OnExitHold", PolicyAction.HOLD)
    if decision is not None:
        return decision
    if "OnExitRemove" not in scope:
        return PolicyDecision(PolicyAction.COMPLETE, "OnExitRemove", "")
    decision = _single(scope, "OnExitRemove", PolicyAction.COMPLETE)
    if decision is not None:
        return decision
    return PolicyDecision(
        PolicyAction.REQUEUE, "OnExitRemove", _default_reason(scope, "OnExitRemove", "FALSE")
    )


def _single(scope: ClassAd, attr: str, action: PolicyAction) -> PolicyDecision | None:
    if attr not in scope or not truth(scope.eval(attr)):
        return None
    reason = scope.eval(f"{attr}Reason") if f"{attr}Reason" in scope else None
    if type(reason) is not str or not reason:
        reason = _default_reason(scope, attr, "TRUE")
    subcode: Any = scope.eval(f"{attr}SubCode") if f"{attr}SubCode" in scope else 0
    if isinstance(subcode, float):
        subcode = int(subcode) if math.isfinite(subcode) else 0
    elif type(subcode) is not int and type(subcode) is not bool:
        subcode = 0
    return PolicyDecision(action, attr, reason, subcode=int(subcode))


def _timer_remove(scope: ClassAd, now: int, action: PolicyAction) -> PolicyDecision | None:
    if "TimerRemove" not in scope:
        return None
    when = scope.eval("TimerRemove")
    if type(when) is not int or not 0 <= when < now:
        return None
    return PolicyDecision(action, "TimerRemove", _default_reason(scope, "TimerRemove", "TRUE"))


def _default_reason(scope: ClassAd, attr: str, value: str) -> str:
    return f"The job attribute {attr} expression '{scope.lookup(attr)!r}' evaluated to {value}"
