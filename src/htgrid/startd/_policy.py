"""The execute node's policy on running jobs: HTCondor's startd policy expressions.

    WANT_SUSPEND = false          whether SUSPEND is looked at (else PREEMPT is)
    SUSPEND = false               stop the job's processes (SIGSTOP): Claimed/Suspended
    CONTINUE = true               a suspended job runs again (SIGCONT)
    PREEMPT = false               the job must go: it may run out its retirement time
                                  (Claimed/Retiring), then it is vacated
    WANT_VACATE = true            vacate with the job's soft kill signal (Preempting/
                                  Vacating); else SIGKILL at once (Preempting/Killing)
    KILL = false                  a vacating job is killed at once (SIGKILL)
    MAXJOBRETIREMENTTIME = 0      seconds of run time (suspensions not counted) a
                                  preempted job is given to end by itself; a job's own
                                  MaxJobRetirementTime may take less, never more
    POLLING_INTERVAL = 5          seconds between evaluations of the running claims

Each expression is evaluated with MY the dynamic slot's ad (its State, Activity,
EnteredCurrentActivity, STARTD_ATTRS...; the slot ads carry the expressions too, as
HTCondor's do: SUSPEND, PREEMPT..., MaxJobRetirementTime) and TARGET the job's ad; a `_VANILLA` knob
(SUSPEND_VANILLA...) is used in place of its plain one when it is set, as the node runs
vanilla jobs only. The order is HTCondor's (ResState::eval): a preempted job whose
retirement is over is vacated; PREEMPT is looked at for a running job when WANT_SUSPEND
is not true, and for a suspended one that was not preempted yet; a retiring job is
vacated once its retirement, less its vacate time, is over; SUSPEND for a running or
retiring job when WANT_SUSPEND is true; CONTINUE for a suspended one; KILL for a
vacating one. A job vacated so ends evicted, and its schedd runs it again (004).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable
from typing import Final

from htgrid._aio import wait_event
from htgrid.classad import ClassAd, ExprTree
from htgrid.queue import VacateReasonCode
from htgrid.startd._ads import AdContext, dynamic_ad
from htgrid.startd._claims import Claim, Slots
from htgrid.startd._policy_knobs import StartdPolicy
from htgrid.startd._starter import Starter
from htgrid.startd._states import SLOT_OF, ClaimState

__all__ = ["PolicyPoller", "Step", "decide", "retirement_left"]

_log = logging.getLogger("htgrid.startd")

_RETIREMENT: Final = "MaxJobRetirementTime"  # the job ad's own (less than the node's)
#: The claims' states the policy looks at.
_POLICED: Final = frozenset(
    {ClaimState.RUNNING, ClaimState.SUSPENDED, ClaimState.RETIRING, ClaimState.VACATING}
)


class Step(enum.Enum):
    """What the policy does to a claim's job now."""

    SUSPEND = "SUSPEND is true"
    CONTINUE = "CONTINUE is true"
    RETIRE = "PREEMPT is true"
    VACATE = "retirement over: vacating"
    KILL_NOW = "retirement over: killing (WANT_VACATE is not true)"
    KILL = "KILL is true"


@functools.lru_cache(maxsize=64)
def _expr(text: str) -> ExprTree:
    return ExprTree(text)


def _true(text: str, my: ClassAd, target: ClassAd) -> bool:
    return _expr(text).eval(my, target) is True


