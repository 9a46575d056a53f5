"""The grid manager against a real Slurm (`batch slurm`): skipped without one, except in CI.

CI brings Slurm up with `.ci/slurm-up.sh`; there a missing Slurm is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Awaitable

import pytest

from htgrid.grid.batch import BatchJobId
from htgrid.queue import JobAction, JobStatus

from ._harness import ROOT, Grid, in_slurm, running, wait_for

# The real batch systems are one host's, with a CPU or two: their tests never run side by
# side under pytest -n (tests/README.md).
pytestmark = pytest.mark.xdist_group("batch-systems")


def _slurm_up() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and any(
        state.strip("*~#") in ("idle", "mixed", "allocated") for state in done.stdout.split()
    )


@pytest.fixture(autouse=True, scope="module")
def _slurm_required() -> None:
    # Probed in a fixture, not at import: pytest-xdist's workers must collect the same
    # tests, and a probe that failed on one worker only made the whole run error.
    if not _slurm_up():
        if os.environ.get("CI") == "true":
            pytest.fail("Slurm is not up (CI runs .ci/slurm-up.sh first)", pytrace=False)
        pytest.skip("no Slurm here")


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.mark.timeout(300)
def test_jobs_run_in_slurm_and_rm_cancels_there(grid: Grid) -> None:
    ids = grid.submit(
        "executable = /bin/sh\n"
        "arguments = \"-c 'echo from slurm $(Process); exit $(Process)'\"\n"
        "output = out.$(Process)\nerror = err.$(Process)\nlog = job.log",
        count=2,
        resource="batch slurm",
    )
    (sleeper,) = grid.submit(
        "executable = /bin/sleep\narguments = 600\nlog = job.log", resource="batch slurm"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the jobs to finish", lambda: not any(map(grid.in_queue, ids)), timeout=240
            )
            await wait_for("the sleeper to run", lambda: grid.ad(sleeper)["JobStatus"] == 2)
            grid_id = BatchJobId.parse(grid.ad(sleeper)["GridJobId"])
            assert grid_id is not None and grid_id.blah_id is not None
            native = grid_id.blah_id.rsplit("/", 1)[-1]
            assert in_slurm(native)
            grid.queue.act(JobAction.Remove, sleeper, ROOT)
            await wait_for("the sleeper to leave", lambda: not grid.in_queue(sleeper), 120)
            await wait_for("Slurm to drop it", lambda: not in_slurm(native), 60)

    run(main())
    for job_id in ids:
        ad = grid.ad(job_id)
        assert ad["JobStatus"] == JobStatus.COMPLETED
        assert ad["ExitCode"] == job_id.proc
        assert ad["GridJobId"].startswith("batch slurm htgrid_")
        assert (grid.work / f"out.{job_id.proc}").read_text() == f"from slurm {job_id.proc}\n"
    assert grid.log().count("027 (") == 3
