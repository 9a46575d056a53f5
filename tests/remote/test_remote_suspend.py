"""A node of another host suspends and continues a job by its policy: the schedd, which
follows that node's claims with one node-wide poll, records each as it happens (JobStatus
7, then 2; 010 and 011 in the job's log), not only once the job has ended."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import htcondor2
import pytest

from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode
from htgrid.testing.procs import group_states, group_stopped

from .test_remote_jobs import _history, _script, _submit


def _status(pool: PersonalPool, cluster: int) -> object:
    with pool.client() as schedd:
        ads = schedd.query(f"ClusterId == {cluster}", ["JobStatus"])
    return ads[0]["JobStatus"] if ads else None


def _switch(node: ExecuteNode, on: bool) -> None:
    """Set the node's Suspendme and reconfig it (SIGHUP, as `htgrid reconfig` does)."""
    conf = node.home / "htgrid.conf"
    lines = [line for line in conf.read_text().splitlines() if not line.startswith("Suspendme")]
    conf.write_text("\n".join([*lines, f"Suspendme = {on}"]) + "\n")
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGHUP)


@pytest.mark.timeout(120)
def test_a_remote_nodes_suspension_reaches_the_schedd_as_it_happens(
    pool: PersonalPool, tmp_path: Path
) -> None:
    policy = {
        "STARTD_ATTRS": "Suspendme",
        "Suspendme": "false",
        "WANT_SUSPEND": "true",
        "SUSPEND": "MY.Suspendme",
        "CONTINUE": "MY.Suspendme =!= true",
    }
    work = tmp_path / "work"
    pid_file, release = tmp_path / "pid", tmp_path / "release"
    _script(
        work / "job.sh", f"echo $$ > {pid_file}\nwhile [ ! -e {release} ]; do sleep 0.1; done\n"
    )
    with ExecuteNode(pool, tmp_path / "node9", "node9", "127.0.0.9", config=policy) as node:
        node.joined()
        cluster = _submit(
            pool,
            work,
            "executable = job.sh\nlog = job.log\nshould_transfer_files = YES\n"
            "request_memory = 16\nqueue\n",
        )
        text = wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=60, interval=0.1
        )
        pid = int(text)
        _switch(node, True)
        wait_for(lambda: group_stopped(pid), timeout=30, interval=0.1, what="the job stopped")
        wait_for(lambda: _status(pool, cluster) == 7, timeout=30, interval=0.1, what="7")
        _switch(node, False)
        wait_for(lambda: _status(pool, cluster) == 2, timeout=30, interval=0.1, what="2")
        assert "T" not in group_states(pid)
        release.touch()
        done = wait_for(lambda: _history(pool, cluster), timeout=60, interval=0.2)
    assert done["JobStatus"] == 4 and done["TotalSuspensions"] == 1
    numbers = [int(e.type) for e in htcondor2.JobEventLog(str(work / "job.log")).events(0)]
    assert numbers == [0, 1, 10, 11, 5]
