"""What the condor grid type asks of its GAHP for many jobs: how many requests go out at
once (fake GAHP, real remote queue)."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.grid.condor._resource import CondorResource
from htgrid.queue import JobStatus

from ._harness import Grid, wait_for
from .test_condor_paths import RESOURCE, Remote, _remote_of, _submit, run, running


@pytest.fixture
def remote_b(tmp_path: Path) -> Remote:
    r = Remote(tmp_path / "remote")
    yield r
    r.queue.close()


def test_requests_are_not_held_back_at_max_pending_requests(grid: Grid, remote_b: Remote) -> None:
    """The condor GAHP batches what waits: the resource lets more than
    GRIDMANAGER_MAX_PENDING_REQUESTS reach it, so that 12 submits can go as one batch."""
    jobs = _submit(grid, 12)

    async def main() -> None:
        async with running(grid, remote_b, max_pending_requests=2) as manager:
            for job in jobs:
                await wait_for(
                    "the stage in", lambda j=job: (r := _remote_of(grid, j)) and remote_b.idle(r)
                )
            resource = manager.resources[RESOURCE]
            assert isinstance(resource, CondorResource)
            assert resource.stats.max_in_flight > 2

    run(main())
    assert len(remote_b.jobs()) == 12  # each job once


def test_a_poll_reads_again_only_the_ads_that_changed(grid: Grid, remote_b: Remote) -> None:
    """Each status answer carries every job's whole ad: the ads of the jobs that did not
    change since the last poll (all but ServerTime the same) are not read again, and a
    job that changed is still seen to."""
    jobs = _submit(grid, 3)

    async def main() -> None:
        async with running(grid, remote_b) as manager:
            ids = []
            for job in jobs:
                await wait_for(
                    "the stage in", lambda j=job: (r := _remote_of(grid, j)) and remote_b.idle(r)
                )
                ids.append(_remote_of(grid, job))
            resource = manager.resources[RESOURCE]
            assert isinstance(resource, CondorResource)
            await wait_for("a poll of the three idle", lambda: resource.status_ads_reused >= 3)
            assert ids[0] is not None
            remote_b.run(ids[0], "done\n", 0)
            await wait_for("the first one back", lambda: not grid.in_queue(jobs[0]))
            reused = resource.status_ads_reused
            await wait_for("another poll", lambda: resource.status_ads_reused >= reused + 2)

    run(main())
    assert grid.ad(jobs[0])["JobStatus"] == JobStatus.COMPLETED
    assert (grid.work / "out.0.txt").read_text() == "done\n"
    assert [grid.ad(job)["JobStatus"] for job in jobs[1:]] == [JobStatus.IDLE] * 2
