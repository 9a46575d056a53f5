"""CLAIM_WORKLIFE through the whole pool: a claim past it takes no further job, and the
schedd's next job runs on a new claim of its own match, neither held nor run twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.testing import wait_for

from .conftest import events, submit, whole_pool

JOBS = 3


@pytest.mark.parametrize(("worklife", "claims"), [(0, JOBS), (None, 1)])
def test_claim_worklife_bounds_how_many_jobs_a_claim_runs(
    tmp_path: Path, worklife: int | None, claims: int
) -> None:
    """0: one job per claim (each on a dynamic slot of its own); the default (1200 s):
    short jobs follow each other on one claim."""
    knobs: dict[str, object] = {"NUM_CPUS": 1}
    if worklife is not None:
        knobs["CLAIM_WORKLIFE"] = worklife
    with whole_pool(tmp_path / "pool", **knobs) as pool, pool.client() as schedd:
        work = tmp_path / "work"
        cluster = submit(
            pool.home,
            work,
            "executable = /bin/true\nshould_transfer_files = YES\nlog = jobs.log\n"
            f"request_memory = 16\nqueue {JOBS}\n",
        )

        def history() -> list[object]:
            return list(schedd.history(f"ClusterId == {cluster}"))

        wait_for(lambda: len(history()) == JOBS, timeout=90, interval=0.2, what="the jobs")
        done = schedd.history(f"ClusterId == {cluster}")
        assert {ad["JobStatus"] for ad in done} == {4}
        assert {ad["NumJobStarts"] for ad in done} == {1}
        assert len({ad["PublicClaimId"] for ad in done}) == claims
        assert len({ad["RemoteHost"] for ad in done}) == claims
        # Each job ran once, straight through: no eviction, no hold, no second start.
        logged = events(work / "jobs.log")
        assert logged == {f"{cluster}.{p}": [0, 1, 5] for p in range(JOBS)}, logged
        sched_log = (pool.home / "log" / "SchedLog").read_text()
        assert "refused" not in sched_log and "held" not in sched_log
