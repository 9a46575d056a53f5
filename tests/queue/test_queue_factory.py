"""Late materialization in the queue: a factory queues as many procs as its limits
allow, the next as earlier ones leave or start, in the transaction that made room; hold,
release and remove of the cluster pause, resume and remove it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import (
    Identity,
    InvalidSubmit,
    JobAction,
    JobId,
    JobQueue,
    JobStatus,
    NotAuthorized,
    StagedProcs,
)

ALICE = Identity("alice")
BOB = Identity("bob")


@pytest.fixture
def q(tmp_path: Path) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path / "spool", fsync=False) as queue:
        yield queue


def factory(q: JobQueue, count: int, **limits: int) -> int:
    """A factory of `count` procs, each odd one with Args of its own."""
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, **limits})
    cluster = q.reserve_cluster()
    with StagedProcs(cluster, ad, ALICE, None) as staged:
        for n in range(count):
            staged.add(ClassAd({"Args": f"n{n}"}) if n % 2 else None)
        with q.transaction(ALICE, reserved=cluster) as tx:
            cid = tx.new_cluster()
            tx.set_cluster_ad(cid, ad)
            assert tx.add_staged(cid, staged, factory=True) == count
    return cluster


def present(q: JobQueue, cluster: int) -> list[tuple[int, int, str | None]]:
    return [
        (ad["ProcId"], ad["JobStatus"], ad.get("Args"))
        for ad in q.query(f"ClusterId == {cluster}", ["JobStatus", "Args"])
    ]


def leave(q: JobQueue, cluster: int, proc: int) -> None:
    q.act(JobAction.Remove, [JobId(cluster, proc)], ALICE)  # idle: straight to the history


def test_max_materialize_keeps_that_many_procs_in_the_queue(q: JobQueue) -> None:
    cluster = factory(q, 7, JobMaterializeLimit=3)
    assert present(q, cluster) == [(0, 1, None), (1, 1, "n1"), (2, 1, None)]
    (info,) = q.factories()
    assert (info.cluster, info.next_proc, info.total, info.limit, info.paused) == (
        cluster, 3, 7, 3, 0
    )  # fmt: skip
    leave(q, cluster, 1)
    assert [p for p, _, _ in present(q, cluster)] == [0, 2, 3]
    assert present(q, cluster)[2] == (3, 1, "n3")  # its own attributes kept till made
    for proc in (0, 2, 3, 4, 5):
        leave(q, cluster, proc)
    assert present(q, cluster) == [(6, 1, None)]
    assert q.factories() == []  # every proc made: the factory is gone
    leave(q, cluster, 6)
    assert q.query(f"ClusterId == {cluster}") == []
    # Each proc was made once: the history has all seven, each once.
    assert sorted(ad["ProcId"] for ad in q.history(f"ClusterId == {cluster}")) == list(range(7))


def test_a_proc_made_later_enters_its_status_then(tmp_path: Path) -> None:
    now = [1_700_000_000]
    with JobQueue.open(tmp_path / "spool", fsync=False, clock=lambda: now[0]) as q:
        cluster = factory(q, 4, JobMaterializeLimit=1)
        now[0] += 500
        leave(q, cluster, 0)
        (ad,) = q.query(f"ClusterId == {cluster}")
        assert (ad["ProcId"], ad["QDate"], ad["EnteredCurrentStatus"]) == (1, now[0] - 500, now[0])
        assert ad["Args"] == "n1"
        now[0] += 100
        leave(q, cluster, 1)
        (ad,) = q.query(f"ClusterId == {cluster}")
        assert (ad["ProcId"], ad["EnteredCurrentStatus"], ad.get("Args")) == (2, now[0], None)


def test_the_feed_says_each_proc_made_is_submitted(q: JobQueue) -> None:
    cluster = factory(q, 5, JobMaterializeLimit=2)
    seq = q.last_seq
    leave(q, cluster, 0)
    submitted = [c for c in q.changes_since(seq) if c.kind.value == "submitted"]
    assert [(c.cluster, list(c.procs)) for c in submitted] == [(cluster, [2])]


def test_max_idle_makes_more_as_procs_start(q: JobQueue) -> None:
    cluster = factory(q, 6, JobMaterializeMaxIdle=2)
    assert [p for p, _, _ in present(q, cluster)] == [0, 1]
    q.job_started(JobId(cluster, 0))
    assert [(p, s) for p, s, _ in present(q, cluster)] == [(0, 2), (1, 1), (2, 1)]
    q.act(JobAction.Hold, [JobId(cluster, 1)], ALICE)  # held counts as not running
    assert len(present(q, cluster)) == 3


def test_hold_release_and_remove_of_the_cluster_act_on_the_factory(q: JobQueue) -> None:
    cluster = factory(q, 10, JobMaterializeLimit=2)
    with pytest.raises(NotAuthorized):
        q.act(JobAction.Hold, cluster, BOB)
    assert q.act(JobAction.Hold, cluster, ALICE) == [JobId(cluster, 0), JobId(cluster, 1)]
    assert q.factories()[0].paused == 1
    q.act(JobAction.Remove, [JobId(cluster, 0), JobId(cluster, 1)], ALICE)
    assert present(q, cluster) == []  # paused: nothing made, and the cluster stays
    assert q.act(JobAction.Release, cluster, ALICE) == []
    assert [(p, s) for p, s, _ in present(q, cluster)] == [(2, 1), (3, 1)]
    q.act(JobAction.Remove, cluster, ALICE)
    assert q.factories() == []
    assert present(q, cluster) == []
    with pytest.raises(Exception, match="not in the queue"):
        q.act(JobAction.Release, cluster, ALICE)


def test_limits_must_be_whole_numbers(q: JobQueue) -> None:
    with pytest.raises(InvalidSubmit, match="JobMaterializeLimit must be a whole number"):
        factory(q, 3, JobMaterializeLimit=0)
    assert q.query() == [] and q.factories() == []


def test_held_procs_of_a_factory_stay_held_when_made(q: JobQueue) -> None:
    ad = ClassAd({"Cmd": "/bin/true", "JobStatus": 5, "JobMaterializeLimit": 1})
    cluster = q.reserve_cluster()
    with StagedProcs(cluster, ad, ALICE, None) as staged:
        for _ in range(3):
            staged.add(None)
        with q.transaction(ALICE, reserved=cluster) as tx:
            cid = tx.new_cluster()
            tx.set_cluster_ad(cid, ad)
            tx.add_staged(cid, staged, factory=True)
    leave(q, cluster, 0)
    assert present(q, cluster) == [(1, int(JobStatus.HELD), None)]


def factory_changes(q: JobQueue, after: int = 0) -> list[tuple[str, list[int], dict[str, object]]]:
    """The changes after `after`: kind, procs and, for a factory's, its attributes."""
    return [
        (c.kind.value, list(c.procs), dict(c.attrs) if c.kind.value.startswith("factory") else {})
        for c in q.changes_since(after)
    ]


