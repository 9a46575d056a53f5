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
    q.act(JobAction.Hold, 1, ALICE)
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
        q.act(JobAction.Release, 1, ALICE)
        assert [c.seq for c in q.changes_since(0)] == [last + 1, last + 2]


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
