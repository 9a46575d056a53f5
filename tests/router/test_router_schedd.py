"""The schedd leaves a job the job router manages (Managed = "External") to the router:
it neither matches nor runs it while idle, and a restart does not send it back to idle
when it mirrors a routed copy that runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.net import ScheddClient
from htgrid.queue import JobQueue, JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "NUM_CPUS": 4,
    "UPDATE_INTERVAL": 10,
    "SCHEDD_INTERVAL": 1,
}
DAEMONS = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD")


def submit(pool: PersonalPool, work: Path, extra: str = "") -> str:
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sub").write_text(
        f"executable = /bin/true\ninitialdir = {work}\nrequest_memory = 16\n{extra}queue\n"
    )
    status, out, err = run_cli(pool.home, "submit", str(work / "job.sub"))
    assert status == 0, err
    return f"{out.strip().rsplit(' ', 1)[-1].rstrip('.')}.0"


def ran(schedd: ScheddClient, pool: PersonalPool, work: Path) -> None:
    """A job of the pool's own, submitted now, ran and completed: a negotiation (and,
    after a restart, the schedd's recovery) has come and gone."""
    job = submit(pool, work)
    cluster = job.split(".")[0]
    wait_for(
        lambda: schedd.history(f"ClusterId == {cluster}"), timeout=120, what=f"job {job} to run"
    )


@pytest.mark.timeout(300)
def test_the_schedd_neither_matches_nor_idles_a_job_the_router_manages(tmp_path: Path) -> None:
    pool = PersonalPool(tmp_path / "pool", kill_grace=2, fsync=False, daemons=DAEMONS, config=FAST)
    with pool:
        managed = submit(pool, tmp_path / "managed", "hold = true\n")
        with JobQueue.open(pool.config.spool, check=False) as q:
            q.update(managed, {"Managed": "External", "ManagedManager": "jobrouter"})
        status, _, err = run_cli(pool.home, "release", managed)
        assert status == 0, err
        with pool.client() as schedd:
            ran(schedd, pool, tmp_path / "first")
            ad = schedd.get(managed)
            assert ad["JobStatus"] == JobStatus.IDLE
            assert "LastMatchTime" not in ad and "JobStartDate" not in ad
            # The router mirrors its routed copy, which runs.
            with JobQueue.open(pool.config.spool, check=False) as q:
                q.job_started(managed)
            starts = schedd.get(managed)["NumJobStarts"]
        pool.stop()
        pool.start()
        with pool.client() as schedd:
            ran(schedd, pool, tmp_path / "second")
            ad = schedd.get(managed)
            assert ad["JobStatus"] == JobStatus.RUNNING and ad["NumJobStarts"] == starts
            assert "LastMatchTime" not in ad and ad["Managed"] == "External"
