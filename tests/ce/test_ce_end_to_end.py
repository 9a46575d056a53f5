"""A CE end to end: a submitter pool sends a grid job over HTCondor-C to a CE pool, whose
job router routes it to the site's batch system (`batch fork`); it runs, and its output
and exit come back to the submitter."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import wait_for

from ._ce import jobs, submit_grid_job, submitter_and_ce


@pytest.mark.timeout(300)
def test_a_grid_job_is_routed_by_the_ce_to_its_batch_system_and_comes_back(
    tmp_path: Path,
) -> None:
    with submitter_and_ce(tmp_path) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work)
        done = wait_for(
            lambda: next(
                (
                    a
                    for a in jobs(sub, f"ClusterId == {job.split('.')[0]}")
                    if a.get("JobStatus") == JobStatus.COMPLETED
                ),
                None,
            ),
            timeout=180,
            what="the job to complete on the submitter",
        )
        assert done["ExitCode"] == 3
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
