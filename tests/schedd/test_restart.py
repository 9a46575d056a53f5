"""Stopping and crashing the daemon: interrupted jobs go back to idle and run again."""

from __future__ import annotations

from pathlib import Path

from htgrid.net import Jobs
from htgrid.queue import JobAction, JobQueue, JobStatus

from ._harness import FAST, PersonalPool, event_types, run_cli, submit, wait_for

SLEEPER = """universe = local
executable = /bin/sh
arguments = "-c 'echo $$ >> {runs}; exec sleep 300'"
log = job.log
queue
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _runs(path: Path, n: int) -> list[int] | None:
    pids = [int(p) for p in path.read_text().split()] if path.exists() else []
    return pids if len(pids) >= n else None


def test_down_then_up_reruns_interrupted_jobs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with PersonalPool(tmp_path / "pool", **FAST) as pool:
        cluster = submit(pool, tmp_path, SLEEPER.format(runs=runs))
        job = f"{cluster}.0"
        (first,) = wait_for(lambda: _runs(runs, 1))
        rc, out, _ = run_cli(pool.home, "down")
        pool.pid = None
        assert (rc, out.split(" (")[0]) == (0, "htgrid daemons stopped")
        assert not _alive(first)
        with JobQueue.open(pool.config.spool, fsync=False) as q:  # the daemon is down
            ad = q.get(job)
        assert ad["JobStatus"] == JobStatus.IDLE
        assert ad["NumJobStarts"] == 1
        assert "LastVacateTime" in ad
        assert event_types(tmp_path / "job.log", job) == [0, 1, 4]

        rc, out, _ = run_cli(pool.home, "up")
        pool.pid = int(out.split("pid ")[1].split(")")[0])
        assert rc == 0 and out.startswith("htgrid daemons started")
        _, second = wait_for(lambda: _runs(runs, 2), what="the job to run again")
        assert _alive(second)
        with pool.client() as schedd:
            wait_for(lambda: schedd.get(job)["JobStatus"] == JobStatus.RUNNING)
            assert schedd.get(job)["NumJobStarts"] == 2
            schedd.act(JobAction.Remove, Jobs.of([job]))
        wait_for(lambda: not _alive(second))


def test_after_kill_9_the_orphaned_job_is_killed_and_rerun(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with PersonalPool(tmp_path / "pool", **FAST) as pool:
        cluster = submit(pool, tmp_path, SLEEPER.format(runs=runs))
        job = f"{cluster}.0"
        (orphan,) = wait_for(lambda: _runs(runs, 1))
        pool.kill()
        assert _alive(orphan)  # the job outlives its daemon...
        pool.start()
        wait_for(lambda: not _alive(orphan), what="the orphan to be killed")  # ...not the next
        _, rerun = wait_for(lambda: _runs(runs, 2), what="the job to run again")
        assert _alive(rerun)
        log = tmp_path / "job.log"
        wait_for(lambda: event_types(log, job) == [0, 1, 4, 1], what="an eviction event")
        with pool.client() as schedd:
            ad = schedd.get(job)
            assert (ad["JobStatus"], ad["NumJobStarts"]) == (JobStatus.RUNNING, 2)
            schedd.act(JobAction.Remove, Jobs.of([job]))
        wait_for(lambda: not _alive(rerun))


def test_up_and_down_say_what_they_did(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    rc, out, _ = run_cli(home, "down")
    assert (rc, out) == (
        0,
        f"htgrid daemons are not running (nothing answers on {home}/run/schedd.sock).\n",
    )
    home.mkdir()
    (home / "htgrid.conf").write_text(
        "COLLECTOR_HOST = 127.0.0.1:0\n"  # any free port
        "TRUST_DOMAIN = restart.test\n"
    )
    rc, out, _ = run_cli(home, "up")
    try:
        assert rc == 0
        lines = out.splitlines()
        assert lines[0].startswith("htgrid daemons started (pid ")
        port = (home / "run" / "collector.address").read_text().strip().rsplit(":", 1)[1]
        assert lines[1:] == [
            f"  socket:    {home}/run/schedd.sock",
            f"  log:       {home}/log/SchedLog",
            f"  queue:     {home}/spool/queue.db",
            f"  collector: 127.0.0.1:{port}",
            "  daemons:   MASTER, SCHEDD, COLLECTOR, NEGOTIATOR, STARTD, GRIDMANAGER",
            "  trust domain: restart.test",
            f"  pool CA:   {home}/etc/ca/ca.crt",
        ]
        pid = int(lines[0].split("pid ")[1].rstrip(")."))
        assert (home / "run").stat().st_mode & 0o777 == 0o700
        assert (home / "run" / "schedd.sock").stat().st_mode & 0o777 == 0o600
        rc, out, _ = run_cli(home, "up")
        assert (rc, out) == (
            0,
            f"htgrid daemons are already running (pid {pid}) on {home}/run/schedd.sock.\n",
        )
    finally:
        rc, out, _ = run_cli(home, "down")
    assert (rc, out) == (0, f"htgrid daemons stopped (pid {pid}).\n")
    assert not _alive(pid)
    assert not (home / "run" / "schedd.sock").exists()
    assert "stopped" in (home / "log" / "SchedLog").read_text()


def test_a_daemon_that_cannot_start_says_why(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    home.mkdir()
    (home / "htgrid.conf").write_text("PERIODIC_EXPR_INTERVAL = soon\n")
    rc, _, err = run_cli(home, "up")
    assert rc == 2  # a wrong input file
    assert f"{home}/htgrid.conf:1: PERIODIC_EXPR_INTERVAL must be a number" in err
    assert not (home / "run" / "schedd.sock").exists()


def test_a_daemon_that_dies_while_starting_shows_its_log(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    (home / "spool").mkdir(parents=True)
    (home / "spool" / "queue.db").write_text("this is not a database\n")
    rc, _, err = run_cli(home, "up")
    assert rc == 1
    # The daemon's own last words, from SchedLog, and where to read more.
    assert "the daemon could not start: job queue database" in err
    assert "queue.db: file is not a database (see " in err and "SchedLog)" in err