def test_the_feed_says_what_happens_to_the_factory(q: JobQueue) -> None:
    cluster = factory(q, 4, JobMaterializeLimit=2)
    assert factory_changes(q) == [("factory_submitted", [], {}), ("submitted", [0, 1], {})]
    seq = q.last_seq
    q.act(JobAction.Hold, cluster, ALICE, "disk full")
    q.act(JobAction.Hold, cluster, ALICE)  # held already: nothing new to say
    paused = {"JobMaterializePaused": 1, "JobMaterializePauseReason": "disk full"}
    assert factory_changes(q, seq) == [
        ("factory_paused", [], {**paused, "HoldReasonCode": 1}),
        ("status", [0, 1], {}),
    ]
    q.act(JobAction.Release, cluster, ALICE, "disk cleaned")
    seq = q.last_seq
    for proc in range(4):
        leave(q, cluster, proc)
    kinds = [(kind, procs) for kind, procs, _ in factory_changes(q, seq)]
    # The last job's leaving and the factory's end are one commit, in that order.
    assert kinds[-2:] == [("left_queue", [3]), ("factory_removed", [])]
    assert factory_changes(q, seq)[-1][2] == {
        "JobMaterializeNextProcId": 4,
        "JobMaterializeNextRow": 0,  # no items
        "JobMaterializePaused": 2,  # done: every proc made
    }
    resumed = [c for c in q.changes_since(0) if c.kind.value == "factory_resumed"]
    assert [dict(c.attrs) for c in resumed] == [{"ReleaseReason": "disk cleaned"}]


