"""The daemon in this process, on an injected clock: time moves when the test says so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import htcondor2

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.queue import JobStatus
from htgrid.schedd import ScheddConfig
from htgrid.testing import in_process, until

START = 1_800_000_000


class Clock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = float(START)

    def __call__(self) -> float:
        return self.now


def _run(tmp_path: Path, clock: Clock, scenario: Callable[[ScheddClient], Awaitable[None]]) -> None:
    # The queue alone: the clock is the queue's business, and a whole pool would put a
    # collector on the default port 9618 inside the test process.
    config = ScheddConfig(
        tmp_path / "pool",
        periodic_interval=0.1,
        kill_grace=1,
        fsync=False,
        daemons=frozenset({"MASTER", "SCHEDD"}),
        allow_root_jobs=True,  # the test submits as root
    )
    in_process(config, scenario, clock=clock)


def _submit(schedd: ScheddClient, ad: ClassAd) -> str:
    cluster = schedd.reserve_cluster()
    schedd.submit(cluster, ad, [ClassAd()])
    return f"{cluster}.0"


def test_periodic_policies_see_the_injected_time(tmp_path: Path) -> None:
    clock = Clock()

    async def scenario(schedd: ScheddClient) -> None:
        job = await asyncio.to_thread(
            _submit,
            schedd,
            ClassAd(
                '[Cmd = "/bin/true"; JobUniverse = 5; Iwd = "/";'
                " PeriodicHold = CurrentTime - QDate > 3600;"
                ' PeriodicHoldReason = "waited an hour"]'
            ),
        )
        ad = await asyncio.to_thread(schedd.get, job)
        assert ad["QDate"] == START
        # A negative answer needs time to pass: a few periodic passes, and no hold yet.
        await asyncio.sleep(0.3)
        assert (await asyncio.to_thread(schedd.get, job))["JobStatus"] == JobStatus.IDLE
        clock.now += 7200
        ad = await until(lambda: (a := schedd.get(job))["JobStatus"] == JobStatus.HELD and a)
        assert ad["HoldReason"] == "waited an hour"
        assert ad["EnteredCurrentStatus"] == START + 7200

    _run(tmp_path, clock, scenario)


def test_run_time_and_event_times_come_from_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    gate = tmp_path / "gate"
    log = tmp_path / "job.log"

    async def scenario(schedd: ScheddClient) -> None:
        ad = ClassAd(
            {
                "Cmd": "/bin/sh",
                "Arguments": f"-c 'while [ ! -e {gate} ]; do sleep 0.02; done'",
                "JobUniverse": 12,
                "Iwd": str(tmp_path),
                "UserLog": str(log),
            }
        )
        job = await asyncio.to_thread(_submit, schedd, ad)
        await until(lambda: schedd.get(job)["JobStatus"] == JobStatus.RUNNING)
        clock.now += 500
        gate.touch()
        cluster = job.split(".")[0]
        (done,) = await until(lambda: schedd.history(f"ClusterId == {cluster}"))
        assert done["RemoteWallClockTime"] == 500.0
        assert done["CompletionDate"] == START + 500
        assert done["JobStartDate"] == START

    _run(tmp_path, clock, scenario)
    # The daemon has stopped, so every event is written; each has its change's time.
    times = [
        (int(e.type), e["EventTime"]) for e in htcondor2.JobEventLog(str(log)).events(stop_after=0)
    ]
    assert times == [(0, _local(START)), (1, _local(START)), (5, _local(START + 500))]


def _local(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))
