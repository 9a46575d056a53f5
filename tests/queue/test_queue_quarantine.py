"""The queue loads whatever it ever stored: a row it cannot read (not JSON, an expression
that does not parse, a NUL, a cluster row gone, a status that is none) is set aside
when the queue opens, said once and counted, and everything else is served."""

from __future__ import annotations

import logging
import os
import pwd
import sqlite3
from pathlib import Path

import pytest

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue import Identity, JobAction, JobQueue
from htgrid.testing import PersonalPool, run_cli

ALICE = Identity("alice")
ME = pwd.getpwuid(os.getuid()).pw_name

# (what is done to the database, the job it breaks, the words of the reason)
DAMAGE = [
    (
        "UPDATE jobs SET ad = 'not json' WHERE cluster = 1 AND proc = 1",
        "1.1",
        "its own ad: not JSON",
    ),
    (
        """UPDATE jobs SET ad = '{"Description":"\\"a\\\\000b\\""}' WHERE cluster = 1 AND proc = 2""",
        "1.2",
        "attribute Description does not parse: a string may not hold a NUL character",
    ),
    (
        """UPDATE jobs SET ad = '{"Note":"\\"a\\u0000b\\""}' WHERE cluster = 2 AND proc = 0""",
        "2.0",
        "attribute Note holds a NUL character",
    ),
    (
        """UPDATE jobs SET ad = '{"X":"1 +"}' WHERE cluster = 2 AND proc = 1""",
        "2.1",
        "attribute X does not parse",
    ),
    ("DELETE FROM clusters WHERE cluster = 3", "3.0", "its cluster's row (cluster 3) is missing"),
    (
        """UPDATE clusters SET ad = '{"JobStatus":"1","Req":"((("}' WHERE cluster = 4""",
        "4.0",
        "the ad of its cluster cannot be read: its ad: attribute Req does not parse",
    ),
    (
        "UPDATE jobs SET status = 99 WHERE cluster = 5 AND proc = 0",
        "5.0",
        "its status column holds 99",
    ),
    (
        """UPDATE jobs SET ad = '{"JobStatus":"42"}' WHERE cluster = 5 AND proc = 1""",
        "5.1",
        "its JobStatus is 42",
    ),
    (
        """UPDATE jobs SET ad = '{"Y":7}' WHERE cluster = 5 AND proc = 2""",
        "5.2",
        "is stored as int",
    ),
]


def _fill(state: Path, owner: Identity = ALICE) -> None:
    with JobQueue.open(state, fsync=False) as queue:
        for cluster in range(1, 7):
            ad = ClassAd({"Cmd": "/bin/true", "Iwd": "/tmp", "JobUniverse": 5, "Tag": cluster})
            ad["Requirements"] = ExprTree("TARGET.Memory > 10")
            queue.submit(owner, ad, [ClassAd({"Arguments": f"{cluster} {p}"}) for p in range(3)])


def _damage(state: Path) -> None:
    conn = sqlite3.connect(state / "queue.db")
    with conn:
        for sql, _, _ in DAMAGE:
            conn.execute(sql)
        conn.execute("UPDATE changes SET attrs = 'zzz' WHERE seq = (SELECT min(seq) FROM changes)")
    conn.close()


def _ids(ads: list[ClassAd]) -> list[str]:
    return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads]


def test_unreadable_rows_are_set_aside_and_the_rest_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(tmp_path)
    _damage(tmp_path)
    with caplog.at_level(logging.ERROR, logger="htgrid.queue"), JobQueue.open(tmp_path) as queue:
        aside = queue.quarantined()
        jobs = {e.job: e.reason for e in aside if e.source == "jobs"}
        # A job of the cluster whose ad is broken (4) goes with it; the other jobs stay.
        for _, job, words in DAMAGE:
            assert words in jobs[job], (job, jobs[job])
        assert {"4.1", "4.2", "3.1", "3.2"} <= set(jobs)
        assert [e.source for e in aside].count("clusters") == 1
        assert [e.reason for e in aside if e.source == "changes"] == [
            "its attributes: not JSON (Expecting value: line 1 column 1 (char 0))"
        ]
        assert _ids(queue.query()) == ["1.0", "2.2", "6.0", "6.1", "6.2"]
        assert queue.get("6.1")["Arguments"] == "6 1"
        queue.changes_since(0)  # the feed reads again
        assert all(e.owner == "alice" for e in aside if e.source == "jobs")
    said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == len(aside)
    assert "job 1.2 cannot be read and is set aside" in "\n".join(said)
    with JobQueue.open(tmp_path) as again:  # said once: nothing more moves
        assert again.quarantined() == aside
        assert _ids(again.query()) == ["1.0", "2.2", "6.0", "6.1", "6.2"]
    conn = sqlite3.connect(tmp_path / "queue.db")  # the rows are kept, to repair
    (data,) = conn.execute("SELECT data FROM quarantine WHERE cluster = 1 AND proc = 1").fetchone()
    conn.close()
    assert '"ad": "not json"' in data


def test_an_unreadable_history_row_is_left_out_of_history(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        cluster = queue.submit(ALICE, ClassAd({"Cmd": "/bin/true"}), 2)
        queue.act(JobAction.Remove, cluster, ALICE)
    conn = sqlite3.connect(tmp_path / "queue.db")
    with conn:
        conn.execute('UPDATE history SET ad = \'{"A":"("}\' WHERE proc = 0')
    conn.close()
    with caplog.at_level(logging.WARNING, logger="htgrid.queue"), JobQueue.open(tmp_path) as queue:
        assert _ids(queue.history()) == [f"{cluster}.1"]
    assert f"the history row of job {cluster}.0 cannot be read" in caplog.text


def test_a_daemon_restarted_on_a_damaged_queue_serves_the_rest_and_says_so(
    tmp_path: Path,
) -> None:
    with PersonalPool(tmp_path / "pool", fsync=False) as pool:
        pool.stop()
        _fill(pool.config.spool, Identity(ME))
        _damage(pool.config.spool)
        pool.start()
        with pool.client() as schedd:
            assert _ids(schedd.query(None, ["Cmd"])) == ["1.0", "2.2", "6.0", "6.1", "6.2"]
            aside = schedd.health()["quarantined"]
            assert aside == len(schedd.quarantined()) > len(DAMAGE)
        status, out, _ = run_cli(pool.home, "q")
        assert status == 0
        assert f"{aside} row(s) of the queue could not be read" in out
        assert "htgrid q -quarantined" in out
        status, out, _ = run_cli(pool.home, "q", "-quarantined")
        assert status == 0
        assert "1.2" in out and "a string may not hold a NUL character" in out
        assert "its cluster's row (cluster 3) is missing" in out
        log = pool.config.log_file.read_text()
        assert "job 2.0 cannot be read and is set aside" in log
        # What was set aside stays aside: the next start finds nothing new.
        pool.stop()
        pool.start()
        with pool.client() as schedd:
            assert schedd.health()["quarantined"] == aside
            assert len(schedd.query()) == 5
