"""Grid matchmaking in the job ad: the match fills GridResource in and keeps the `$$()`
template; a release of the job the site failed puts the template back, to match anew."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue import Identity, JobAction, JobQueue, JobStatus

ALICE = Identity("alice")
GRIDMANAGER = Identity("condor_gridmanager", admin=True)
MATCH = {
    "GridResource": ExprTree('"batch fork"'),
    "Arguments": ExprTree("\"-c 'cd /tmp'\""),
    "MATCH_Scratch": ExprTree('"/tmp"'),
    "MATCH_resource_name": ExprTree('"batch fork"'),
    "NumJobMatches": 1,
    "LastMatchName0": "site-a",
}


@pytest.fixture
def q(tmp_path: Path) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        yield queue


def grid_job() -> ClassAd:
    return ClassAd(
        {
            "JobUniverse": 9,
            "Cmd": "/bin/sh",
            "GridResource": "$$(resource_name)",
            "Matched": False,
            "LastMatchListLength": 1,
        }
    )


def held_back(q: JobQueue, job: str) -> None:
    """What a site's failure leaves: held by the grid manager, then handed back."""
    q.update(job, {"Managed": "External"})
    q.act(JobAction.Hold, job, GRIDMANAGER, "Attempts to submit failed: no such queue")
    q.update(job, {"Managed": "Schedd"})


def test_a_match_fills_the_job_in_and_keeps_its_templates(q: JobQueue) -> None:
    cluster = q.submit(ALICE, grid_job(), [ClassAd({"Arguments": "-c 'cd $$(Scratch)'"})])
    job = f"{cluster}.0"

    assert q.grid_matched(job, MATCH, ["GridResource", "Arguments"])

    ad = q.get(job)
    assert (ad["GridResource"], ad["Arguments"]) == ("batch fork", "-c 'cd /tmp'")
    assert ad["MATCH_TEMPLATE_GridResource"] == "$$(resource_name)"  # from the cluster ad
    assert ad["MATCH_TEMPLATE_Arguments"] == "-c 'cd $$(Scratch)'"  # from the proc's own
    assert ad["Matched"] is True


def test_releasing_a_job_its_site_failed_undoes_the_match(q: JobQueue) -> None:
    cluster = q.submit(ALICE, grid_job(), [ClassAd({"Arguments": "-c 'cd $$(Scratch)'"})])
    job = f"{cluster}.0"
    q.grid_matched(job, MATCH, ["GridResource", "Arguments"])
    held_back(q, job)

    q.act(JobAction.Release, job, ALICE)

    ad = q.get(job)
    assert ad["JobStatus"] == JobStatus.IDLE
    assert (ad["GridResource"], ad["Arguments"]) == ("$$(resource_name)", "-c 'cd $$(Scratch)'")
    assert ad["Matched"] is False
    assert not [name for name in ad if name.upper().startswith("MATCH_")]
    # What the next match is to avoid stays (the manual's Rank = TARGET.Name != LastMatchName0).
    assert (ad["LastMatchName0"], ad["NumJobMatches"]) == ("site-a", 1)
    # Matched again, to another site: the same templates are kept again.
    second = {**MATCH, "GridResource": ExprTree('"batch slurm"'), "LastMatchName0": "site-b"}
    assert q.grid_matched(job, second, ["GridResource", "Arguments"])
    ad = q.get(job)
    assert ad["GridResource"] == "batch slurm"
    assert ad["MATCH_TEMPLATE_GridResource"] == "$$(resource_name)"


def test_a_job_the_grid_manager_still_runs_keeps_its_match(q: JobQueue) -> None:
    cluster = q.submit(ALICE, grid_job())
    job = f"{cluster}.0"
    q.grid_matched(job, MATCH, ["GridResource"])
    q.update(job, {"Managed": "External"})
    q.act(JobAction.Hold, job, ALICE)

    q.act(JobAction.Release, job, ALICE)  # before the grid manager let go of it

    ad = q.get(job)
    assert (ad["GridResource"], ad["Matched"]) == ("batch fork", True)


def test_a_job_held_before_its_match_is_not_matched(q: JobQueue) -> None:
    cluster = q.submit(ALICE, grid_job())
    q.act(JobAction.Hold, f"{cluster}.0", ALICE)
    assert not q.grid_matched(f"{cluster}.0", MATCH, ["GridResource"])
    assert q.get(f"{cluster}.0")["GridResource"] == "$$(resource_name)"
