"""The change feed that the grid manager and the event-log writer follow."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.queue import (
    ChangeKind,
    Identity,
    JobAction,
    JobId,
    JobQueue,
    JobStatus,
    NotAuthorized,
)

ALICE = Identity("alice")
T0 = 1_700_000_000


@pytest.fixture
def q(tmp_path: Path) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, clock=lambda: T0, fsync=False) as queue:
        yield queue


def job() -> classad.ClassAd:
    return classad.ClassAd({"Cmd": "/bin/true"})


def test_every_committed_change_has_the_next_sequence_number(q: JobQueue) -> None:
    assert q.last_seq == 0
    q.submit(ALICE, job(), 3)
    q.act(JobAction.Hold, "1.1", ALICE, "disk full")
    q.act(JobAction.Remove, "1.2", ALICE)
    q.edit("1.0", {"Note": '"n"'}, ALICE)
    changes = q.changes_since(0)
    assert [c.seq for c in changes] == list(range(1, len(changes) + 1))
    assert q.last_seq == changes[-1].seq
    kinds = [(c.kind, c.job_ids) for c in changes]
    assert kinds == [
        (ChangeKind.SUBMITTED, [JobId(1, 0), JobId(1, 1), JobId(1, 2)]),
        (ChangeKind.STATUS, [JobId(1, 1)]),
        (ChangeKind.STATUS, [JobId(1, 2)]),
        (ChangeKind.LEFT_QUEUE, [JobId(1, 2)]),
        (ChangeKind.ATTRIBUTES, [JobId(1, 0)]),
    ]
    assert all(c.time == T0 for c in changes)


def test_a_change_carries_what_it_set(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.act(JobAction.Hold, "1.0", ALICE, "disk full")
    q.act(JobAction.Release, "1.0", ALICE, "cleaned up")
    hold, release = q.changes_since(1)
    assert (hold.status, hold.last_status) == (JobStatus.HELD, JobStatus.IDLE)
    assert hold.attrs["HoldReason"] == "disk full"
    assert hold.attrs["HoldReasonCode"] == 1
    assert (release.status, release.last_status) == (JobStatus.IDLE, JobStatus.HELD)
    assert release.attrs["ReleaseReason"] == "cleaned up"
    assert release.attrs["LastHoldReason"] == "disk full"
    assert set(release.deleted) == {"HoldReason", "HoldReasonCode", "HoldReasonSubCode"}


def test_followers_read_from_where_they_stopped(q: JobQueue) -> None:
    q.submit(ALICE, job(), 2)
    seen = q.last_seq
    q.act(JobAction.Hold, "1.0", ALICE)
    q.act(JobAction.Hold, "1.1", ALICE)
    later = q.changes_since(seen)
    assert [c.job_ids for c in later] == [[JobId(1, 0)], [JobId(1, 1)]]
    assert q.changes_since(seen, limit=1) == later[:1]
    assert q.changes_since(q.last_seq) == []


def test_failed_actions_leave_no_change(q: JobQueue) -> None:
    q.submit(ALICE, job())
    before = q.last_seq
    with pytest.raises(NotAuthorized, match="owned by alice"):
        q.act(JobAction.Hold, "1.0", Identity("bob"))
    assert q.last_seq == before


def test_sequence_numbers_survive_trimming_and_restart(tmp_path: Path) -> None:
    with JobQueue.open(tmp_path, fsync=False) as q:
        q.submit(ALICE, job(), 2)
        q.act(JobAction.Hold, 1, ALICE)
        last = q.last_seq
        q.trim_changes(last)
        assert q.changes_since(0) == []
    with JobQueue.open(tmp_path, fsync=False) as q:
        q.act(JobAction.Release, "1.0", ALICE)
        q.act(JobAction.Release, "1.1", ALICE)
        assert [c.seq for c in q.changes_since(0)] == [last + 1, last + 2]


def test_jobs_changed_alike_in_one_transaction_are_one_change(q: JobQueue) -> None:
    """A run of procs of one cluster changed the same way is one entry of the feed, so
    that its followers read one change for a batch, as for a submitted cluster."""
    q.submit(ALICE, job(), 5)
    q.act(JobAction.Hold, "1.2", ALICE, "one of them first")
    q.submit(ALICE, job(), 2)
    seen = q.last_seq
    held = q.act(JobAction.Hold, ["1.0", "1.1", "1.3", "1.4", "2.0", "2.1"], ALICE, "disk")
    assert len(held) == 6
    changes = q.changes_since(seen)
    # 1.2 (already held) breaks the run of cluster 1; cluster 2 is a run of its own.
    assert [(c.job_ids, c.status, c.last_status) for c in changes] == [
        ([JobId(1, 0), JobId(1, 1)], JobStatus.HELD, JobStatus.IDLE),
        ([JobId(1, 3), JobId(1, 4)], JobStatus.HELD, JobStatus.IDLE),
        ([JobId(2, 0), JobId(2, 1)], JobStatus.HELD, JobStatus.IDLE),
    ]
    assert all(c.attrs["HoldReason"] == "disk" for c in changes)
    # Numbers stay dense (a follower reads a gap as a trimmed feed): one per entry.
    assert [c.seq for c in changes] == [seen + 1, seen + 2, seen + 3]
    assert q.last_seq == seen + 3
    # Changed differently: each its own entry, in order.
    q.edit(["1.0", "1.1"], {"Note": '"a"'}, ALICE)
    q.edit(["1.3"], {"Note": '"b"'}, ALICE)
    q.edit(["1.4"], {"Note": '"c"'}, ALICE)
    notes = q.changes_since(seen + 3)
    assert [(c.job_ids, c.attrs["Note"]) for c in notes] == [
        ([JobId(1, 0), JobId(1, 1)], "a"),
        ([JobId(1, 3)], "b"),
        ([JobId(1, 4)], "c"),
    ]


def test_readers_and_one_writer_share_a_queue(q: JobQueue) -> None:
    q.submit(ALICE, job(), 200)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(20):
                ads = q.query("JobStatus == 5 || JobStatus == 1")
                assert len(ads) == 200
        except BaseException as e:  # reported below
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for proc in range(200):
        q.act(JobAction.Hold, f"1.{proc}", ALICE)
    for t in readers:
        t.join()
    assert errors == []
    assert len(q.query("JobStatus == 5")) == 200


def test_jobs_let_go_by_an_edit_are_one_change_and_one_leaving(q: JobQueue) -> None:
    """HTCondor-C's cleanup: LeaveJobInQueue = false on finished jobs kept in the queue."""
    q.submit(ALICE, classad.ClassAd({"Cmd": "/bin/true", "LeaveJobInQueue": True}), 3)
    for proc in range(3):
        q.job_started(f"1.{proc}")
        q.job_exited(f"1.{proc}", 0)
    seen = q.last_seq
    assert q.edit(1, {"LeaveJobInQueue": "false"}, ALICE) == [JobId(1, p) for p in range(3)]
    changes = q.changes_since(seen)
    assert [(c.kind, c.job_ids) for c in changes] == [
        (ChangeKind.ATTRIBUTES, [JobId(1, 0), JobId(1, 1), JobId(1, 2)]),
        (ChangeKind.LEFT_QUEUE, [JobId(1, 0), JobId(1, 1), JobId(1, 2)]),
    ]
    assert q.query() == [] and len(q.history()) == 3
