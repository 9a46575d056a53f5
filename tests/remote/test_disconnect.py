"""An execute node of another host that stops answering while the schedd runs (a network
cut, a stopped machine, a dead one): its job may still run there, so the schedd never
runs it anywhere else while the job's lease may keep it alive there. The job stays
Running, disconnected (022); a node that answers again within the lease is reconnected
to (023) and the job completes once; past the lease, the node has killed it, and the
job goes back to idle (024, 004) and runs once more, elsewhere or there."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from htgrid.classad import Value
from htgrid.pool import family_marker, kill_leftovers
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _history
from .test_restart import (
    CUT,
    LEASE,
    _events,
    _job,
    _lines,
    _node,
    _read,
    _runs,
    _submit_job,
    _waits_for_the_lease,
)

_SHORT_ADS = {"UPDATE_INTERVAL": 4}


def _disconnected(pool: PersonalPool, job: str, starts: Path) -> None:
    """Until the schedd finds the node cut off, and after: the job Running, run once."""
    deadline = time.monotonic() + 60
    while not isinstance(_job(pool, job).get("JobDisconnectedDate"), int):
        assert time.monotonic() < deadline, "the schedd did not find the node cut off"
        time.sleep(0.2)
    assert _job(pool, job)["JobStatus"] == 2
    assert len(_lines(starts)) == 1


def _started_on(pool: PersonalPool, job: str, address: str) -> None:
    """Until the schedd has recorded the job's start on the node at `address`: the node
    answers the activation once the job's process runs, which may write its line first."""
    wait_for(
        lambda: str(_job(pool, job).get("StartdIpAddr", "")).startswith(f"<{address}:"),
        timeout=30,
        what=f"the job's start on {address} recorded",
    )


def test_a_job_whose_node_is_cut_off_for_less_than_its_lease_is_reconnected_to(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node2 = _node(pool, tmp_path, "node2", "127.0.0.2")
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "cut_b.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        (first,) = _runs(tmp_path, "cut_b.sh")
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")  # free, and would take it
        assert node2.process is not None
        os.kill(node2.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        try:
            _disconnected(pool, job, starts)
        finally:
            os.kill(node2.process.pid, signal.SIGCONT)  # well within the lease
        ad = wait_for(
            lambda: (a := _job(pool, job)).get("NumJobReconnects") == 1 and a,
            timeout=LEASE,
            what="the schedd to reconnect to the job",
        )
        assert ad["JobStatus"] == 2 and ad.eval("JobLeaseExpiration") is Value.Undefined
        assert _runs(tmp_path, "cut_b.sh") == {first}
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["ExitCode"] == 0 and done["NumJobStarts"] == 1
        assert [line.split()[0] for line in _lines(starts)] == ["start"]
        assert (tmp_path / "work" / "job.out").read_text() == f"done {first}\n"
        log = tmp_path / "work" / "job.log"
        assert _events(log, job) == [0, 1, 22, 23, 5]
        lost, back = (e for e in _read(log, job) if int(e.type) in (22, 23))
        assert lost["DisconnectReason"] == CUT
        assert back["StartdAddr"].startswith("<127.0.0.2:") and "node2" in back["StartdName"]
    finally:
        if node2.process is not None:
            os.kill(node2.process.pid, signal.SIGCONT)
        node2.close()
        if node3 is not None:
            node3.close()


def test_a_job_whose_node_stops_answering_is_not_run_elsewhere_before_its_lease_ends(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node2 = _node(pool, tmp_path, "node2", "127.0.0.2")
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "cut_a.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        _started_on(pool, job, "127.0.0.2")
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")  # free, and would take it
        assert node2.process is not None
        os.kill(node2.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        _waits_for_the_lease(pool, job, starts)
        os.kill(node2.process.pid, signal.SIGCONT)
        # The node ends the job (its lease ran out) and says the claim is gone: then, and
        # only then, the job runs again; never two runs of it alive at once.
        deadline = time.monotonic() + 90
        while len(_lines(starts)) < 2:
            assert len(_runs(tmp_path, "cut_a.sh")) <= 1
            assert time.monotonic() < deadline, "the job did not run again"
            time.sleep(0.05)
        assert _job(pool, job).eval("JobLeaseExpiration") is Value.Undefined
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["ExitCode"] == 0
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        # Started, disconnected, given up on (the node ended it), started again, done.
        log = tmp_path / "work" / "job.log"
        assert _events(log, job) == [0, 1, 22, 24, 4, 1, 5]
        by_type = {int(e.type): e for e in _read(log, job)}
        lost, failed = by_type[22], by_type[24]
        assert lost["StartdAddr"].startswith("<127.0.0.2:") and lost["DisconnectReason"] == CUT
        assert "node2" in lost["StartdName"] and "node2" in failed["StartdName"]
        assert failed["Reason"] == "Claim not found at execution machine"
        # The claim is released after the job's end is recorded: its record then goes.
        claims = pool.config.spool / "claims"
        wait_for(lambda: not list(claims.glob("*.claim")), 30, what="the claim released")
    finally:
        if node2.process is not None:
            os.kill(node2.process.pid, signal.SIGCONT)
        node2.close()
        if node3 is not None:
            node3.close()


def test_the_jobs_of_a_node_that_dies_run_again_elsewhere_once_their_lease_is_over(
    pool: PersonalPool, tmp_path: Path
) -> None:
    # A dead node's ads stay in the collector for three of its update intervals (its
    # ClassAdLifetime), and jobs matched to them meanwhile fail to claim it: short here.
    node2 = ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2", config=_SHORT_ADS)
    node2.start()
    node2.joined()
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "dies_a.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")
        assert node2.process is not None
        # The machine is gone: the node killed, its jobs with it; nothing answers there.
        os.kill(node2.process.pid, signal.SIGKILL)
        node2.process.wait()
        kill_leftovers(family_marker(node2.config.execute_dir))
        assert not _runs(tmp_path, "dies_a.sh")
        _disconnected(pool, job, starts)
        # Nothing says the job is over there: it waits out its lease, then runs on node3.
        wait_for(lambda: len(_lines(starts)) == 2, timeout=LEASE + 60, what="the job to rerun")
        _started_on(pool, job, "127.0.0.3")
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["ExitCode"] == 0
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        log = tmp_path / "work" / "job.log"
        assert _events(log, job) == [0, 1, 22, 24, 4, 1, 5]
        by_type = {int(e.type): e for e in _read(log, job)}
        assert by_type[22]["DisconnectReason"] == CUT
        assert by_type[24]["Reason"] == (
            f"Job disconnected too long: JobLeaseDuration ({LEASE} seconds) expired"
        )
    finally:
        node2.close()
        if node3 is not None:
            node3.close()
