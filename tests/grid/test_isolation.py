"""A grid job the grid manager fails on is held with the reason, logged once; the other
jobs run to completion and the grid manager goes on (a restart does not crash on it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

import htgrid.grid._policy as policy_module
from htgrid.classad import ClassAd
from htgrid.grid import GRID_TYPES, GridManager
from htgrid.queue import HoldReasonCode, JobAction, JobId, JobStatus

from ._harness import FAST, ROOT, Grid, wait_for

OVERFLOW = "internal error (OverflowError: cannot convert float infinity to integer)"


@asynccontextmanager
async def manager(grid: Grid, **grid_types: Any) -> AsyncIterator[GridManager]:
    gm = GridManager(grid.home, config=FAST, grid_types={**GRID_TYPES, **grid_types})
    stop = asyncio.Event()
    task = asyncio.create_task(gm.run(stop))
    await wait_for("the start-up scan", lambda: gm.ready.is_set() or task.done())
    if task.done():
        task.result()
    try:
        yield gm
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def failures_logged(caplog: pytest.LogCaptureFixture, job: JobId) -> int:
    return sum(
        1
        for r in caplog.records
        if r.getMessage().startswith(f"job {job}: the grid manager failed on it")
    )


def done(grid: Grid, job: JobId) -> bool:
    return not grid.in_queue(job) and grid.ad(job)["JobStatus"] == JobStatus.COMPLETED


def test_a_grid_job_with_a_value_it_cannot_use_is_held_and_the_others_run(
    grid: Grid, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    (bad,) = grid.submit("executable = /bin/true\nrequest_gpus = 1")
    grid.queue.edit([bad], {"RequestGPUs": "1e999"}, ROOT)  # a real trigger
    good = grid.submit("executable = /bin/true", 2)

    async def main() -> None:
        async with manager(grid):
            await wait_for("the others", lambda: all(done(grid, j) for j in good))
            await wait_for("the hold", lambda: grid.ad(bad)["JobStatus"] == JobStatus.HELD)
            # Picked up again held: its submission is cleared and it is handed back.
            await wait_for("the hand-back", lambda: grid.ad(bad).get("Managed") == "Schedd")

    asyncio.run(main())
    ad = grid.ad(bad)
    assert ad["HoldReason"].startswith("The grid manager failed on this job (in state ")
    assert ad["HoldReason"].endswith(f"): {OVERFLOW}")
    assert ad["HoldReasonCode"] == HoldReasonCode.Unspecified
    assert failures_logged(caplog, bad) == 1


def test_a_job_that_cannot_be_adopted_is_held_and_a_restart_does_not_crash(
    grid: Grid, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    batch = GRID_TYPES["batch"]

    def new_job(job_id: JobId, ad: ClassAd, resource: Any, services: Any) -> Any:
        if ad.get("Poison") is True:
            raise KeyError("a bug this job alone meets")
        return batch.new_job(job_id, ad, resource, services)

    poisoned = replace(batch, new_job=new_job)
    (bad,) = grid.submit("executable = /bin/true\n+Poison = true")
    (good,) = grid.submit("executable = /bin/true")

    async def main() -> None:
        async with manager(grid, batch=poisoned):
            await wait_for("the good job", lambda: done(grid, good))
            await wait_for("the hold", lambda: grid.ad(bad)["JobStatus"] == JobStatus.HELD)
        # Found at the start-up scan of the next grid manager (as it would be after a
        # crash, held or not): it starts, and goes on with the next job.
        grid.queue.act(JobAction.Release, bad, ROOT)
        (later,) = grid.submit("executable = /bin/true")
        async with manager(grid, batch=poisoned):
            await wait_for("the next job", lambda: done(grid, later))
            await wait_for("held again", lambda: grid.ad(bad)["JobStatus"] == JobStatus.HELD)

    asyncio.run(main())
    ad = grid.ad(bad)
    assert ad["HoldReason"] == (
        "The grid manager failed on this job (adopting it): "
        "internal error (KeyError: 'a bug this job alone meets')"
    )
    assert ad["NumHolds"] == 2


def test_a_periodic_policy_the_grid_manager_cannot_evaluate_holds_its_job_only(
    grid: Grid, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = policy_module.periodic_decision

    def decision(ad: ClassAd, now: int) -> Any:
        if ad.get("Poison") is True:
            raise ValueError("a bug this job alone meets")
        return real(ad, now)

    monkeypatch.setattr(policy_module, "periodic_decision", decision)
    caplog.set_level(logging.INFO)
    (bad,) = grid.submit("executable = /bin/sleep\narguments = 300\n+Poison = true")
    (good,) = grid.submit("executable = /bin/true\nperiodic_hold = false")

    async def main() -> None:
        async with manager(grid):
            await wait_for("the hold", lambda: grid.ad(bad)["JobStatus"] == JobStatus.HELD)
            await wait_for("the hand-back", lambda: grid.ad(bad).get("Managed") == "Schedd")
            await wait_for("the good job", lambda: done(grid, good))

    asyncio.run(main())
    ad = grid.ad(bad)
    assert ad["HoldReason"] == (
        "The grid manager failed on this job (evaluating its periodic policy): "
        "internal error (ValueError: a bug this job alone meets)"
    )
    assert ad["HoldReasonCode"] == HoldReasonCode.JobPolicyUndefined
    assert failures_logged(caplog, bad) == 1
