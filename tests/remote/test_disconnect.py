"""An execute node of another host that stops answering while the schedd runs (a network
cut, a stopped machine): its job may still run there, so the schedd never runs it
anywhere else until the node has ended it or the claim's lease has surely run out there.
Meanwhile the job stays Running, disconnected (022); then it goes back to idle (024,
004) and runs once more."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import htcondor2

from htgrid.classad import Value
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _history
from .test_restart import _events, _job, _lines, _node, _runs, _submit_job, _waits_for_the_lease


def test_a_job_whose_node_stops_answering_is_not_run_elsewhere_before_its_lease_ends(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node2 = _node(pool, tmp_path, "node2", "127.0.0.2")
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "cut_a.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        assert _job(pool, job)["StartdIpAddr"].startswith("<127.0.0.2:")
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")  # free, and would take it
        assert node2.process is not None
        os.kill(node2.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        _waits_for_the_lease(pool, job, starts)
        os.kill(node2.process.pid, signal.SIGCONT)
        # The node ends the job (its lease ran out, or the schedd asks it): then, and
        # only then, the job runs again; never two runs of it alive at once.
        deadline = time.monotonic() + 90
        while len(_lines(starts)) < 2:
            assert len(_runs("cut_a.sh")) <= 1
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
        by_type = {int(e.type): e for e in htcondor2.JobEventLog(str(log)).events(stop_after=0)}
        lost, failed = by_type[22], by_type[24]
        assert lost["StartdAddr"].startswith("<127.0.0.2:") and lost["DisconnectReason"]
        assert "node2" in lost["StartdName"] and "node2" in failed["StartdName"]
        assert failed["Reason"] == "The execute node has ended the job and released its claim"
        assert not list((pool.config.spool / "claims").glob("*.claim"))
    finally:
        if node2.process is not None:
            os.kill(node2.process.pid, signal.SIGCONT)
        node2.close()
        if node3 is not None:
            node3.close()
