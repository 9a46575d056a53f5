"""Job policies as HTCondor evaluates them: periodic_*, on_exit_*, max_retries, leave_in_queue."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.queue import (
    ExitOutcome,
    HoldReasonCode,
    Identity,
    InvalidTransition,
    JobAction,
    JobId,
    JobQueue,
    JobStatus,
    PolicyAction,
    exit_decision,
    periodic_decision,
)

ALICE = Identity("alice")
T0 = 1_700_000_000


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(tmp_path: Path, clock: Clock) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, clock=clock, fsync=False) as queue:
        yield queue


def job(**exprs: str) -> classad.ClassAd:
    """A job ad whose attributes are given as ClassAd expression text, as in a submit file."""
    ad = classad.ClassAd({"Cmd": "/bin/analysis"})
    for name, text in exprs.items():
        ad[name] = classad.ExprTree(text)
    return ad


def run(q: JobQueue, job_id: str, exit_code: int, *, by_signal: bool = False) -> ExitOutcome:
    q.job_started(job_id)
    return q.job_exited(job_id, exit_code, by_signal=by_signal)


# -- periodic -------------------------------------------------------------------------


def test_periodic_hold_with_the_queue_clock(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job(PeriodicHold="(CurrentTime - QDate) > 60"))
    clock.now = T0 + 60
    assert q.evaluate_periodic() == []
    clock.now = T0 + 61
    ((jid, decision),) = q.evaluate_periodic()
    assert jid == JobId(1, 0)
    assert decision.action is PolicyAction.HOLD
    ad = q.get(jid)
    assert ad["JobStatus"] == JobStatus.HELD
    assert ad["HoldReasonCode"] == HoldReasonCode.JobPolicy
    assert ad["HoldReasonSubCode"] == 0
    assert ad["HoldReason"] == (
        "The job attribute PeriodicHold expression '(CurrentTime - QDate) > 60' evaluated to TRUE"
    )
    assert ad["EnteredCurrentStatus"] == T0 + 61
    assert dict(ad["NumHoldsByReason"]) == {"JobPolicy": 1}
    assert "NumSystemHolds" not in ad


def test_periodic_hold_with_time_reads_the_real_clock(tmp_path: Path) -> None:
    # time() in ClassAds is the real clock, as in HTCondor: submit "in the past".
    with JobQueue.open(tmp_path, clock=lambda: time.time() - 3600, fsync=False) as q:
        q.submit(ALICE, job(PeriodicHold="(time() - QDate) > 60"))
        (decided,) = q.evaluate_periodic(now=int(time.time()))
        assert decided[1].action is PolicyAction.HOLD


def test_periodic_hold_reason_and_subcode(q: JobQueue) -> None:
    q.submit(
        ALICE,
        job(
            PeriodicHold="NumJobStarts >= 1 && JobStatus == 1",
            PeriodicHoldReason='strcat("restarted ", NumJobStarts, " times")',
            PeriodicHoldSubCode="40 + 2",
        ),
    )
    assert q.evaluate_periodic() == []
    q.job_started("1.0")
    q.job_evicted("1.0")
    q.evaluate_periodic()
    ad = q.get("1.0")
    assert (ad["HoldReason"], ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (
        "restarted 1 times",
        3,
        42,
    )


def test_periodic_release(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job(PeriodicRelease="(CurrentTime - EnteredCurrentStatus) > 300"))
    q.act(JobAction.Hold, "1.0", ALICE, "wait")
    clock.now = T0 + 301
    ((_, decision),) = q.evaluate_periodic()
    assert decision.action is PolicyAction.RELEASE
    ad = q.get("1.0")
    assert ad["JobStatus"] == JobStatus.IDLE
    assert ad["ReleaseReason"] == (
        "The job attribute PeriodicRelease expression "
        "'(CurrentTime - EnteredCurrentStatus) > 300' evaluated to TRUE"
    )
    assert ad["LastHoldReason"] == "wait"


def test_periodic_release_only_applies_to_held_jobs(q: JobQueue) -> None:
    q.submit(ALICE, job(PeriodicRelease="true"))
    assert q.evaluate_periodic() == []


def test_periodic_remove(q: JobQueue, clock: Clock) -> None:
    q.submit(
        ALICE, job(PeriodicRemove="JobStatus == 5 && (CurrentTime - EnteredCurrentStatus) > 10")
    )
    q.act(JobAction.Hold, "1.0", ALICE)
    clock.now = T0 + 11
    q.evaluate_periodic()
    assert q.query() == []
    (ad,) = q.history()
    assert ad["JobStatus"] == JobStatus.REMOVED
    assert ad["RemoveReason"].startswith("The job attribute PeriodicRemove expression")


def test_timer_remove(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job(TimerRemove=str(T0 + 100)))
    assert q.evaluate_periodic() == []
    clock.now = T0 + 101
    ((_, decision),) = q.evaluate_periodic()
    assert (decision.action, decision.attribute) == (PolicyAction.REMOVE, "TimerRemove")
    assert q.history()[0]["JobStatus"] == JobStatus.REMOVED


@pytest.mark.parametrize(
    "expr", ["NoSuchAttribute > 5", "error", '"yes"', "undefined", "0.5", "1 / 0"]
)
def test_undefined_error_and_non_numbers_do_not_fire(q: JobQueue, expr: str) -> None:
    # HTCondor 9.1.3 and later ignore a policy that evaluates to undefined.
    q.submit(ALICE, job(PeriodicHold=expr, PeriodicRemove=expr))
    assert q.evaluate_periodic() == []
    assert q.get("1.0")["JobStatus"] == JobStatus.IDLE


def test_numbers_fire_like_booleans() -> None:
    assert periodic_decision(job(JobStatus="1", PeriodicHold="2"), T0) is not None
    assert periodic_decision(job(JobStatus="1", PeriodicHold="1.5"), T0) is not None
    assert periodic_decision(job(JobStatus="1", PeriodicHold="0"), T0) is None


def test_grid_managed_jobs_are_left_to_the_grid_manager(q: JobQueue) -> None:
    ad = job(PeriodicHold="true")
    ad["Managed"] = "External"
    q.submit(ALICE, ad)
    assert q.evaluate_periodic() == []


def test_policies_on_procs_and_edited_ones_are_found(q: JobQueue) -> None:
    # The periodic pass only decodes jobs whose cluster or own ad names a policy.
    q.submit(ALICE, job(), 500)
    hold_third = classad.ClassAd({"PeriodicHold": classad.ExprTree("ProcId == 3")})
    q.submit(ALICE, job(), [classad.ClassAd()] * 3 + [hold_third])
    q.edit("1.7", {"periodicremove": "true"}, ALICE)
    decided = [(str(jid), d.action) for jid, d in q.evaluate_periodic()]
    assert decided == [("1.7", PolicyAction.REMOVE), ("2.3", PolicyAction.HOLD)]


# -- at exit --------------------------------------------------------------------------


def test_exit_without_policies_completes(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job())
    q.job_started("1.0")
    clock.now = T0 + 30
    assert q.job_exited("1.0", 0) is ExitOutcome.COMPLETED
    assert q.query() == []
    (ad,) = q.history()
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["LastJobStatus"] == JobStatus.RUNNING
    assert ad["ExitCode"] == 0
    assert ad["ExitBySignal"] is False
    assert ad["NumJobCompletions"] == 1
    assert ad["CompletionDate"] == T0 + 30
    assert ad["JobFinishedHookDone"] == T0 + 30
    assert "ExitSignal" not in ad


def test_max_retries_requeues_until_the_retries_are_used(q: JobQueue) -> None:
    # condor_submit: max_retries = 2 -> JobMaxRetries and this OnExitRemove.
    ad = job(OnExitRemove="NumJobCompletions > JobMaxRetries || ExitCode == 0")
    ad["JobMaxRetries"] = 2
    q.submit(ALICE, ad)
    assert run(q, "1.0", 1) is ExitOutcome.REQUEUED
    queued = q.get("1.0")
    assert (queued["JobStatus"], queued["NumJobCompletions"], queued["ExitCode"]) == (1, 1, 1)
    assert run(q, "1.0", 1) is ExitOutcome.REQUEUED
    assert run(q, "1.0", 1) is ExitOutcome.COMPLETED
    (done,) = q.history()
    assert (done["NumJobCompletions"], done["NumJobStarts"], done["ExitCode"]) == (3, 3, 1)


def test_max_retries_stops_at_success(q: JobQueue) -> None:
    ad = job(OnExitRemove="NumJobCompletions > JobMaxRetries || ExitCode == JobSuccessExitCode")
    ad["JobMaxRetries"] = 5
    ad["JobSuccessExitCode"] = 7
    q.submit(ALICE, ad)
    assert run(q, "1.0", 0) is ExitOutcome.REQUEUED
    assert run(q, "1.0", 7) is ExitOutcome.COMPLETED


def test_on_exit_hold_uses_job_policy_code(q: JobQueue) -> None:
    q.submit(
        ALICE,
        job(
            OnExitHold="ExitCode != 0",
            OnExitHoldReason='strcat("exit code ", ExitCode)',
            OnExitHoldSubCode="ExitCode",
        ),
    )
    assert run(q, "1.0", 3) is ExitOutcome.HELD
    ad = q.get("1.0")
    assert (ad["JobStatus"], ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (5, 3, 3)
    assert ad["HoldReason"] == "exit code 3"
    assert ad["NumJobCompletions"] == 1
    assert "CompletionDate" not in ad


def test_the_exit_policy_sees_the_usage_of_the_run_that_ended(q: JobQueue) -> None:
    # As HTCondor's shadow updates the job's usage before its exit policy is evaluated.
    q.submit(ALICE, job(OnExitHold="RemoteWallClockTime > 100"))
    q.job_started("1.0")
    outcome = q.job_exited("1.0", 0, usage={"RemoteWallClockTime": 250.0, "RemoteUserCpu": 1.5})
    assert outcome is ExitOutcome.HELD
    ad = q.get("1.0")
    assert (ad["RemoteWallClockTime"], ad["RemoteUserCpu"]) == (250.0, 1.5)


def test_on_exit_hold_default_reason(q: JobQueue) -> None:
    q.submit(ALICE, job(OnExitHold="ExitBySignal"))
    assert run(q, "1.0", 9, by_signal=True) is ExitOutcome.HELD
    ad = q.get("1.0")
    assert (
        ad["HoldReason"]
        == "The job attribute OnExitHold expression 'ExitBySignal' evaluated to TRUE"
    )
    assert (ad["ExitBySignal"], ad["ExitSignal"]) == (True, 9)
    assert "ExitCode" not in ad


def test_on_exit_remove_false_requeues(q: JobQueue) -> None:
    q.submit(ALICE, job(OnExitRemove="ExitBySignal == false"))
    assert run(q, "1.0", 11, by_signal=True) is ExitOutcome.REQUEUED
    assert run(q, "1.0", 0) is ExitOutcome.COMPLETED


def test_undefined_on_exit_remove_requeues(q: JobQueue) -> None:
    # Present but not true: the job stays, exactly as OnExitRemove = false would.
    q.submit(ALICE, job(OnExitRemove="NoSuchAttribute"))
    assert run(q, "1.0", 0) is ExitOutcome.REQUEUED


def test_periodic_remove_at_exit_completes_the_job(q: JobQueue) -> None:
    # ShadowUserPolicy: a periodic remove that fires at exit terminates the job.
    q.submit(ALICE, job(PeriodicRemove="ExitCode =?= 2", OnExitRemove="false"))
    assert run(q, "1.0", 2) is ExitOutcome.COMPLETED
    assert q.history()[0]["JobStatus"] == JobStatus.COMPLETED


def test_leave_in_queue_keeps_the_completed_job(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job(LeaveJobInQueue="(CurrentTime - CompletionDate) < 100"))
    assert run(q, "1.0", 0) is ExitOutcome.LEFT_IN_QUEUE
    ad = q.get("1.0")
    assert (ad["JobStatus"], ad["CompletionDate"]) == (JobStatus.COMPLETED, T0)
    assert q.history() == []
    clock.now = T0 + 99
    q.evaluate_periodic()
    assert len(q.query()) == 1
    clock.now = T0 + 100
    q.evaluate_periodic()
    assert q.query() == []
    assert q.history()[0]["JobStatus"] == JobStatus.COMPLETED


def test_removing_a_job_kept_by_leave_in_queue(q: JobQueue) -> None:
    # The common LeaveJobInQueue = JobStatus == 4: condor_rm makes it false.
    q.submit(ALICE, job(LeaveJobInQueue="JobStatus == 4"))
    assert run(q, "1.0", 0) is ExitOutcome.LEFT_IN_QUEUE
    q.act(JobAction.Remove, "1.0", ALICE)
    assert q.query() == []
    ad = q.history()[0]
    assert (ad["JobStatus"], ad["LastJobStatus"]) == (JobStatus.REMOVED, JobStatus.COMPLETED)


def test_exit_of_a_job_that_is_not_running(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(InvalidTransition, match=r"job 1\.0: cannot record an exit: it is Idle"):
        q.job_exited("1.0", 0)


def test_exit_decision_is_a_pure_function() -> None:
    ad = job(OnExitHold="ExitCode == 1", OnExitRemove="ExitCode == 0")
    ad["JobStatus"] = 2
    ad["ExitCode"] = 1
    assert exit_decision(ad, T0).action is PolicyAction.HOLD
    ad["ExitCode"] = 0
    assert exit_decision(ad, T0).action is PolicyAction.COMPLETE
    ad["ExitCode"] = 3
    decision = exit_decision(ad, T0)
    assert decision.action is PolicyAction.REQUEUE
    assert decision.reason == (
        "The job attribute OnExitRemove expression 'ExitCode == 0' evaluated to FALSE"
    )
    assert "CurrentTime" not in ad
