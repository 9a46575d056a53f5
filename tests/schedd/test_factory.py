"""Late materialization through the daemon: `max_materialize` and `max_idle` keep that
many procs in the queue and the next come as earlier ones leave; condor_q -factory shows
the factory; hold, release and rm of the cluster act on it; and a daemon killed -9 while
a factory runs through never makes a proc twice nor skips one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from htgrid.testing import PersonalPool

from ._harness import run_cli, submit, wait_for

LOCAL = "universe = local\nexecutable = /bin/true\narguments = $(Process)\n"


def _queued(pool: PersonalPool, cluster: int) -> list[int]:
    with pool.client() as schedd:
        return [ad["ProcId"] for ad in schedd.query(f"ClusterId == {cluster}", ["ProcId"])]


def _left(pool: PersonalPool, cluster: int) -> Counter[int]:
    with pool.client() as schedd:
        return Counter(ad["ProcId"] for ad in schedd.history(f"ClusterId == {cluster}", ["ProcId"]))


def test_max_materialize_runs_a_cluster_through_that_many_at_a_time(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    script = sub / "job.sh"  # says it started, then waits for the test's word
    script.write_text('#!/bin/sh\necho "$1" >> started\nwhile [ ! -e go ]; do sleep 0.05; done\n')
    script.chmod(0o755)
    text = "universe = local\nexecutable = job.sh\narguments = $(Process)\n"
    with PersonalPool(tmp_path / "pool", fsync=False, periodic_interval=0.5) as pool:
        cluster = submit(pool, sub, text + "max_materialize = 5\nqueue 40\n")
        started = sub / "started"
        wait_for(lambda: started.exists() and len(started.read_text().split()) == 5)
        assert _queued(pool, cluster) == [0, 1, 2, 3, 4]  # five, and no more while they run
        assert sorted(started.read_text().split(), key=int) == ["0", "1", "2", "3", "4"]
        (sub / "go").touch()
        wait_for(
            lambda: sum(_left(pool, cluster).values()) == 40 and not _queued(pool, cluster),
            timeout=120,
            what="the 40 procs to run through",
        )
        assert _left(pool, cluster) == Counter(range(40))  # each made once, none skipped
        assert sorted(map(int, started.read_text().split())) == list(range(40))


def test_a_factory_survives_kill_9_without_making_a_proc_twice(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=True, periodic_interval=0.5) as pool:
        cluster = submit(pool, tmp_path / "sub", LOCAL + "max_materialize = 4\nqueue 60\n")
        for done in (10, 25, 40):
            wait_for(
                lambda done=done: sum(_left(pool, cluster).values()) >= done,  # type: ignore[misc]
                timeout=120,
                what=f"{done} procs through",
            )
            pool.kill()
            pool.start()
        wait_for(
            lambda: sum(_left(pool, cluster).values()) >= 60 and not _queued(pool, cluster),
            timeout=180,
            what="the 60 procs to run through",
        )
        assert _left(pool, cluster) == Counter(range(60))


def test_q_factory_and_hold_release_rm_of_the_cluster(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=False) as pool:
        # Vanilla jobs stay idle (no execute node): the factory waits at its limit.
        text = "executable = /bin/echo\narguments = $(Process)\nmax_materialize = 2\nqueue 10\n"
        cluster = submit(pool, tmp_path / "sub", text)
        assert _queued(pool, cluster) == [0, 1]

        def factory_row() -> list[str]:
            rc, out, _ = run_cli(pool.home, "q", "-factory")
            assert rc == 0
            lines = out.splitlines()
            header = next(i for i, line in enumerate(lines) if line.startswith("ID"))
            assert lines[header].split() == [
                "ID", "OWNER", "SUBMITTED", "LIMIT", "PRESNT", "RUN", "IDLE", "HOLD",
                "NEXTID", "MODE", "DIGEST",
            ]  # fmt: skip
            return lines[header + 1].split()

        row = factory_row()  # SUBMITTED is two words
        assert row[0] == f"{cluster}."
        assert row[4:] == ["2", "2", "0", "2", "0", "2"]  # LIMIT PRESNT RUN IDLE HOLD NEXTID
        rc, out, _ = run_cli(pool.home, "q")
        assert rc == 0
        batch = next(line for line in out.splitlines() if f"ID: {cluster}" in line).split()
        # DONE, RUN, IDLE, HOLD, TOTAL: the 8 procs not yet made are not done.
        assert batch[-6:-1] == ["_", "_", "2", "_", "10"]

        assert run_cli(pool.home, "hold", str(cluster))[0] == 0
        assert factory_row()[-1] == "Held"
        assert run_cli(pool.home, "rm", f"{cluster}.0", f"{cluster}.1")[0] == 0
        assert _queued(pool, cluster) == []  # paused: nothing made in their place
        assert factory_row()[4:] == ["2", "0", "0", "0", "0", "2", "Held"]
        assert run_cli(pool.home, "release", str(cluster))[0] == 0
        assert wait_for(lambda: _queued(pool, cluster) == [2, 3], what="procs 2 and 3")
        rc, out, _ = run_cli(pool.home, "q")
        batch = next(line for line in out.splitlines() if f"ID: {cluster}" in line).split()
        assert batch[-6:-1] == ["2", "_", "2", "_", "10"]  # the two removed are done

        assert run_cli(pool.home, "rm", str(cluster))[0] == 0
        wait_for(lambda: _queued(pool, cluster) == [], what="the cluster removed")
        rc, out, _ = run_cli(pool.home, "q", "-factory", "-allusers")
        assert f"{cluster}." not in out  # no factory left to make more
        assert sorted(_left(pool, cluster)) == [0, 1, 2, 3]
