"""Queries: the SQL-narrowed answer equals a brute-force evaluation of the constraint."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.classad.fast import entries
from htgrid.errors import ClassAdSyntaxError
from htgrid.queue import Identity, JobAction, JobQueue, _serial
from htgrid.queue._query import compile_constraint
from htgrid.queue._serial import decode, decode_shared, encode, remember

T0 = 1_700_000_000
USERS = [Identity("alice"), Identity("bob"), Identity("Carol")]
ADMIN = Identity("condor", admin=True)


@pytest.fixture(scope="module")
def q(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobQueue]:
    """A queue of 180 jobs in every status, owners, edits and held jobs from two sources."""
    rng = random.Random(20260101)
    with JobQueue.open(tmp_path_factory.mktemp("query"), clock=lambda: T0, fsync=False) as queue:
        for cluster in range(6):
            user = USERS[cluster % 3]
            procs = [classad.ClassAd({"Item": rng.randint(0, 9)}) for _ in range(30)]
            held = cluster == 4
            queue.submit(
                user, classad.ClassAd({"Cmd": "/bin/x", "JobStatus": 5 if held else 1}), procs
            )
        for cluster in range(1, 7):
            for proc in range(30):
                jid = f"{cluster}.{proc}"
                roll = rng.random()
                if cluster == 5:
                    if roll < 0.5:
                        queue.act(JobAction.Release, jid, ADMIN)
                elif roll < 0.15:
                    queue.act(JobAction.Hold, jid, ADMIN, "policy says so", code=3)
                elif roll < 0.3:
                    queue.job_started(jid)
                elif roll < 0.4:
                    queue.job_started(jid)
                    queue.update(jid, {"JobStatus": 7})
                elif roll < 0.5:
                    queue.act(JobAction.Remove, jid, ADMIN)  # leaves the queue
                if roll > 0.8 and cluster != 5:
                    queue.edit(jid, {"Item": str(rng.randint(10, 12))}, ADMIN)
        yield queue


CONSTRAINTS = [
    None,
    "true",
    "false",
    "JobStatus == 5",
    "JobStatus == 5.0",
    "JobStatus =?= 5",
    "JobStatus != 1",
    "JobStatus =!= 1",
    "JobStatus >= 2 && JobStatus < 7",
    "5 == JobStatus",
    "2 < JobStatus",
    "(JobStatus == 1 || JobStatus == 2) && Item > 3",
    "JobStatus == 1 || JobStatus == 2 || JobStatus == 7",
    'Owner == "ALICE"',
    'Owner =?= "ALICE"',
    'Owner =?= "alice"',
    'Owner != "bob"',
    'MY.Owner == "carol" && MY.JobStatus == 5',
    "ClusterId == 3",
    "ClusterId > 4 && ProcId <= 10",
    "ProcId == 29",
    "ClusterId == 2 && ProcId == 7",
    'JobStatus == 5 && HoldReasonCode == 3 && Owner == "bob"',
    "JobStatus == 5 && HoldReasonCode == 15",
    "Item >= 10",
    "Item == 3 && (JobStatus == 1)",
    "JobStatus == true",
    "JobStatus == 5 && undefined",
    "JobStatus == 5 || Item == 12",
    'regexp("^b", Owner) && JobStatus != 5',
    "ClusterId % 2 == 0",
    "JobStatus + 0 == 5",
    "(((JobStatus == 2)))",
]


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_query_equals_brute_force(q: JobQueue, constraint: str | None) -> None:
    everything = q.query()
    assert len(everything) > 100
    if constraint is None:
        expected = everything
    else:
        expr = classad.ExprTree(constraint)
        expected = [ad for ad in everything if _truth(expr.eval(scope=ad))]
    got = q.query(constraint)
    assert [_id(ad) for ad in got] == [_id(ad) for ad in expected]
    assert got == expected


def _truth(value: object) -> bool:
    return value is True or (type(value) in (int, float) and int(value) != 0)  # type: ignore[call-overload]


def _id(ad: classad.ClassAd) -> tuple[int, int]:
    return (ad["ClusterId"], ad["ProcId"])


def test_random_conjunctions_equal_brute_force(q: JobQueue) -> None:
    rng = random.Random(7)
    atoms = [
        "JobStatus == {s}",
        "JobStatus != {s}",
        "JobStatus =?= {s}",
        "ClusterId == {c}",
        "ClusterId >= {c}",
        "{c} > ClusterId",
        "ProcId < {p}",
        'Owner == "{u}"',
        'Owner =!= "{u}"',
        "Item == {i}",
        "(JobStatus == {s} || JobStatus == {s2})",
        "!(JobStatus == {s})",
    ]
    everything = q.query()
    for _ in range(150):
        parts = [
            rng.choice(atoms).format(
                s=rng.randint(1, 7),
                s2=rng.randint(1, 7),
                c=rng.randint(0, 7),
                p=rng.randint(0, 31),
                u=rng.choice(["alice", "BOB", "carol", "dave"]),
                i=rng.randint(0, 12),
            )
            for _ in range(rng.randint(1, 4))
        ]
        constraint = (
            rng.choice([" && ", " || "]).join(parts) if rng.random() < 0.2 else " && ".join(parts)
        )
        expr = classad.ExprTree(constraint)
        expected = [_id(ad) for ad in everything if _truth(expr.eval(scope=ad))]
        assert [_id(ad) for ad in q.query(constraint)] == expected, constraint


def test_projection(q: JobQueue) -> None:
    ads = q.query("JobStatus == 5", ["HoldReasonCode", "owner", "NoSuchThing"])
    assert ads
    for ad in ads:
        assert set(ad) <= {"ClusterId", "ProcId", "HoldReasonCode", "Owner"}
        assert {"ClusterId", "ProcId", "HoldReasonCode", "Owner"} <= set(ad)


def test_limit(q: JobQueue) -> None:
    assert len(q.query(limit=5)) == 5
    assert [_id(ad) for ad in q.query("Item >= 5", limit=3)] == [
        _id(ad) for ad in q.query("Item >= 5")[:3]
    ]


def test_history_is_newest_first_and_queryable(q: JobQueue) -> None:
    removed = q.history()
    assert removed and all(ad["JobStatus"] == 3 for ad in removed)
    assert q.history('Owner == "bob"') == [ad for ad in removed if ad["Owner"] == "bob"]
    assert len(q.history(limit=2)) == 2
    assert q.history(projection=["RemoveReason"])[0]["RemoveReason"].startswith("via condor_rm")


def test_malformed_constraint_names_the_place(q: JobQueue) -> None:
    with pytest.raises(ClassAdSyntaxError) as err:
        q.query("JobStatus == && Owner")
    assert (err.value.line, err.value.column) == (1, 14)
    before = q.query()
    with pytest.raises(ClassAdSyntaxError):
        q.act(JobAction.Remove, "JobStatus ==", ADMIN)
    assert q.query() == before


def test_simple_conjuncts_become_sql() -> None:
    f = compile_constraint('(JobStatus == 5) && MY.Owner == "x" && ClusterId > 3 && Foo == 1')
    assert f.where == ("status = ?", "owner = ? COLLATE NOCASE", "cluster > ?")
    assert f.params == (5, "x", 3)
    assert compile_constraint("JobStatus == 1 || JobStatus == 2").where == ("status IN (?, ?)",)
    assert compile_constraint("JobStatus == 1 || Foo == 2").where == ()
    assert compile_constraint("JobStatus == true").where == ()
    assert compile_constraint("true").expr is None
    assert compile_constraint("TARGET.JobStatus == 5").where == ()


def test_held_query_uses_the_status_index(tmp_path: Path) -> None:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        queue.submit(Identity("alice"), classad.ClassAd({"Cmd": "x"}))
    db = sqlite3.connect(tmp_path / "queue.db")
    plan = db.execute(
        "EXPLAIN QUERY PLAN SELECT cluster, proc, ad, masked FROM jobs WHERE "
        + compile_constraint("JobStatus == 5").sql()
        + " ORDER BY cluster, proc",
        (5,),
    ).fetchall()
    db.close()
    assert any("jobs_by_status" in str(row) for row in plan)


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        'quote " and \\ backslash',
        "new\nline\ttab",
        "unicode é ü 日本",
        "",
        0,
        -17,
        2**62,
        1.5,
        -0.0,
        True,
        False,
        None,
        [1, "two", [3.0]],
        classad.ExprTree("ifThenElse(a =?= undefined, b, c * 2)"),
        classad.ExprTree("[ UserRequest = 1; 'odd name' = 2 ]"),
        classad.ExprTree("error"),
        classad.ExprTree('"abc" == Owner'),
        classad.ExprTree('strcat("a", "b")'),
        classad.ExprTree('"x"'),
        classad.ExprTree('absTime("2026-01-01T00:00:00Z")'),
    ],
)
def test_stored_ads_round_trip(value: object) -> None:
    ad = classad.ClassAd()
    ad["Value"] = value
    ad["Other"] = "x"
    back = decode(encode(ad))
    assert back == ad
    assert repr(back) == repr(ad)


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        'quote " and \\ backslash',
        0,
        2**62,
        True,
        0.5,
        0.1 + 0.2,  # 0.30000000000000004: its stored text reads back as 0.3
        float("inf"),
        5e-324,
        [1, "two"],
        classad.ExprTree("RequestCpus * 2"),
    ],
)
def test_an_ad_remembered_at_its_save_reads_as_its_stored_text_does(value: object) -> None:
    # The queue keeps the ad it just saved for the next reader of that text: that reader
    # must see what a reader of the database (another process) sees.
    ad = classad.ClassAd({"Other": "x", "Count": 3})
    ad["Value"] = value
    text = encode(ad)
    remember(text, ad)
    ad["Other"] = "changed after the save"
    shared = decode_shared(text)
    fresh = decode(text)
    assert repr(shared) == repr(fresh)
    assert shared == fresh
    assert [type(e.lit) for e in entries(shared).values()] == [
        type(e.lit) for e in entries(fresh).values()
    ]


def test_a_saved_ad_with_a_real_that_rounds_is_read_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A job's measured wall clock time rarely survives its 16 stored digits; its next
    # readers (the event log, the status poll, the output's fetch) still get the ad kept
    # at the save, with the real as the database holds it.
    wall = 0.013430118560791016  # stored as 1.343011856079102E-02
    ad = classad.ClassAd({"RemoteWallClockTime": wall, "Owner": "alice", "ExitCode": 0})
    text = encode(ad)
    assert float(text.split('"RemoteWallClockTime":"')[1].split('"')[0]) != wall
    remember(text, ad)

    def decode_again(_: str) -> classad.ClassAd:
        raise AssertionError("decoded again")

    monkeypatch.setattr(_serial, "decode", decode_again)
    shared = decode_shared(text)
    monkeypatch.undo()
    assert shared == decode(text)
    assert shared["RemoteWallClockTime"] != wall


def test_the_ads_kept_for_readers_are_those_of_the_jobs_in_the_queue(tmp_path: Path) -> None:
    # Every change of a job stores a new text of its own attributes; the ad kept for the
    # old text (and, once the job left the queue, for its last one) is nobody's: kept,
    # they pinned the schedd's memory, ~5 ads a job run, until the cache filled.
    with JobQueue.open(tmp_path, clock=lambda: T0, fsync=False) as queue:
        procs = [classad.ClassAd({"Out": f"out.{n}"}) for n in range(20)]
        cluster = queue.submit(USERS[0], classad.ClassAd({"Cmd": "/bin/x", "JobStatus": 1}), procs)
        texts: set[str] = set()

        def stored() -> set[str]:
            with sqlite3.connect(tmp_path / "queue.db") as db:
                return {row[0] for row in db.execute("SELECT ad FROM jobs")}

        for proc in range(20):
            jid = f"{cluster}.{proc}"
            texts |= stored()
            queue.job_started(jid)
            texts |= stored()
            queue.update(jid, {"RemoteHost": f"slot1@node{proc}", "NumJobStarts": 1})
            texts |= stored()
            [ad] = queue.query(f"ProcId == {proc}", ["RemoteHost"])
            assert ad["RemoteHost"] == f"slot1@node{proc}"
            if proc < 15:
                queue.job_exited(jid, 0, usage={"RemoteWallClockTime": 0.013430118560791016})
        now = stored()
        assert len(now) == 5
        assert len(queue.history(None, ["ExitCode"])) == 15  # read, not kept
        with sqlite3.connect(tmp_path / "queue.db") as db:
            texts |= {row[0] for row in db.execute("SELECT ad FROM history")}
        assert now <= set(_serial._ADS)  # the queue's jobs are read from memory
        assert not (texts - now) & set(_serial._ADS)
