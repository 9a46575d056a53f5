"""kill -9 at random moments loses nothing committed and leaves nothing half-applied.

A child process submits clusters (one transaction each, up to thousands of procs) and
holds, releases, removes and edits jobs, printing each cluster id once its commit has
returned. The test SIGKILLs it after a seeded random delay, several times on the same
state directory, and checks after each kill: the database is intact, every cluster is
whole (all its procs, queued or in the history) or absent, every cluster reported
committed is there, ids only grow, and each job's status column agrees with its ad.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import htgrid.classad as classad
from htgrid.queue import Identity, JobQueue

CHILD = r"""
import random, sys
import htgrid.classad as classad
from htgrid.queue import Identity, JobAction, JobQueue

state, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
me = Identity("alice")
q = JobQueue.open(state)
clusters = [ad["ClusterId"] for ad in q.query(projection=["ClusterId"])]
print("ready", flush=True)
while True:
    roll = rng.random()
    if roll < 0.45 or not clusters:
        n = rng.choice([1, 10, 500, 3000])
        with q.transaction(me) as tx:
            cid = tx.new_cluster()
            tx.set_cluster_ad(cid, classad.ClassAd({"Cmd": "/bin/true", "ExpectedProcs": n}))
            for i in range(n):
                tx.new_proc(cid, classad.ClassAd({"Args": str(i)}))
        clusters.append(cid)
        print("C", cid, n, flush=True)
    elif roll < 0.65:
        q.act(JobAction.Hold, f"ClusterId == {rng.choice(clusters)}", me, "crash test")
    elif roll < 0.8:
        q.act(JobAction.Release, f"ClusterId == {rng.choice(clusters)}", me)
    elif roll < 0.9:
        q.act(JobAction.Remove, f"ClusterId == {rng.choice(clusters)} && ProcId % 2 == 0", me)
    else:
        q.edit(f"ClusterId == {rng.choice(clusters)}", {"Note": str(rng.randint(0, 99))}, me)
"""


def _run_and_kill(state: Path, seed: int, delay: float) -> list[tuple[int, int]]:
    """Start the child, kill -9 it after `delay` seconds of work; the clusters it committed."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(delay)
    os.kill(child.pid, signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    committed = []
    for line in out.splitlines():
        _, cid, n = line.split()
        committed.append((int(cid), int(n)))
    return committed


def _check(state: Path, committed: dict[int, int]) -> int:
    """Check the database after a kill; the largest cluster id in it."""
    db = sqlite3.connect(state / "queue.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        clusters = {
            cid: int(json.loads(ad)["ExpectedProcs"])
            for table in ("clusters", "history_clusters")
            for cid, ad in db.execute(f"SELECT cluster, ad FROM {table}")
        }
        for cid, expected in clusters.items():
            procs = sorted(
                p
                for table in ("jobs", "history")
                for (p,) in db.execute(f"SELECT proc FROM {table} WHERE cluster = ?", (cid,))
            )
            assert procs == list(range(expected)), f"cluster {cid} is not whole"
        orphans = db.execute(
            "SELECT count(*) FROM jobs WHERE cluster NOT IN (SELECT cluster FROM clusters)"
        ).fetchone()
        assert orphans == (0,)
        for cid, n in committed.items():
            assert clusters.get(cid) == n, f"lost committed cluster {cid}"
        top = max(clusters, default=0)
        (next_cluster,) = db.execute("SELECT value FROM meta WHERE key = 'next_cluster'").fetchone()
        assert next_cluster > top
        (last_seq,) = db.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()
        (top_seq,) = db.execute(
            "SELECT max(s) FROM (SELECT max(seq) AS s FROM changes UNION ALL "
            "SELECT max(seq) FROM jobs UNION ALL SELECT max(seq) FROM history)"
        ).fetchone()
        assert top_seq is None or last_seq >= top_seq
        statuses = {(c, p): s for c, p, s in db.execute("SELECT cluster, proc, status FROM jobs")}
    finally:
        db.close()
    with JobQueue.open(state) as q:
        for ad in q.query(projection=["JobStatus"]):
            assert statuses[(ad["ClusterId"], ad["ProcId"])] == ad["JobStatus"]
    return top


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(1234)
    state = tmp_path / "spool"
    committed: dict[int, int] = {}
    floor = 1
    kills = 0
    deadline = time.monotonic() + 40
    for iteration in range(6):
        if time.monotonic() > deadline:
            break
        new = _run_and_kill(state, seed=iteration, delay=rng.uniform(0.3, 1.5))
        kills += 1
        ids = [cid for cid, _ in new]
        assert ids == sorted(set(ids)), "cluster ids must only grow"
        assert all(cid >= floor for cid in ids), "a cluster id was reused"
        committed.update(new)
        floor = _check(state, committed) + 1
    assert kills >= 3
    assert len(committed) >= 3
    with JobQueue.open(state) as q:
        assert q.submit(Identity("alice"), classad.ClassAd({"ExpectedProcs": 1})) >= floor
