"""Late materialization through the daemon: `max_materialize` and `max_idle` keep that
many procs in the queue and the next come as earlier ones leave; condor_q -factory shows
the factory; hold, release and rm of the cluster act on it; the cluster's own events
(035 to 038) go to its log; and a daemon killed -9 while a factory runs through never
makes a proc twice nor skips one, nor writes an event twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import classad2
import htcondor2

from htgrid.testing import PersonalPool

from ._harness import events, run_cli, submit, wait_for

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
        # LIMIT PRESNT RUN IDLE HOLD NEXTID MODE (condor_q's Norm: making procs)
        assert row[4:] == ["2", "2", "0", "2", "0", "2", "Norm"]
        rc, out, _ = run_cli(pool.home, "q")
        assert rc == 0
        batch = next(line for line in out.splitlines() if f"ID: {cluster}" in line).split()
        # DONE, RUN, IDLE, HOLD, TOTAL: the 8 procs not yet made are not done.
        assert batch[-6:-1] == ["_", "_", "2", "_", "10"]

        assert run_cli(pool.home, "hold", str(cluster))[0] == 0
        assert factory_row()[-1] == "Held"
        # condor_q -factory -l: the factory's cluster ad, with why it is paused.
        rc, out, _ = run_cli(pool.home, "q", "-factory", "-l", str(cluster))
        assert rc == 0
        ad = classad2.parseOne(out)
        assert ad["JobMaterializePauseReason"] == "via condor_hold (by user root)"
        assert (ad["ClusterId"], ad["JobMaterializePaused"], ad["JobsPresent"]) == (cluster, 1, 2)
        assert (ad["JobMaterializeLimit"], ad["JobMaterializeNextProcId"]) == (2, 2)
        assert run_cli(pool.home, "rm", f"{cluster}.0", f"{cluster}.1")[0] == 0
        assert _queued(pool, cluster) == []  # paused: nothing made in their place
        assert factory_row()[4:] == ["2", "0", "0", "0", "0", "2", "Held"]
        assert run_cli(pool.home, "release", str(cluster))[0] == 0
        assert wait_for(lambda: _queued(pool, cluster) == [2, 3], what="procs 2 and 3")
        out = run_cli(pool.home, "q", "-factory", "-l", str(cluster))[1]
        assert "JobMaterializePauseReason" not in out  # resumed: no reason to pause
        rc, out, _ = run_cli(pool.home, "q")
        batch = next(line for line in out.splitlines() if f"ID: {cluster}" in line).split()
        assert batch[-6:-1] == ["2", "_", "2", "_", "10"]  # the two removed are done

        assert run_cli(pool.home, "rm", str(cluster))[0] == 0
        wait_for(lambda: _queued(pool, cluster) == [], what="the cluster removed")
        rc, out, _ = run_cli(pool.home, "q", "-factory", "-allusers")
        assert f"{cluster}." not in out  # no factory left to make more
        assert sorted(_left(pool, cluster)) == [0, 1, 2, 3]


SUBMIT, EXECUTE, TERMINATED, HELD, RELEASED = 0, 1, 5, 12, 13
CLUSTER_SUBMIT, CLUSTER_REMOVE, FACTORY_PAUSED, FACTORY_RESUMED = 35, 36, 37, 38
# Says it started, then waits for the test's word.
WAITER = '#!/bin/sh\necho "$1" >> started\nwhile [ ! -e go ]; do sleep 0.05; done\n'


def _waiting_factory(pool: PersonalPool, sub: Path, limit: int, count: int) -> int:
    sub.mkdir()
    (sub / "job.sh").write_text(WAITER)
    (sub / "job.sh").chmod(0o755)
    text = "universe = local\nexecutable = job.sh\narguments = $(Process)\nlog = job.log\n"
    return submit(pool, sub, text + f"max_materialize = {limit}\nqueue {count}\n")


def _logged(log: Path) -> list[htcondor2.JobEvent]:
    return list(events(log)) if log.exists() else []


def _numbers(log: Path) -> list[int]:
    return [int(e.type) for e in _logged(log)]


def _cluster_events(log: Path) -> list[htcondor2.JobEvent]:
    return [e for e in _logged(log) if e.proc == -1]


def test_a_factory_writes_its_clusters_events_to_its_log(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=False, periodic_interval=0.5) as pool:
        sub = tmp_path / "sub"
        cluster = _waiting_factory(pool, sub, 2, 6)
        log = sub / "job.log"
        started = sub / "started"
        wait_for(lambda: started.exists() and len(started.read_text().split()) == 2)
        assert run_cli(pool.home, "hold", str(cluster))[0] == 0
        wait_for(lambda: FACTORY_PAUSED in _numbers(log), what="the 037 event")
        assert run_cli(pool.home, "release", str(cluster))[0] == 0
        wait_for(lambda: FACTORY_RESUMED in _numbers(log), what="the 038 event")
        (sub / "go").touch()
        wait_for(lambda: CLUSTER_REMOVE in _numbers(log), timeout=120, what="the 036 event")

        logged = _logged(log)
        numbers = [int(e.type) for e in logged]
        assert numbers[0] == CLUSTER_SUBMIT  # before any job's 000
        assert numbers[-1] == CLUSTER_REMOVE  # after every job's last event
        cluster_events = [e for e in logged if e.proc == -1]
        assert [int(e.type) for e in cluster_events] == [
            CLUSTER_SUBMIT, FACTORY_PAUSED, FACTORY_RESUMED, CLUSTER_REMOVE
        ]  # fmt: skip
        assert all(e.cluster == cluster for e in cluster_events)
        submitted, paused, resumed, removed = cluster_events
        assert submitted["SubmitHost"].startswith("<")
        assert paused["Reason"] == "via condor_hold (by user root)"
        assert (paused["PauseCode"], paused["HoldCode"]) == (1, 1)
        assert resumed["Reason"] == "via condor_release (by user root)"
        assert (removed["NextProcId"], removed["NextRow"], removed["Completion"]) == (6, 0, 1)
        # The jobs held with the cluster: 037 comes before the first job's 012.
        assert numbers.index(FACTORY_PAUSED) < numbers.index(HELD)
        assert numbers.index(FACTORY_RESUMED) < numbers.index(RELEASED)
        for proc in range(6):
            mine = [int(e.type) for e in logged if e.proc == proc]
            assert mine[0] == SUBMIT and mine[-1] == TERMINATED, (proc, mine)
            assert mine.count(SUBMIT) == 1 and mine.count(TERMINATED) == 1


def test_a_removed_factory_says_so_in_its_log(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=False, periodic_interval=0.5) as pool:
        sub = tmp_path / "sub"
        cluster = _waiting_factory(pool, sub, 2, 10)
        log = sub / "job.log"
        wait_for(lambda: _numbers(log).count(EXECUTE) == 2, what="two jobs running")
        assert run_cli(pool.home, "rm", str(cluster))[0] == 0
        wait_for(lambda: CLUSTER_REMOVE in _numbers(log), timeout=60, what="the 036 event")
        removed = _cluster_events(log)[-1]
        # Two made of ten: removed before it was complete.
        assert (removed["NextProcId"], removed["Completion"]) == (2, 0)
        assert _numbers(log)[-1] == CLUSTER_REMOVE


def test_the_036_event_says_at_which_item_it_stopped_and_why(tmp_path: Path) -> None:
    # HTCondor's 036: "Materialized N jobs from M items", M its JobMaterializeNextRow (the
    # item row of the next proc; -1 once all are made; 0 without items), and the pause
    # reason a factory removed while held still has.
    with PersonalPool(tmp_path / "pool", fsync=False, periodic_interval=0.5) as pool:
        sub = tmp_path / "sub"
        sub.mkdir()
        (sub / "items.txt").write_text("a\nb\nc\n")
        (sub / "job.sh").write_text(WAITER)
        (sub / "job.sh").chmod(0o755)
        head = "universe = local\narguments = $(Item)\nlog = job.log\nmax_materialize = 2\n"
        waiting = submit(pool, sub, head + "executable = job.sh\nqueue 2 Item from items.txt\n")
        through = submit(pool, sub, head + "executable = /bin/true\nqueue 2 Item from items.txt\n")
        log = sub / "job.log"
        wait_for(lambda: _numbers(log).count(EXECUTE) >= 2, what="two jobs running")
        assert run_cli(pool.home, "hold", "-reason", "disk full", str(waiting))[0] == 0
        assert run_cli(pool.home, "rm", str(waiting))[0] == 0

        def removed() -> dict[int, htcondor2.JobEvent]:
            return {e.cluster: e for e in _cluster_events(log) if int(e.type) == CLUSTER_REMOVE}

        wait_for(lambda: len(removed()) == 2, timeout=120, what="the two 036 events")
        stopped, done = removed()[waiting], removed()[through]
        # Removed while held, having made procs 0 and 1 of item 0: item 1 was next.
        assert (stopped["NextProcId"], stopped["NextRow"], stopped["Completion"]) == (2, 1, 0)
        assert stopped["Notes"] == "disk full"
        assert (done["NextProcId"], done["NextRow"], done["Completion"]) == (6, -1, 1)
        assert "Notes" not in done
        text = log.read_text()
        assert "Materialized 2 jobs from 1 items.\tIncomplete\n\tdisk full\n" in text
        assert "Materialized 6 jobs from -1 items.\tComplete\n" in text


def test_kill_9_neither_loses_nor_repeats_a_factorys_events(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=True, periodic_interval=0.5) as pool:
        sub = tmp_path / "sub"
        cluster = _waiting_factory(pool, sub, 2, 4)
        log = sub / "job.log"
        position = pool.home / "spool" / "userlog.seq"

        def written(number: int) -> bool:
            # The event is in the log, and the writer's position saved after it.
            return (
                number in _numbers(log)
                and position.exists()
                and position.stat().st_mtime_ns >= log.stat().st_mtime_ns
            )

        wait_for(lambda: written(CLUSTER_SUBMIT), what="the 035 event")
        pool.kill()
        pool.start()
        assert run_cli(pool.home, "hold", str(cluster))[0] == 0
        wait_for(lambda: written(FACTORY_PAUSED), what="the 037 event")
        pool.kill()
        pool.start()
        assert run_cli(pool.home, "release", str(cluster))[0] == 0
        # Perhaps before the 038 is written: it must come after the restart. Or after it
        # is written but before the writer saved its place: it must not come again.
        pool.kill()
        pool.start()
        wait_for(lambda: written(FACTORY_RESUMED), what="the 038 event")
        (sub / "go").touch()
        wait_for(lambda: written(CLUSTER_REMOVE), timeout=120, what="the 036 event")
        pool.kill()
        pool.start()
        # Another job's events on the same log: the writer has gone past the factory's.
        other = submit(
            pool, sub, "universe = local\nexecutable = /bin/true\nlog = job.log\nqueue\n"
        )
        wait_for(
            lambda: any(e.cluster == other and int(e.type) == TERMINATED for e in _logged(log)),
            what="the other job's 005",
        )
        logged = [int(e.type) for e in _cluster_events(log) if e.cluster == cluster]
        # Written once each, wherever the kills fell.
        assert logged == [CLUSTER_SUBMIT, FACTORY_PAUSED, FACTORY_RESUMED, CLUSTER_REMOVE]
        for proc in range(4):
            mine = [int(e.type) for e in _logged(log) if (e.cluster, e.proc) == (cluster, proc)]
            assert mine.count(SUBMIT) == 1 and mine.count(TERMINATED) == 1, (proc, mine)