def test_a_factory_removed_with_no_job_left_ends_its_cluster(q: JobQueue) -> None:
    cluster = factory(q, 10, JobMaterializeLimit=2)
    q.act(JobAction.Hold, cluster, ALICE)
    q.act(JobAction.Remove, [JobId(cluster, 0), JobId(cluster, 1)], ALICE)
    seq = q.last_seq
    assert q.act(JobAction.Remove, cluster, ALICE) == []
    removed = {"JobMaterializeNextProcId": 2, "JobMaterializeNextRow": 0}
    removed |= {"JobMaterializePaused": 3}
    # Removed while held: the hold's reason stays, for the 036 event's notes.
    removed["JobMaterializePauseReason"] = "via condor_hold (by user alice)"
    assert factory_changes(q, seq) == [("factory_removed", [], removed)]
    assert q.factories() == []
    with pytest.raises(Exception, match="not in the queue"):
        q.act(JobAction.Release, cluster, ALICE)


def test_a_done_factory_is_closed_when_its_last_job_leaves(q: JobQueue) -> None:
    cluster = factory(q, 3, JobMaterializeLimit=2)
    leave(q, cluster, 0)  # proc 2, the last, is made: the factory is done
    assert q.factories() == []
    q.act(JobAction.Hold, cluster, ALICE)  # holds the jobs; there is no factory to pause
    assert not [c for c in q.changes_since(0) if c.kind.value == "factory_paused"]
    seq = q.last_seq
    q.act(JobAction.Remove, cluster, ALICE)  # held jobs go straight to the history
    assert [kind for kind, _, _ in factory_changes(q, seq)][-1] == "factory_removed"
    assert factory_changes(q, seq)[-1][2] == {
        "JobMaterializeNextProcId": 3,
        "JobMaterializeNextRow": 0,
        "JobMaterializePaused": 2,
    }


def test_a_paused_factory_keeps_why_until_it_is_resumed(q: JobQueue) -> None:
    cluster = factory(q, 10, JobMaterializeLimit=2)
    q.act(JobAction.Hold, cluster, ALICE, "disk\nfull")
    assert q.factories()[0].pause_reason == "disk full"  # on one line, as HTCondor keeps it
    q.act(JobAction.Hold, cluster, ALICE, "again")  # held already: nothing new
    assert q.factories()[0].pause_reason == "disk full"
    q.act(JobAction.Release, cluster, ALICE, "cleaned")
    assert (q.factories()[0].paused, q.factories()[0].pause_reason) == (0, "")


def test_a_queue_made_before_pause_reasons_were_kept_gets_them(tmp_path: Path) -> None:
    import sqlite3

    with JobQueue.open(tmp_path / "spool", fsync=False) as queue:
        cluster = factory(queue, 4, JobMaterializeLimit=2)
    db = sqlite3.connect(tmp_path / "spool" / "queue.db")
    db.execute("ALTER TABLE factories DROP COLUMN pause_reason")  # as an older htgrid made it
    db.commit()
    db.close()
    with JobQueue.open(tmp_path / "spool", fsync=False) as queue:
        queue.act(JobAction.Hold, cluster, ALICE, "later")
        assert queue.factories()[0].pause_reason == "later"
