"""A CE with HTCondor-CE's defaults (`htgrid ce up`): the pilot vocabulary of the jobs
that arrive becomes the batch system's requests, an unroutable job is held, and a job past
its walltime is removed, each with HTCondor-CE's reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import HoldReasonCode, JobStatus
from htgrid.testing import run_cli, wait_for

from ._ce import CE_FORK, SPECIAL, jobs, submit_grid_job, submitter_and_ce
from .test_ce_end_to_end import completed_on


@pytest.mark.timeout(120)
def test_ce_up_writes_htcondor_ces_defaults_and_runs_the_job_router(tmp_path: Path) -> None:
    home = tmp_path / "ce"
    status, _, err = run_cli(tmp_path, "ce", "up", "--home", str(home))
    assert status == 2 and "a new CE needs --batch" in err
    status, out, err = run_cli(
        tmp_path, "ce", "up", "--batch", "slurm", "--port", "0", "--home", str(home)
    )
    try:
        assert status == 0, err
        assert "routes:    Slurm_Cluster (batch slurm)" in out
        assert "submitters use: grid_resource = condor ce@" in out
        conf = (home / "htgrid.conf").read_text()
        assert "JOB_ROUTER_TRANSFORM_Cpus @=jrt" in conf and "HOLD_CLAUSE_2" in conf
        status, out, _ = run_cli(home, "job_router_info", "-config")
        assert status == 0 and "Job router htcondor-ce: 1 routes" in out
        assert "Post-route transform BatchRuntime" in out
        status, health, _ = run_cli(home, "ce", "up", "--home", str(home))
        assert status == 0 and "is already running" in health
        router_log = home / "log" / "JobRouterLog"
        wait_for(
            lambda: router_log.exists() and "routes Slurm_Cluster" in router_log.read_text(),
            timeout=60,
            what="the CE's job router",
        )
    finally:
        status, out, _ = run_cli(tmp_path, "ce", "down", "--home", str(home))
    assert status == 0 and "htgrid CE stopped" in out


@pytest.mark.timeout(300)
def test_the_pilot_vocabulary_becomes_the_batch_jobs_requests(tmp_path: Path) -> None:
    with submitter_and_ce(tmp_path, CE_FORK) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(
            sub,
            ce,
            work,
            extra='+xcount = 2\n+maxMemory = 3000\n+maxWallTime = 30\n+queue = "debug"\n',
        )
        assert completed_on(sub, job)["ExitCode"] == 3
        assert (work / "out.txt").read_text() == "input from the submitter\n"
        (copy,) = [a for a in jobs(ce) if a.get("RoutedFromJobId")]
        assert copy["RoutedBy"] == "htcondor-ce" and copy["RouteName"] == "Local_Fork"
        assert copy["RequestCpus"] == 2 and copy["remote_SMPGranularity"] == 2
        assert copy["RequestMemory"] == 3000 and copy["BatchRuntime"] == 1800
        assert copy["BatchQueue"] == "debug" and copy["CERequirements"] == "CondorCE"
        assert copy["RoutedJob"] is True


@pytest.mark.timeout(300)
def test_unroutable_jobs_are_held_each_with_htcondor_ces_reason(tmp_path: Path) -> None:
    picky = (
        SPECIAL
        # HTCondor-CE waits 30 minutes: a test waits 2 seconds.
        + "HOLD_CLAUSE_2 = ((JobStatus =?= 1 && time() - EnteredCurrentStatus > 2)"
        + " && RoutedToJobId is null && RoutedJob =!= true)\n"
    )
    with submitter_and_ce(tmp_path, picky) as (sub, ce):
        submit_grid_job(sub, ce, tmp_path / "work")
        # A grid job submitted to the CE itself is of no universe the CE takes.
        wrong = tmp_path / "wrong.sub"
        wrong.write_text(
            "universe = grid\ngrid_resource = batch fork\nexecutable = /bin/sleep\narguments = 600\nqueue\n"
        )
        status, _, err = run_cli(ce.home, "submit", str(wrong))
        assert status == 0, err

        def held() -> list[dict[str, object]] | None:
            ads = [
                a
                for a in jobs(ce)
                if a.get("JobStatus") == JobStatus.HELD
                and a.get("HoldReasonCode") != HoldReasonCode.SpoolingInput
            ]
            return ads if len(ads) == 2 else None

        by_universe = {a["JobUniverse"]: a for a in wait_for(held, timeout=120, what="2 held")}
        unrouted, grid = by_universe[5], by_universe[9]
        assert unrouted["HoldReason"] == (
            "HTCondor-CE held job due to no matching routes, route job limit, or route"
            " failure threshold; see 'HTCondor-CE Troubleshooting Guide'"
        )
        assert grid["HoldReason"] == "HTCondor-CE held job due to invalid job universe."
        for ad in (unrouted, grid):
            assert ad["HoldReasonCode"] == HoldReasonCode.SystemPolicy
        assert not [a for a in jobs(ce) if a.get("RoutedFromJobId")]  # nothing was routed


@pytest.mark.timeout(300)
def test_a_job_past_its_walltime_is_removed_with_its_batch_job(tmp_path: Path) -> None:
    site_limit = (
        CE_FORK
        # The site's batch system would let it run 10 minutes: the CE's policy ends it.
        + "JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES = WholeNode Cpus Gpus Memory Queue"
        + " BatchRuntime CERequirements OnExitHold SiteLimit\n"
        + "JOB_ROUTER_TRANSFORM_SiteLimit @=jrt\n  SET BatchRuntime 600\n@jrt\n"
    )
    with submitter_and_ce(tmp_path, site_limit) as (sub, ce):
        work = tmp_path / "work"
        # maxWallTime is in minutes: 0.05 is 3 seconds.
        submit_grid_job(
            sub,
            ce,
            work,
            extra="+maxWallTime = 0.05\n",
            body="echo started > made.txt\nsleep 600\n",
        )

        def removed() -> dict[str, object] | None:
            return next(
                (
                    a
                    for a in jobs(ce, "RoutedFromJobId is undefined")
                    if a.get("JobStatus") == JobStatus.REMOVED
                ),
                None,
            )

        source = wait_for(removed, timeout=180, what="the CE's job removed")
        assert str(source["RemoveReason"]).startswith(
            "CE job removed by SYSTEM_PERIODIC_REMOVE due to job exceeded allowed walltime: 3"
        )
        assert source["NumJobStarts"] == 1 and isinstance(source["JobCurrentStartDate"], int)
        wait_for(
            lambda: all(
                a.get("JobStatus") == JobStatus.REMOVED
                for a in jobs(ce, "RoutedFromJobId isnt undefined")
            ),
            timeout=60,
            what="its routed job removed",
        )
