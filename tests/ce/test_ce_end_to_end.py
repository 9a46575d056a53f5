"""A CE end to end: a submitter pool sends a grid job over HTCondor-C to a CE pool, whose
job router routes it to the site's batch system (`batch fork`); it runs, and its output
and exit come back to the submitter."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from htgrid.queue import JobQueue, JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import ce_pool, jobs, submit_grid_job, submitter_and_ce


def completed_on(pool: PersonalPool, job: str) -> dict[str, object]:
    """The job's ad once it completed in `pool` (its queue or history)."""
    return wait_for(
        lambda: next(
            (
                ad
                for ad in jobs(pool, f"ClusterId == {job.split('.')[0]}")
                if ad.get("JobStatus") == JobStatus.COMPLETED
            ),
            None,
        ),
        timeout=180,
        what=f"job {job} to complete",
    )


@pytest.mark.timeout(300)
def test_a_grid_job_is_routed_by_the_ce_to_its_batch_system_and_comes_back(
    tmp_path: Path,
) -> None:
    with submitter_and_ce(tmp_path) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work)
        done = completed_on(sub, job)
        assert done["ExitCode"] == 3 and done["NumJobStarts"] == 1  # one run, counted once
        assert (work / "out.txt").read_text() == "input from the submitter\n"
        assert "ran via the CE" in (work / "err.txt").read_text()
        assert (work / "made.txt").read_text() == "made\n"
        # On the CE: the source job came by HTCondor-C, its routed copy ran on fork.
        ce_jobs = jobs(ce)
        routed = [a for a in ce_jobs if a.get("RoutedFromJobId")]
        sources = [a for a in ce_jobs if not a.get("RoutedFromJobId")]
        assert len(routed) == 1 and len(sources) == 1, ce_jobs
        copy, source = routed[0], sources[0]
        assert copy["RouteName"] == "Fork" and copy["RoutedBy"] == "jobrouter"
        assert copy["JobUniverse"] == 9 and copy["GridResource"] == "batch fork"
        assert copy["RoutedBy_Route"] == "Fork" and copy["OriginalCpus"] == source.get(
            "RequestCpus", 1
        )
        assert copy["RoutedFromJobId"] == f"{source['ClusterId']}.{source['ProcId']}"
        assert source["RoutedToJobId"] == f"{copy['ClusterId']}.{copy['ProcId']}"
        assert source["ExitCode"] == 3 and copy["JobStatus"] == JobStatus.COMPLETED
        # The router's place in the change feed, which the CE's schedd keeps for it.
        with JobQueue.open(ce.config.spool, check=False) as queue:
            assert 0 < int(ce.config.jobrouter_feed_file.read_text()) <= queue.last_seq


@pytest.mark.timeout(300)
def test_the_ce_router_killed_mid_flight_adopts_its_jobs_and_routes_each_once(
    tmp_path: Path,
) -> None:
    """kill -9 of the CE's job router while a job runs under it, and again at once: the
    master restarts it, it adopts the routed job (no second copy), and the job ends."""
    with submitter_and_ce(tmp_path) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work, extra='+Remote_Arguments = ""\n')
        wait_for(
            lambda: any(a.get("RoutedFromJobId") for a in jobs(ce)),
            timeout=120,
            what="the routed copy on the CE",
        )
        for _ in range(2):
            pid = wait_for(lambda: ce.child_pid("job_router"), timeout=60, what="the router")
            os.kill(pid, signal.SIGKILL)
            wait_for(
                lambda p=pid: ce.child_pid("job_router") not in (None, p),
                timeout=60,
                what="the router restarted",
            )
        done = completed_on(sub, job)
        assert done["ExitCode"] == 3
        assert len([a for a in jobs(ce) if a.get("RoutedFromJobId")]) == 1


@pytest.mark.timeout(120)
def test_job_router_info_says_which_route_takes_a_job_and_why_the_others_do_not(
    tmp_path: Path,
) -> None:
    ce = ce_pool(tmp_path / "ce")  # its configuration alone: no daemon needed
    ads = tmp_path / "jobs.ads"
    ads.write_text(
        '[ClusterId = 1; ProcId = 0; JobStatus = 1; Owner = "alice"; JobUniverse = 5;'
        ' RequestCpus = 2; queue = "short"]\n'
        '[ClusterId = 2; ProcId = 0; JobStatus = 1; Owner = "alice"; JobUniverse = 12;'
        " RequestCpus = 1]\n"
    )
    status, out, err = run_cli(ce.home, "job_router_info", "-match-jobs", "-jobads", str(ads))
    assert status == 0, err
    first, second = out.split("Job 2.0:")
    assert "route Fork: MATCHES" in first
    assert (
        'route Never: no: REQUIREMENTS false: queue == "never" is false (queue = "short")' in first
    )
    assert (
        "route Fork: no: REQUIREMENTS false: JobUniverse == 5 is false (JobUniverse = 12)" in second
    )
    assert "=> not routed" in second
    status, out, _ = run_cli(ce.home, "job_router_info", "-route-jobs", "-", "-jobads", str(ads))
    assert 'GridResource = "batch fork"' in out and 'RouteName = "Fork"' in out
