"""The pool's daemons as a whole: supervision, `-no-execute`, a clean stop that loses no
job, and the idle shutdown a cloud instance needs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from htgrid.master import alive
from htgrid.net import ScheddClient
from htgrid.testing import run_cli, wait_for

from .conftest import FAST, events, script, submit, whole_pool


def test_an_idle_execute_node_shuts_the_pool_down_and_runs_the_exit_action(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "powered-off"
    pool = whole_pool(
        tmp_path / "pool",
        STARTD_NOCLAIM_SHUTDOWN=2,
        DEFAULT_MASTER_SHUTDOWN_SCRIPT=f"echo shutdown -h now > {marker}",
    )
    with pool:
        pid = pool.pid
        assert pid is not None
        wait_for(lambda: not alive(pid), timeout=30, what="the pool to stop by itself")
        wait_for(marker.exists, what="the exit action")
        assert marker.read_text() == "shutdown -h now\n"
        assert not (pool.home / "run" / "schedd.sock").exists()
        log = (pool.home / "log" / "SchedLog").read_text()
        assert "the execute node shut down for want of work: stopping the pool" in log
        assert "running DEFAULT_MASTER_SHUTDOWN_SCRIPT" in log
        assert (
            "no claim for 2 s (STARTD_NOCLAIM_SHUTDOWN)"
            in (pool.home / "log" / "StartLog").read_text()
        )


def test_a_dead_collector_is_restarted_on_the_same_address(tmp_path: Path) -> None:
    with whole_pool(tmp_path / "pool") as pool:
        address = pool.collector
        collector = pool.child_pid("collector")
        assert collector is not None
        os.kill(collector, signal.SIGKILL)
        wait_for(
            lambda: (p := pool.child_pid("collector")) and p != collector, what="a new collector"
        )
        assert pool.collector == address
        wait_for(
            lambda: run_cli(pool.home, "status", "-schedd", "-af", "Name")[1],
            what="the schedd's ad again",
        )
        with pool.client() as schedd:
            children = schedd.health()["children"]
        assert children["collector"]["restarts"] == 1
        assert children["collector"]["state"] == "running"
        assert (
            "the collector died (signal 9); restarting it"
            in (pool.home / "log" / "SchedLog").read_text()
        )


def test_up_without_an_execute_node_leaves_vanilla_jobs_waiting(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    home.mkdir()
    conf = {
        **FAST,
        "COLLECTOR_HOST": "127.0.0.1:0",
        "QUEUE_FSYNC": "false",
        "ALLOW_ROOT_JOBS": "true",
    }
    (home / "htgrid.conf").write_text("".join(f"{k} = {v}\n" for k, v in conf.items()))
    rc, out, err = run_cli(home, "up", "-no-execute")
    try:
        assert rc == 0, err
        assert "  daemons:   MASTER, SCHEDD, COLLECTOR, NEGOTIATOR, GRIDMANAGER\n" in out
        with ScheddClient(home / "run" / "schedd.sock") as schedd:
            assert "startd" not in schedd.health()["children"]
            cluster = submit(home, tmp_path / "job", "executable = /bin/true\nqueue\n")
            wait_for(lambda: schedd.get(f"{cluster}.0").get("LastRejMatchReason"))
            assert schedd.get(f"{cluster}.0")["JobStatus"] == 1
        rc, out, _ = run_cli(home, "q", "-better-analyze", f"{cluster}.0")
        assert "No execute node has joined this pool yet" in out
    finally:
        rc, out, _ = run_cli(home, "down")
    assert rc == 0 and out.startswith("htgrid daemons stopped")


def test_down_evicts_running_jobs_which_resume_from_their_spooled_output(
    tmp_path: Path,
) -> None:
    looping = tmp_path / "looping"
    script(
        tmp_path / "resume.sh",
        'if [ -e progress ]; then echo resumed; echo "$(cat progress) done" > result; exit 0; fi\n'
        f"echo step1 > progress; echo started; touch {looping}\nwhile :; do sleep 0.1; done\n",
    )
    with whole_pool(tmp_path / "pool") as pool:
        cluster = submit(
            pool.home,
            tmp_path,
            "executable = resume.sh\nshould_transfer_files = YES\n"
            "when_to_transfer_output = ON_EXIT_OR_EVICT\ntransfer_output_files = progress, result\n"
            "output = job.out\nlog = job.log\nqueue\n",
        )
        wait_for(looping.exists, what="the first run, its progress made")
        pool.stop()  # htgrid down
        job = f"{cluster}.0"
        assert events(tmp_path / "job.log")[job] == [0, 1, 4]
        spooled = pool.home / "spool" / "sandboxes" / job
        assert (spooled / "progress").read_text() == "step1\n"
        pool.start()  # htgrid up
        with pool.client() as schedd:
            wait_for(lambda: schedd.history(f"ClusterId == {cluster}"), timeout=30)
        # The event log writer follows the queue's commits, a moment behind them.
        wait_for(lambda: len(events(tmp_path / "job.log")[job]) >= 5, what="the 005 event")
        assert events(tmp_path / "job.log")[job] == [0, 1, 4, 1, 5]
        assert (tmp_path / "result").read_text() == "step1 done\n"
        assert (tmp_path / "job.out").read_text() == "started\nresumed\n"
        # Removed once the job's end is recorded: after it is in the history.
        wait_for(lambda: not spooled.exists(), what="the kept output removed")