def _seconds(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def retirement_left(policy: StartdPolicy, claim: Claim, my: ClassAd, now: float) -> float:
    """Seconds of retirement the job has left: MAXJOBRETIREMENTTIME (the job's own
    MaxJobRetirementTime when it is less), less its run time."""
    granted = _seconds(_expr(policy.max_job_retirement_time).eval(my, claim.job_ad)) or 0.0
    if _RETIREMENT in claim.job_ad:
        own = _seconds(claim.job_ad.lookup(_RETIREMENT).eval(claim.job_ad, my))
        if own is not None and own < granted:
            granted = own
    return max(0.0, granted - claim.run_time(now))


def decide(
    policy: StartdPolicy, claim: Claim, my: ClassAd, now: float, vacate_time: float
) -> Step | None:
    """The step the policy takes for `claim` (MY `my`, the dynamic slot's ad) at `now`,
    given its job's vacate time; None when it stays as it is."""
    state, job = claim.state, claim.job_ad
    if state not in _POLICED:
        return None
    if state is ClaimState.VACATING:
        return Step.KILL if _true(policy.kill, my, job) else None
    if claim.preempted and _retirement_over(policy, claim, my, now, vacate_time):
        return Step.VACATE if _true(policy.want_vacate, my, job) else Step.KILL_NOW
    want_suspend = _true(policy.want_suspend, my, job)
    running = state is ClaimState.RUNNING
    if (
        (running and not want_suspend) or (state is ClaimState.SUSPENDED and not claim.preempted)
    ) and _true(policy.preempt, my, job):
        return Step.RETIRE
    if (
        (running or state is ClaimState.RETIRING)
        and want_suspend
        and _true(policy.suspend, my, job)
    ):
        return Step.SUSPEND
    if state is ClaimState.SUSPENDED and _true(policy.continue_, my, job):
        return Step.CONTINUE
    return None


def _retirement_over(
    policy: StartdPolicy, claim: Claim, my: ClassAd, now: float, vacate_time: float
) -> bool:
    # As HTCondor, the job is vacated its vacate time before its retirement ends, so
    # that a job using all of it is gone by then.
    left = retirement_left(policy, claim, my, now)
    return left <= 0 or vacate_time >= left


class PolicyPoller:
    """Evaluates the policy on every claim running a job, each POLLING_INTERVAL and at
    once when woken (a reconfig)."""

    def __init__(
        self,
        books: Callable[[], tuple[Slots, AdContext]],
        policy: Callable[[], StartdPolicy],
        clock: Callable[[], float],
    ) -> None:
        self._books = books
        self._policy = policy
        self._clock = clock
        self.wake = asyncio.Event()

    async def run(self) -> None:
        while True:
            await wait_event(self.wake, self._policy().polling_interval)
            self.wake.clear()
            self.evaluate()

    def evaluate(self) -> None:
        """One evaluation of every claim running a job."""
        slots, ctx = self._books()
        policy = self._policy()
        for claim in list(slots.claims.values()):
            if claim.starter is None or claim.state not in _POLICED:
                continue
            try:
                self._evaluate(policy, slots, ctx, claim)
            except Exception:  # one claim's trouble must not stop the others' policy
                _log.exception("%s: the policy could not be evaluated", claim.name)

    def _evaluate(self, policy: StartdPolicy, slots: Slots, ctx: AdContext, claim: Claim) -> None:
        starter = claim.starter
        assert starter is not None
        while True:
            now = self._clock()
            my = dynamic_ad(ctx, slots, claim, now)  # with the policy's expressions
            step = decide(policy, claim, my, now, starter.vacate_time)
            if step is None:
                return
            before = claim.state
            _apply(step, starter)
            if claim.state is before:
                return  # nothing moved (its process is gone): no loop on it
            _log.info(
                "%s: job %s: %s: %s/%s -> %s/%s",
                claim.name,
                claim.job_id,
                step.value,
                *SLOT_OF[before],
                *SLOT_OF[claim.state],
            )
            # One step a poll; but a job preempted is looked at again at once: with no
            # retirement time, it is vacated in the same poll.
            if step is not Step.RETIRE:
                return


#: The VacateReason of a job its node's PREEMPT evicted (HTCondor's words).
_PREEMPTED: Final = "PREEMPT expression evaluated to True"


def _apply(step: Step, starter: Starter) -> None:
    if step is Step.SUSPEND:
        starter.suspend()
    elif step is Step.CONTINUE:
        starter.resume()
    elif step is Step.RETIRE:
        starter.retire()
    elif step is Step.VACATE:
        starter.vacate("vacate", why=_PREEMPTED, code=VacateReasonCode.StartdPreemptExpression)
    elif step is Step.KILL_NOW:
        starter.vacate(
            "vacate", hard=True, why=_PREEMPTED, code=VacateReasonCode.StartdPreemptExpression
        )
    else:
        starter.kill()
