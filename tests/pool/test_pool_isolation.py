"""One bad vanilla job stops neither the negotiator nor the shadows: it is held with the
reason, another user's job runs to completion on the same execute node, and the daemon
logs the failure once.

The whole pool runs, its queue daemon in this process (the collector and the execute
node are its children, as always), so that a fault can be injected where the negotiator
or a shadow handles one job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import htgrid.negotiator._cycle as cycle_module
import htgrid.schedd._shadow_record as shadow_module
from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.pool import CONFIG_NAME, family_marker, kill_leftovers
from htgrid.queue import HoldReasonCode
from htgrid.schedd import ScheddConfig
from htgrid.startd._config import StartdConfig
from htgrid.submit import SubmitDescription
from htgrid.testing import completed, held, in_process

from .conftest import FAST

POOL = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD")


def run_pool(home: Path, scenario: Callable[[ScheddClient], Awaitable[None]]) -> None:
    home.mkdir(parents=True)
    knobs = {
        **FAST,
        "DAEMON_LIST": ", ".join(POOL),
        "COLLECTOR_HOST": "127.0.0.1:0",
        "QUEUE_FSYNC": "false",
        "JOB_MAX_VACATE_TIME": 2,
        "ALLOW_ROOT_JOBS": "true",  # the tests submit as root
    }
    (home / CONFIG_NAME).write_text("".join(f"{k} = {v}\n" for k, v in knobs.items()))
    config = ScheddConfig.load(home)
    try:
        in_process(config, scenario)
    finally:
        kill_leftovers(family_marker(StartdConfig.load(home).execute_dir))


@pytest.fixture
def where(shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]) -> Path:
    """Where the pool and the jobs' directory are: the jobs (alice's, nobody's) run as
    their owners, who pass through to their sandboxes and write in `work`."""
    base = shared_tmp_factory("isolation")
    (base / "work").mkdir(mode=0o777)
    (base / "work").chmod(0o777)
    return base


def vanilla(schedd: ScheddClient, work: Path, owner: str, extra: str = "") -> str:
    """A vanilla job of `owner` (/bin/true, its files transferred), as submit makes it."""
    text = (
        f"executable = /bin/true\nshould_transfer_files = YES\nrequest_memory = 16\n{extra}queue\n"
    )
    cluster = schedd.reserve_cluster()
    (job,) = SubmitDescription.from_text(text, cwd=str(work)).jobs(
        cluster, owner=owner, qdate=int(time.time())
    )
    job.ad["Owner"] = owner
    schedd.submit(cluster, job.ad, [ClassAd()])
    return f"{cluster}.0"


def logged(caplog: pytest.LogCaptureFixture, job: str, loop: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.getMessage().startswith(f"job {job}: the {loop} failed")
    )


def test_a_job_the_shadow_fails_on_is_held_and_the_next_job_runs(
    where: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shadow_module.apply_updates

    def apply_updates(ad: ClassAd, *groups: Any) -> ClassAd:
        if ad.get("Poison") is True:
            raise TypeError("a bug this job alone meets")
        return real(ad, *groups)

    monkeypatch.setattr(shadow_module, "apply_updates", apply_updates)
    caplog.set_level(logging.INFO)
    work = where / "work"

    async def scenario(schedd: ScheddClient) -> None:
        bad = await asyncio.to_thread(vanilla, schedd, work, "alice", "+Poison = true\n")
        ad = await held(schedd, bad)
        assert ad["HoldReason"] == (
            "The shadow failed while running this job: "
            "internal error (TypeError: a bug this job alone meets)"
        )
        assert ad["HoldReasonCode"] == HoldReasonCode.Unspecified
        # It failed before its activation, so it never started (no 001): held, not left
        # idle to fail again.
        assert ad["NumJobStarts"] == 0
        good = await asyncio.to_thread(vanilla, schedd, work, "nobody")
        await completed(schedd, good)

    run_pool(where / "pool", scenario)
    assert logged(caplog, "1.0", "shadow") == 1


def test_a_job_the_negotiator_cannot_evaluate_is_held_and_the_others_match(
    where: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = cycle_module.requirements_hold

    def requirements_hold(my: ClassAd, target: ClassAd) -> bool:
        if my.get("Poison") is True:
            raise TypeError("a bug this job alone meets")
        return bool(real(my, target))

    monkeypatch.setattr(cycle_module, "requirements_hold", requirements_hold)
    caplog.set_level(logging.INFO)
    work = where / "work"

    async def scenario(schedd: ScheddClient) -> None:
        bad = await asyncio.to_thread(vanilla, schedd, work, "alice", "+Poison = true\n")
        good = await asyncio.to_thread(vanilla, schedd, work, "nobody")
        ad = await held(schedd, bad)
        assert ad["HoldReason"] == (
            "The negotiator could not match this job: "
            "internal error (TypeError: a bug this job alone meets)"
        )
        assert ad["HoldReasonCode"] == HoldReasonCode.Unspecified
        await completed(schedd, good)
        # Later cycles come and match what comes; the held job is not tried again.
        await completed(schedd, await asyncio.to_thread(vanilla, schedd, work, "nobody"))

    run_pool(where / "pool", scenario)
    assert logged(caplog, "1.0", "negotiator") == 1
