"""One job whose policy cannot be evaluated is held for it; the others' policies go on.

The failure is injected where the queue evaluates one job's policy (the narrowest seam:
`periodic_decision` and `exit_decision` as the queue calls them), so that these tests
stay true whatever a ClassAd can or cannot evaluate; the deep chain at the end is a real
trigger of today.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import htgrid.classad as classad
import htgrid.queue._periodic as periodic_module
import htgrid.queue.store as store_module
from htgrid.queue import (
    ExitOutcome,
    HoldReasonCode,
    Identity,
    JobId,
    JobQueue,
    JobStatus,
    PolicyAction,
    StoreError,
)
from htgrid.queue.faults import JobFailure, daemon_fault, problem

ALICE = Identity("alice")
BOB = Identity("bob")


@pytest.fixture
def q(tmp_path: Path) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        yield queue


def job(**exprs: str) -> classad.ClassAd:
    ad = classad.ClassAd({"Cmd": "/bin/analysis", "JobUniverse": 12})
    for name, text in exprs.items():
        ad[name] = classad.ExprTree(text)
    return ad


def poisoned(real: Any) -> Any:
    """`real`, raising for a job ad with `Poison = true` (as a bug only it meets would)."""

    def evaluate(ad: classad.ClassAd, now: int) -> Any:
        if ad.get("Poison") is True:
            raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")
        return real(ad, now)

    return evaluate


def test_a_job_whose_periodic_policy_fails_is_held_and_the_others_go_on(
    q: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        periodic_module, "periodic_decision", poisoned(periodic_module.periodic_decision)
    )
    before = q.submit(BOB, job(PeriodicRemove="true"))
    bad = q.submit(ALICE, job(PeriodicHold="false", Poison="true"))
    after = q.submit(BOB, job(PeriodicHold="true", PeriodicHoldReason='"over quota"'))

    applied, failures = q.periodic_pass()

    assert [(jid, d.action) for jid, d in applied] == [
        (JobId(before, 0), PolicyAction.REMOVE),
        (JobId(after, 0), PolicyAction.HOLD),
    ]
    what = "internal error (TypeError: unsupported operand type(s) for +: 'int' and 'str')"
    assert failures == [JobFailure(JobId(bad, 0), what, held=True)]
    held = q.get(f"{bad}.0")
    assert held["JobStatus"] == JobStatus.HELD
    assert held["HoldReason"] == (
        f"The schedd's periodic policy evaluation failed for this job: {what}"
    )
    assert held["HoldReasonCode"] == HoldReasonCode.JobPolicyUndefined
    assert q.get(f"{after}.0")["HoldReason"] == "over quota"

    # Held, its PeriodicRelease still fails: reported, not held again, and nothing stops.
    applied, failures = q.periodic_pass()
    assert applied == []
    assert failures == [JobFailure(JobId(bad, 0), what, held=False)]
    assert q.get(f"{bad}.0")["NumHolds"] == 1


def test_a_job_whose_exit_policy_fails_is_held_with_its_exit_recorded(
    q: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "exit_decision", poisoned(store_module.exit_decision))
    bad = q.submit(ALICE, job(Poison="true"))
    good = q.submit(BOB, job())
    for cluster in (bad, good):
        q.job_started(f"{cluster}.0")

    assert q.job_exited(f"{bad}.0", 3) is ExitOutcome.HELD
    assert q.job_exited(f"{good}.0", 0) is ExitOutcome.COMPLETED

    held = q.get(f"{bad}.0")
    assert held["ExitCode"] == 3  # the exit is not lost with the policy
    assert held["HoldReasonCode"] == HoldReasonCode.JobPolicyUndefined
    assert held["HoldReason"].startswith("The job's exit policy could not be evaluated: ")


def test_the_queue_s_own_faults_are_not_contained(q: JobQueue) -> None:
    q.close()
    with pytest.raises(StoreError, match="closed"):
        q.periodic_pass()
    assert daemon_fault(StoreError("disk I/O error"))
    assert daemon_fault(MemoryError())
    assert daemon_fault(KeyboardInterrupt())
    assert not daemon_fault(RecursionError())
    assert not daemon_fault(TypeError("x"))


def test_problems_are_told_in_a_users_words() -> None:
    assert problem(RecursionError()) == "an expression is nested too deeply to evaluate"
    assert problem(IsADirectoryError(21, "Is a directory", "/home/a/log")) == (
        "Is a directory: /home/a/log"
    )
    assert problem(ValueError("bad\nvalue")) == "internal error (ValueError: bad value)"
    assert len(problem(ValueError("x" * 5000))) == 500


def test_a_policy_too_deep_to_evaluate_does_not_stop_the_pass(q: JobQueue) -> None:
    # A real trigger today: the chain raises RecursionError in the evaluator. Should the
    # evaluator learn to take it, the job is simply evaluated; either way the pass goes on.
    deep = q.submit(ALICE, job(PeriodicHold="1 + " * 8000 + "0 == 1"))
    good = q.submit(BOB, job(PeriodicRemove="true"))

    applied, failures = q.periodic_pass()

    assert [(jid, d.action) for jid, d in applied] == [(JobId(good, 0), PolicyAction.REMOVE)]
    ad = q.get(f"{deep}.0")
    if failures:
        assert failures == [
            JobFailure(JobId(deep, 0), "an expression is nested too deeply to evaluate", True)
        ]
        assert ad["JobStatus"] == JobStatus.HELD
    else:
        assert ad["JobStatus"] == JobStatus.IDLE
