"""Submitting to the job queue: ids, the attributes the queue sets, all-or-nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.errors import HTGridError
from htgrid.queue import (
    Identity,
    InvalidSubmit,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
    NotAuthorized,
    QueueError,
    StagedProcs,
    StoreError,
)

ALICE = Identity("alice")
T0 = 1_700_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(tmp_path: Path, clock: Clock) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path / "spool", clock=clock, fsync=False) as queue:
        yield queue


def job(**attrs: object) -> classad.ClassAd:
    return classad.ClassAd({"Cmd": "/bin/sleep", "Args": "60", **attrs})


def test_cluster_ids_start_at_one_and_procs_at_zero(q: JobQueue) -> None:
    assert q.submit(ALICE, job(), 3) == 1
    assert q.submit(ALICE, job(), 1) == 2
    ids = [(ad["ClusterId"], ad["ProcId"]) for ad in q.query()]
    assert ids == [(1, 0), (1, 1), (1, 2), (2, 0)]


def test_queue_sets_owner_times_and_status(q: JobQueue, clock: Clock) -> None:
    given = job()
    q.submit(ALICE, given)
    ad = q.get(JobId(1, 0))
    assert ad["Owner"] == "alice"
    assert ad["QDate"] == T0
    assert ad["EnteredCurrentStatus"] == T0
    assert ad["JobStatus"] == JobStatus.IDLE
    assert ad["Cmd"] == "/bin/sleep"
    assert "Owner" not in given  # the caller's ad is not changed


def test_submitted_on_hold_gets_code_15(q: JobQueue) -> None:
    q.submit(ALICE, job(JobStatus=5))
    ad = q.get("1.0")
    assert ad["JobStatus"] == JobStatus.HELD
    assert ad["HoldReasonCode"] == 15
    assert ad["HoldReasonSubCode"] == 0
    assert ad["HoldReason"] == "submitted on hold at user's request"


def test_one_proc_may_be_submitted_on_hold(q: JobQueue) -> None:
    q.submit(ALICE, job(), [classad.ClassAd(), classad.ClassAd({"JobStatus": 5})])
    assert [ad["JobStatus"] for ad in q.query()] == [1, 5]
    assert q.get("1.1")["HoldReasonCode"] == 15


def test_proc_ads_hold_only_what_differs(q: JobQueue, tmp_path: Path) -> None:
    procs = [classad.ClassAd({"Args": f"--seed {i}"}) for i in range(100)]
    q.submit(ALICE, job(Environment="A=1 B=2"), procs)
    assert q.get("1.42")["Args"] == "--seed 42"
    assert q.get("1.42")["Environment"] == "A=1 B=2"
    db = sqlite3.connect(tmp_path / "spool" / "queue.db")
    (cluster_ads,) = db.execute("SELECT count(*) FROM clusters").fetchone()
    texts = [row[0] for row in db.execute("SELECT ad FROM jobs")]
    db.close()
    assert cluster_ads == 1
    assert len(texts) == 100
    assert all("Environment" not in t and "Cmd" not in t for t in texts)


def test_transaction_gives_the_cluster_id_before_the_ads(q: JobQueue) -> None:
    with q.transaction(ALICE) as tx:
        cluster = tx.new_cluster()
        tx.set_cluster_ad(cluster, job(Out=f"out.{cluster}"))
        first = tx.new_proc(cluster, classad.ClassAd({"Args": f"{cluster}.0"}))
        second = tx.new_proc(cluster)
    assert (first, second) == (JobId(cluster, 0), JobId(cluster, 1))
    assert str(first) == f"{cluster}.0"
    assert q.get(first)["Args"] == f"{cluster}.0"
    assert q.get(second)["Out"] == f"out.{cluster}"


def test_two_clusters_in_one_transaction(q: JobQueue) -> None:
    with q.transaction(ALICE) as tx:
        a, b = tx.new_cluster(), tx.new_cluster()
        tx.set_cluster_ad(a, job())
        tx.set_cluster_ad(b, job())
        tx.new_proc(a)
        tx.new_proc(b)
        tx.new_proc(b)
    assert (a, b) == (1, 2)
    assert len(q.query("ClusterId == 2")) == 2


def test_failed_transaction_leaves_nothing(q: JobQueue) -> None:
    with pytest.raises(RuntimeError), q.transaction(ALICE) as tx:
        cluster = tx.new_cluster()
        tx.set_cluster_ad(cluster, job())
        for _ in range(10):
            tx.new_proc(cluster)
        raise RuntimeError("submit file error after 10 procs")
    assert q.query() == []
    assert q.last_seq == 0
    # The id handed out is not handed out again by this queue.
    assert q.submit(ALICE, job()) == 2


def test_empty_cluster_is_refused(q: JobQueue) -> None:
    with pytest.raises(InvalidSubmit, match="cluster 1 has no procs"), q.transaction(ALICE) as tx:
        tx.set_cluster_ad(tx.new_cluster(), job())
    assert q.query() == []


@pytest.mark.parametrize(
    ("proc", "message"),
    [
        (classad.ClassAd({"ClusterId": 7}), "ClusterId = 7"),
        (classad.ClassAd({"ProcId": 3}), "ProcId = 3"),
        (classad.ClassAd({"Owner": "mallory"}), "Owner = 'mallory'"),
        (classad.ClassAd({"JobStatus": 2}), "submitted Idle"),
    ],
)
def test_proc_ads_cannot_lie(q: JobQueue, proc: classad.ClassAd, message: str) -> None:
    with pytest.raises(InvalidSubmit, match=message):
        q.submit(ALICE, job(), [proc])
    assert q.query() == []


def test_staged_procs_are_queued_as_procs_added_one_by_one(
    q: JobQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("htgrid.queue._submit._STAGED_IN_MEMORY", 1000)
    procs = [classad.ClassAd({"Args": f"--seed {i}"} if i % 2 else {}) for i in range(300)]
    procs[7] = classad.ClassAd({"JobStatus": 5, "ProcId": 7})  # held alone, its id right
    direct = q.submit(ALICE, job(), procs)
    reserved = q.reserve_cluster()
    # A few procs in memory, the rest in an (unnamed) file past 1000 bytes.
    with StagedProcs(reserved, job(), ALICE, tmp_path) as staged:
        for proc in procs:
            staged.add(proc)
        with q.transaction(ALICE, reserved=reserved) as tx:
            cluster = tx.new_cluster()
            tx.set_cluster_ad(cluster, job())
            assert tx.add_staged(cluster, staged) == 300

    def seen(cluster: int) -> list[tuple[object, ...]]:
        return [
            (ad["ProcId"], ad["JobStatus"], ad.get("Args"), ad.get("HoldReasonCode"))
            for ad in q.query(f"ClusterId == {cluster}")
        ]

    assert seen(cluster) == seen(direct)
    assert seen(cluster)[6:9] == [(6, 1, "60", None), (7, 5, "60", 15), (8, 1, "60", None)]


def test_a_proc_that_lies_is_refused_as_it_is_staged(q: JobQueue, tmp_path: Path) -> None:
    reserved = q.reserve_cluster()
    with StagedProcs(reserved, job(), ALICE, tmp_path) as staged:
        staged.add(classad.ClassAd())
        with pytest.raises(InvalidSubmit, match=f"job {reserved}.1: the ad says ProcId = 0"):
            staged.add(classad.ClassAd({"ProcId": 0}))
    with pytest.raises(NotAuthorized):
        StagedProcs(reserved, job(Owner="mallory"), ALICE, tmp_path)
    assert q.query() == []


def test_running_or_removed_jobs_cannot_be_submitted(q: JobQueue) -> None:
    with pytest.raises(InvalidSubmit, match="not 3"):
        q.submit(ALICE, job(JobStatus=3))


def test_order_of_calls_is_checked(q: JobQueue) -> None:
    with pytest.raises(InvalidSubmit, match="set the cluster ad"), q.transaction(ALICE) as tx:
        tx.new_proc(tx.new_cluster())
    with pytest.raises(InvalidSubmit, match="not created"), q.transaction(ALICE) as tx:
        tx.new_proc(99)


def test_owner_is_the_submitter_unless_admin(q: JobQueue) -> None:
    with pytest.raises(NotAuthorized, match="alice may not submit jobs owned by bob"):
        q.submit(ALICE, job(Owner="bob"))
    # The refused submit had been given cluster 1; ids are not handed out twice.
    assert q.submit(Identity("condor", admin=True), job(Owner="bob")) == 2
    assert q.get("2.0")["Owner"] == "bob"


def test_cluster_ids_are_never_reused(tmp_path: Path, clock: Clock) -> None:
    with JobQueue.open(tmp_path, clock=clock) as q:
        for _ in range(3):
            q.submit(ALICE, job())
        q.act(JobAction.Remove, "true", ALICE)
        assert q.query() == []
        assert len(q.history()) == 3
    with JobQueue.open(tmp_path, clock=clock) as q:
        assert q.submit(ALICE, job()) == 4


def test_get_unknown_job(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(JobNotFound, match=r"job 1\.5 is not in the queue"):
        q.get("1.5")
    with pytest.raises(ValueError, match="not a job id"):
        q.get("one")


def test_errors_are_htgrid_errors(q: JobQueue) -> None:
    assert issubclass(InvalidSubmit, QueueError)
    assert issubclass(QueueError, HTGridError)
    q.close()
    with pytest.raises(QueueError, match="closed"):
        q.query()


def test_job_id_is_a_value() -> None:
    assert JobId.parse(" 42.7 ") == JobId(42, 7)
    assert str(JobId(42, 0)) == "42.0"
    assert sorted([JobId(2, 0), JobId(1, 10), JobId(1, 2)]) == [
        JobId(1, 2),
        JobId(1, 10),
        JobId(2, 0),
    ]
    assert len({JobId(1, 0), JobId(1, 0)}) == 1


def test_a_database_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    JobQueue.open(tmp_path).close()
    db = sqlite3.connect(tmp_path / "queue.db")
    db.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        JobQueue.open(tmp_path)


def test_sqlite_failures_become_store_errors(tmp_path: Path) -> None:
    (tmp_path / "queue.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"queue\.db"):
        JobQueue.open(tmp_path)
