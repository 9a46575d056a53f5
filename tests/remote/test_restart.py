"""A schedd killed (kill -9) while a job runs on an execute node of another host: at its
restart, the job never runs in two places. It first has the node end the old claim (the
job killed) and only then runs the job again; a node it cannot reach keeps the job from
running again until the lease of the old claim has surely run out there."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import htcondor2
import pytest

from htgrid.classad import ClassAd, Value
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode

from .conftest import FAST
from .test_remote_jobs import _history, _script, _submit

# The job counts its starts; it takes a lock on start, and a start that finds it taken
# (another run of the same job alive) says so: the job's own witness of running twice.
_JOB = """exec 9>>{lock}
if flock -n 9; then echo "start $$" >> {starts}; else echo "OVERLAP $$" >> {starts}; fi
while [ ! -e {go} ]; do sleep 0.1; done
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture()
def pool(tmp_path: Path) -> Iterator[PersonalPool]:
    # A fixed collector port: the nodes find the pool again after its restart.
    config = {**FAST, "COLLECTOR_HOST": f"127.0.0.1:{_free_port()}"}
    with PersonalPool(
        tmp_path / "pool", kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _node(pool: PersonalPool, tmp_path: Path, name: str, address: str) -> ExecuteNode:
    node = ExecuteNode(pool, tmp_path / name, name, address)
    node.start()
    node.joined()
    return node


def _runs(name: str) -> set[int]:
    """The runs of the job's script (by its name: unique to each test) now alive: the
    sessions of its processes (each run is a session of its own; a shell's child, forked
    and not yet exec'd, shows the script's command line too)."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if name.encode() in f.read():
                        found.add(os.getsid(int(entry.name)))
            except OSError:
                continue
    return found


def _job(pool: PersonalPool, job: str) -> ClassAd:
    with pool.client() as schedd:
        return schedd.get(job)


def _events(log: Path, job: str) -> list[int]:
    return [
        int(event.type)
        for event in htcondor2.JobEventLog(str(log)).events(stop_after=0)
        if f"{event.cluster}.{event.proc}" == job
    ]


def _submit_job(pool: PersonalPool, tmp_path: Path, name: str) -> tuple[str, Path, Path]:
    work = tmp_path / "work"
    starts, go = work / "starts", work / "go"
    body = _JOB.format(lock=work / "lock", starts=starts, go=go)
    _script(work / name, body)
    cluster = _submit(
        pool,
        work,
        f"executable = {name}\nshould_transfer_files = YES\nlog = job.log\n"
        "request_memory = 16\njob_max_vacate_time = 1\nqueue\n",
    )
    return f"{cluster}.0", starts, go


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def _waits_for_the_lease(pool: PersonalPool, job: str, starts: Path) -> None:
    """The schedd finds the job's node unreachable and keeps the job Running, disconnected;
    -better-analyze says why; and, free nodes notwithstanding, it is not run again while
    the old claim may still run it, until shortly before the lease's end (a stopped node
    cannot enforce it: the test lets it go on by then)."""
    deadline = time.monotonic() + 90
    while not (ad := _job(pool, job)).get("JobLeaseExpiration"):
        assert ad["JobStatus"] == 2 and len(_lines(starts)) == 1
        assert time.monotonic() < deadline, "the schedd did not find the node unreachable"
        time.sleep(0.2)
    assert ad["JobStatus"] == 2 and isinstance(ad["JobDisconnectedDate"], int)
    status, out, err = run_cli(pool.home, "q", "-better-analyze", job)
    assert status == 0, err
    assert "could not be reached" in out and "is not matched again until the lease" in out
    while time.time() < ad["JobLeaseExpiration"] - 4:
        assert _job(pool, job)["JobStatus"] == 2
        assert len(_lines(starts)) == 1
        time.sleep(0.2)


def test_after_kill_9_the_job_is_ended_on_its_node_before_it_runs_again(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node = _node(pool, tmp_path, "node2", "127.0.0.2")
    try:
        job, starts, go = _submit_job(pool, tmp_path, "once_a.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        (first,) = _runs("once_a.sh")
        pool.kill()
        assert first in _runs("once_a.sh")  # the job outlives the schedd on its node
        pool.start()
        # Until it runs again, and after: never two runs of it at once on the node.
        deadline = time.monotonic() + 90
        while len(_lines(starts)) < 2:
            assert len(_runs("once_a.sh")) <= 1
            assert time.monotonic() < deadline, "the job did not run again"
            time.sleep(0.05)
        assert first not in _runs("once_a.sh")
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        assert _job(pool, job)["NumJobStarts"] == 2
        go.touch()
        ad = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        # Started, evicted (its claim ended at the restart), started again, terminated.
        assert _events(tmp_path / "work" / "job.log", job) == [0, 1, 4, 1, 5]
        # The schedd's record of the claim is gone with the claim.
        assert not list((pool.config.spool / "claims").glob("*.claim"))
    finally:
        node.close()


# "stop": a clean shutdown, whose vacate request the stopped node never answers; the job
# may still run there, so it is left Running with its claim recorded, as after kill -9.
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_job_whose_node_cannot_be_reached_waits_for_the_lease_of_its_claim(
    pool: PersonalPool, tmp_path: Path, how: str
) -> None:
    node2 = _node(pool, tmp_path, "node2", "127.0.0.2")
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "once_b.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        assert _job(pool, job)["StartdIpAddr"].startswith("<127.0.0.2:")
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")  # free, and would take it
        assert node2.process is not None
        os.kill(node2.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        if how == "kill":
            pool.kill()
        else:
            pool.stop()
        pool.start()
        _waits_for_the_lease(pool, job, starts)
        # The node comes back: its lease ran out, it kills the job and says the claim is
        # gone; then, and only then, the job runs again.
        os.kill(node2.process.pid, signal.SIGCONT)
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        ad = _job(pool, job)
        assert ad.eval("JobLeaseExpiration") is Value.Undefined  # no longer waiting
        go.touch()
        wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert _events(tmp_path / "work" / "job.log", job) == [0, 1, 22, 24, 4, 1, 5]
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
    finally:
        if node2.process is not None:
            os.kill(node2.process.pid, signal.SIGCONT)
        node2.close()
        if node3 is not None:
            node3.close()
