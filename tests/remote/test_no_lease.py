"""A job with no lease (JobLeaseDuration 0) whose node and schedd lose each other: as
HTCondor's, nobody waits for a reconnection. The schedd gives the run up at once (024
"Reconnect is not supported", no 022; then 004) and the node ends the job once its
schedd's keep-alives stop, freeing the slot, long before the claim's lease (60 s here:
ALIVE_INTERVAL 2 * MAX_CLAIM_ALIVES_MISSED 30) would."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode

from .conftest import FAST
from .test_remote_jobs import _history
from .test_restart import (
    _claims,
    _events,
    _job,
    _lines,
    _read,
    _renewal,
    _runs,
    _submit_job,
)

_CLAIM_LEASE = {"MAX_CLAIM_ALIVES_MISSED": 30}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("pool")
    config = {**FAST, **_CLAIM_LEASE}
    with PersonalPool(
        home, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _idle(pool: PersonalPool, job: str) -> bool:
    return _job(pool, job)["JobStatus"] == 1


def test_a_job_with_no_lease_whose_node_is_cut_off_is_given_up_not_reconnected_to(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node = ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2")
    node.start()
    node.joined()
    try:
        job, starts, go = _submit_job(pool, tmp_path, "cut_nolease.sh", lease=0)
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        try:
            # Given up on as soon as the node is found cut off: back to idle; held, so
            # that it runs again once the node is back and has ended the first run.
            wait_for(lambda: _idle(pool, job), timeout=30, what="the run given up")
            status, _, err = run_cli(pool.home, "hold", job)
            assert status == 0, err
        finally:
            os.kill(node.process.pid, signal.SIGCONT)
        wait_for(lambda: not _runs(tmp_path, "cut_nolease.sh"), 30, what="the run ended")
        wait_for(lambda: _claims(node) == 0, timeout=30, what="the slot freed")
        status, _, err = run_cli(pool.home, "release", job)
        assert status == 0, err
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["NumJobStarts"] == 2
        assert "NumJobReconnects" not in done
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        log = tmp_path / "work" / "job.log"
        assert _events(log, job) == [0, 1, 24, 4, 12, 13, 1, 5]
        (failed,) = (e for e in _read(log, job) if int(e.type) == 24)
        assert failed["Reason"] == "Reconnect is not supported"
        assert "node2" in failed["StartdName"]
    finally:
        if node.process is not None:
            os.kill(node.process.pid, signal.SIGCONT)
        node.close()


def test_the_node_ends_a_job_with_no_lease_once_its_schedd_is_cut_off(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node = ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2")
    node.start()
    node.joined()
    assert pool.pid is not None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "cutschedd_nolease.sh", lease=0)
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        # Keep-alives came since (the node knows how often they come once two came):
        # renewed twice.
        for _ in range(2):
            last = _renewal(pool, job)
            wait_for(lambda: _renewal(pool, job) > last, 30, what="a lease renewal")  # noqa: B023
        os.kill(pool.pid, signal.SIGSTOP)  # the schedd is cut off from the node
        try:
            wait_for(lambda: not _runs(tmp_path, "cutschedd_nolease.sh"), 30, what="the kill")
            wait_for(lambda: _claims(node) == 0, timeout=30, what="the slot freed")
        finally:
            os.kill(pool.pid, signal.SIGCONT)
        assert "has no lease (JobLeaseDuration): vacating" in node.log()
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["NumJobStarts"] == 2
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        events = _events(tmp_path / "work" / "job.log", job)
        assert events.count(1) == 2 and 22 not in events and 23 not in events
    finally:
        os.kill(pool.pid, signal.SIGCONT)
        node.close()
