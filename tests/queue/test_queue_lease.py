"""HTCondor-C's remote side in the queue: JobLeaseExpiration removes a job whose
submitter is gone, and an edit of LeaveJobInQueue lets a finished job go at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.queue import (
    Identity,
    JobId,
    JobQueue,
    JobStatus,
    PolicyAction,
)

ALICE = Identity("alice")
T0 = 1_700_000_000
EXPIRED = "The job's lease expired: its submitter did not renew it (JobLeaseDuration)"


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


def _submit(q: JobQueue, **attrs: object) -> JobId:
    cluster = q.submit(ALICE, classad.ClassAd({"Cmd": "/bin/true", **attrs}))
    return JobId(cluster, 0)


def test_a_lapsed_lease_removes_the_job_whatever_its_state(q: JobQueue, clock: Clock) -> None:
    idle = _submit(q, JobLeaseExpiration=T0 + 100)
    spooling = _submit(q, JobLeaseExpiration=T0 + 100, JobStatus=5, HoldReasonCode=16)
    managed = _submit(q, JobLeaseExpiration=T0 + 100, Managed="External")  # a grid job
    renewed = _submit(q, JobLeaseExpiration=T0 + 100)
    unleased = _submit(q)
    clock.now = T0 + 50
    q.edit([renewed], {"JobLeaseExpiration": T0 + 1000}, ALICE)
    clock.now = T0 + 100
    assert q.evaluate_periodic() == []  # due, not yet past
    clock.now = T0 + 101
    decided = q.evaluate_periodic()
    assert [jid for jid, _ in decided] == [idle, spooling, managed]
    assert {(d.action, d.attribute) for _, d in decided} == {
        (PolicyAction.REMOVE, "JobLeaseExpiration")
    }
    # The grid manager lets go of its removed job itself (it cancels the grid job first).
    assert q.get(managed)["JobStatus"] == JobStatus.REMOVED
    remaining = [ad["ClusterId"] for ad in q.query()]
    assert remaining == [managed.cluster, renewed.cluster, unleased.cluster]
    for ad in q.history():
        assert (ad["JobStatus"], ad["RemoveReason"]) == (JobStatus.REMOVED, EXPIRED)
        assert "HoldReasonCode" not in ad


def test_a_completed_job_keeps_no_lease(q: JobQueue, clock: Clock) -> None:
    job = _submit(q, JobLeaseExpiration=T0 + 10, LeaveJobInQueue=True)
    q.job_started(job)
    q.job_exited(job, 0)
    clock.now = T0 + 20
    assert q.evaluate_periodic() == []
    assert q.get(job)["JobStatus"] == JobStatus.COMPLETED


def test_editing_leave_job_in_queue_to_false_lets_a_finished_job_go(q: JobQueue) -> None:
    done, running = _submit(q, LeaveJobInQueue=True), _submit(q, LeaveJobInQueue=True)
    for job in (done, running):
        q.job_started(job)
    q.job_exited(done, 0)
    assert q.get(done)["JobStatus"] == JobStatus.COMPLETED
    q.edit([done, running], {"LeaveJobInQueue": "false"}, ALICE)
    assert [ad["ClusterId"] for ad in q.query()] == [running.cluster]
    (gone,) = q.history()
    assert (gone["ClusterId"], gone["JobStatus"]) == (done.cluster, JobStatus.COMPLETED)


def test_an_edit_that_keeps_leave_job_in_queue_true_keeps_the_job(q: JobQueue) -> None:
    job = _submit(q, LeaveJobInQueue=classad.ExprTree("StageOutFinish =?= undefined"))
    q.job_started(job)
    q.job_exited(job, 0)
    q.edit([job], {"Note": '"fetched?"'}, ALICE)
    assert q.get(job)["JobStatus"] == JobStatus.COMPLETED
    q.edit([job], {"StageOutFinish": str(T0)}, ALICE)  # the expression turns false
    assert q.query() == [] and len(q.history()) == 1
