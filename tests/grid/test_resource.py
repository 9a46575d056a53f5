"""Resources: down and up (events 026 and 025), and the throttles, with real processes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from htgrid.grid import explain_grid_job
from htgrid.queue import JobStatus

from ._harness import Grid, ext_gahp, running, unset, wait_for, with_gahp


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def _events(log: str) -> list[str]:
    """The event numbers of a user log, in order, with the job: '026 (001.000.000)'."""
    return [line[:17] for line in log.splitlines() if line[:3].isdigit()]


def test_jobs_wait_while_their_resource_is_down(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    (control / "ping-down").touch()
    ids = grid.submit("executable = /bin/true\nlog = job.log", count=2, resource="batch flaky")
    config = with_gahp(ext_gahp(control=control), max_unknown_polls=2, max_submit_attempts=1)

    async def main() -> None:
        async with running(grid, config) as manager:
            resource = lambda: manager.resources["batch flaky"]  # noqa: E731
            await wait_for("026 for both jobs", lambda: grid.log().count("026 (") == 2)
            for job_id in ids:
                ad = grid.ad(job_id)
                assert isinstance(ad["GridResourceUnavailableTime"], int)
                assert explain_grid_job(ad)[1].startswith(
                    "Resource 'batch flaky' has been down since "
                )
            await wait_for("more pings", lambda: resource().stats.pings >= 4)
            # Still waiting, not failed: idle, no submission.
            for job_id in ids:
                assert grid.ad(job_id)["JobStatus"] == JobStatus.IDLE
                assert "GridJobId" not in grid.ad(job_id)
            assert resource().stats.submits == 0
            assert "flaky: the batch system does not answer" in resource().down_reason
            (control / "ping-down").unlink()
            await wait_for("025 for both jobs", lambda: grid.log().count("025 (") == 2)
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))

    run(main())
    for job_id in ids:
        ad = grid.ad(job_id)
        assert ad["JobStatus"] == JobStatus.COMPLETED
        assert unset(ad, "GridResourceUnavailableTime")
    kinds = [event[:3] for event in _events(grid.log())]
    assert kinds == ["026", "026", "025", "025", "027", "027"]
    assert "    GridResource: batch flaky\n" in grid.log()


def test_a_resource_that_stops_answering_is_found_down(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    (job_id,) = grid.submit(
        "executable = /bin/sleep\narguments = 2\nlog = job.log", resource="batch flaky"
    )
    config = with_gahp(ext_gahp(control=control), max_unknown_polls=2)

    async def main() -> None:
        async with running(grid, config):
            await wait_for("the job to run", lambda: grid.ad(job_id)["JobStatus"] == 2)
            (control / "ping-down").touch()
            (control / "status-down").touch()  # a failed poll makes the manager ping
            await wait_for("026", lambda: "026 (" in grid.log())
            await asyncio.sleep(1.5)  # several failed polls: the job is not failed
            assert grid.ad(job_id)["JobStatus"] == JobStatus.RUNNING
            (control / "ping-down").unlink()
            (control / "status-down").unlink()
            await wait_for("025", lambda: "025 (" in grid.log())
            await wait_for("the job to finish", lambda: not grid.in_queue(job_id))

    run(main())
    assert grid.ad(job_id)["ExitCode"] == 0
    assert [event[:3] for event in _events(grid.log())] == ["027", "026", "025"]
