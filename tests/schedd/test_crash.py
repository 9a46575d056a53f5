"""kill -9 of the daemon at random moments, during a stream of submits and actions.

Seeded and bounded: a few rounds, each starting the daemon, submitting clusters and
holding, releasing, removing and editing jobs through the API until a timer kills the
daemon. Each local job takes a lock on its own file for its whole run and notes when it
finishes, so a second copy running at the same time would notice. At the end the last
daemon runs everything that is left, and the test checks that nothing acknowledged was
lost, that every cluster is whole or absent, that no job ran twice at once, that every
job reported completed really finished, and that the event log misses no event.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path

import htcondor2
import pytest

from htgrid.classad import ClassAd
from htgrid.cli._submit import split_cluster
from htgrid.errors import HTGridError
from htgrid.net import DaemonUnavailable, Jobs, ScheddClient
from htgrid.queue import JobAction, JobStatus
from htgrid.submit import SubmitDescription

from ._harness import PersonalPool, wait_for

ROUNDS = 4
JOB = """universe = local
executable = /bin/sh
arguments = "-c 'exec 9> {work}/locks/$(Cluster).$(Process); flock -n 9 || {{ echo $(Cluster).$(Process) >> {work}/twice; exit 3; }}; sleep 0.$(Nap); echo $(Cluster).$(Process) >> {work}/finished'"
log = {work}/events.log
Nap = $RANDOM_INTEGER(1, 4)
queue {n}
"""


def _submit(schedd: ScheddClient, work: Path, n: int, maybe: dict[int, int]) -> int:
    cluster = schedd.reserve_cluster()
    maybe[cluster] = n  # from here on it may or may not be committed
    desc = SubmitDescription.from_text(JOB.format(work=work, n=n), cwd=str(work))
    jobs = desc.jobs(cluster, owner="unused", qdate=0, seed=cluster)
    cluster_ad, procs = split_cluster(jobs)
    schedd.submit(cluster, cluster_ad, procs)
    return cluster


def _round(
    pool: PersonalPool, rng: random.Random, work: Path, acked: dict[int, int], maybe: dict[int, int]
) -> None:
    pool.start()
    killer = threading.Timer(rng.uniform(0.2, 1.5), pool.kill)
    killer.start()
    try:
        with pool.client() as schedd:
            while True:
                roll = rng.random()
                try:
                    if roll < 0.45 or not acked:
                        n = rng.choice([1, 2, 5, 12])
                        cluster = _submit(schedd, work, n, maybe)
                        acked[cluster] = maybe.pop(cluster)
                        continue
                    cluster = rng.choice(sorted(acked))
                    if roll < 0.6:
                        schedd.act(JobAction.Hold, Jobs.in_cluster(cluster), "crash test")
                    elif roll < 0.8:
                        schedd.act(JobAction.Release, Jobs.matching(f"ClusterId == {cluster}"))
                    elif roll < 0.9:
                        schedd.act(
                            JobAction.Remove,
                            Jobs.matching(f"ClusterId == {cluster} && ProcId % 2 == 0"),
                        )
                    else:
                        schedd.edit(
                            Jobs.matching(f"ClusterId == {cluster}"),
                            {"Note": str(rng.randint(0, 9))},
                        )
                except DaemonUnavailable:
                    return
                except HTGridError:
                    pass  # e.g. the whole cluster was removed already
    finally:
        killer.join()


@pytest.mark.parametrize("seed", [7, 12])
def test_kill_9_loses_nothing_and_runs_nothing_twice(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    work = tmp_path / "work"
    (work / "locks").mkdir(parents=True)
    acked: dict[int, int] = {}
    maybe: dict[int, int] = {}
    pool = PersonalPool(tmp_path / "pool", periodic_interval=1, kill_grace=1, fsync=False)
    try:
        for _ in range(ROUNDS):
            _round(pool, rng, work, acked, maybe)
        pool.start()
        with pool.client() as schedd:
            schedd.act(JobAction.Release, Jobs.matching("JobStatus == 5"))
            # Removed ones (3) too: one still queued while its run ends would leave between
            # the two reads below, and be in both.
            wait_for(
                lambda: not schedd.query("JobStatus <= 3", ["JobStatus"]),
                timeout=60,
                what="every job to finish",
            )
            queued = schedd.query(None, _ATTRS)
            history = schedd.history(None, _ATTRS)
        pool.stop()
    finally:
        pool.__exit__(None, None, None)
    _check(work, acked, maybe, queued + history)


_ATTRS = ["JobStatus", "TotalSubmitProcs", "NumJobStarts"]


def _check(work: Path, acked: dict[int, int], maybe: dict[int, int], ads: list[ClassAd]) -> None:
    assert len(acked) >= ROUNDS  # the test did something
    jobs = {(ad["ClusterId"], ad["ProcId"]): ad for ad in ads}
    assert len(jobs) == len(ads)  # no job both queued and in the history
    clusters = Counter(cluster for cluster, _ in jobs)
    # Nothing acknowledged is lost; every cluster is whole; nothing appears from nowhere.
    for cluster, n in acked.items():
        assert clusters[cluster] == n, f"cluster {cluster}: {clusters[cluster]} of {n} procs"
    for cluster, count in clusters.items():
        expected = acked.get(cluster, maybe.get(cluster))
        assert expected is not None, f"cluster {cluster} was never submitted"
        assert count == expected, f"cluster {cluster} is partial: {count} of {expected}"
        assert all((cluster, p) in jobs for p in range(expected))
        assert jobs[(cluster, 0)]["TotalSubmitProcs"] == expected
    # No job ran twice at once.
    twice = work / "twice"
    assert not twice.exists(), f"ran twice at once: {twice.read_text().split()}"
    # A job reported completed did finish.
    finished = (
        set((work / "finished").read_text().split()) if (work / "finished").exists() else set()
    )
    for (cluster, proc), ad in jobs.items():
        if ad["JobStatus"] == JobStatus.COMPLETED:
            assert f"{cluster}.{proc}" in finished, f"{cluster}.{proc} completed without finishing"
    # The event log has each event once.
    seen: dict[tuple[int, int], Counter[int]] = {}
    for event in htcondor2.JobEventLog(str(work / "events.log")).events(stop_after=0):
        seen.setdefault((event.cluster, event.proc), Counter())[int(event.type)] += 1
    for key, ad in jobs.items():
        types = seen.get(key, Counter())
        assert types[0] == 1, f"{key}: {types[0]} submit events"
        assert types[1] == ad.get("NumJobStarts", 0), f"{key}: {types} for {ad}"
        if ad["JobStatus"] == JobStatus.COMPLETED:
            assert types[5] == 1, f"{key}: {types[5]} terminated events"
        if ad["JobStatus"] == JobStatus.REMOVED:
            assert types[9] == 1, f"{key}: {types[9]} aborted events"
