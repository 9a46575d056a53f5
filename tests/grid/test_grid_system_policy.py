"""The grid manager applies the pool's SYSTEM_PERIODIC_* to the grid jobs it runs, as
HTCondor's does (the schedd leaves them to it): a CE holds a grid job submitted to it
directly, whatever the moment the grid manager took it."""

from __future__ import annotations

import asyncio

from htgrid.queue import HoldReasonCode, JobStatus

from ._harness import Grid, running, unset, wait_for


def test_a_running_grid_job_is_held_by_the_pools_system_policy(grid: Grid) -> None:
    with (grid.home / "htgrid.conf").open("a") as f:
        f.write(
            "HOLD_CLAUSE_1 = (RoutedBy is null && JobUniverse =!= 5)\n"
            "SYSTEM_PERIODIC_HOLD = (JobStatus == 2) && $(HOLD_CLAUSE_1)\n"
            'SYSTEM_PERIODIC_HOLD_REASON = "HTCondor-CE held job due to invalid job universe."\n'
        )
    (job_id,) = grid.submit("executable = /bin/sleep\narguments = 300")

    async def main() -> None:
        async with running(grid):
            await wait_for("it to run", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.RUNNING)
            await wait_for("it held", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)
            # ... and its batch job cancelled (not left to run on past the test).
            await wait_for("its batch job cancelled", lambda: unset(grid.ad(job_id), "GridJobId"))

    asyncio.run(main())
    ad = grid.ad(job_id)
    assert ad["HoldReason"] == "HTCondor-CE held job due to invalid job universe."
    assert ad["HoldReasonCode"] == HoldReasonCode.SystemPolicy
