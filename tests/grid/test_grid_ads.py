"""The grid manager's Grid ads (condor_status -grid), one per resource with jobs, as
HTCondor's BaseResource publishes them, with the last status poll and its duration."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from htgrid.classad import ClassAd
from htgrid.grid import GridManager
from htgrid.queue import JobStatus

from ._harness import FAST, Grid, wait_for


def test_each_resource_with_jobs_is_published_with_its_last_poll(grid: Grid) -> None:
    (job,) = grid.submit("executable = /bin/sleep\narguments = 30\ntransfer_executable = false")
    sent: list[list[ClassAd]] = []

    async def publish(ads: Sequence[ClassAd]) -> None:
        sent.append(list(ads))

    async def main() -> None:
        config = dataclasses.replace(FAST, collector_update_interval=0.2)
        manager = GridManager(grid.home, config=config, publish=publish)
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop))
        try:
            await wait_for("it to run", lambda: grid.ad(job)["JobStatus"] == JobStatus.RUNNING)
            await wait_for(
                "an ad with its last poll",
                lambda: sent and "LastStatusPoll" in sent[-1][0],
                timeout=30,
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    asyncio.run(main())
    (ad,) = sent[-1]
    assert (ad["MyType"], ad["Name"]) == ("Grid", "batch fork")
    assert (ad["NumJobs"], ad["RunningJobs"], ad["IdleJobs"]) == (1, 1, 0)
    assert ad["GridResourceState"] == "up" and "GridResourceUnavailableTime" not in ad
    assert ad["LastStatusPollDuration"] >= 0 and ad["StatusPolls"] >= 1
    assert "/" not in str(ad.get("HashName", "")), "no file path of a credential in the ad"
