"""One bad job does not stop the daemon's loops: it is held with the reason, another
user's job runs to completion, and the daemon logs the failure once.

The daemon runs in this process (the queue alone: the periodic pass, the local
universe runner and the event-log writer), so that a fault can be injected where a loop
handles one job when no real trigger is at hand.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import htcondor2
import pytest

import htgrid.queue._periodic as periodic_module
from htgrid.classad import ClassAd
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import HoldReasonCode, JobAction
from htgrid.schedd import ScheddConfig
from htgrid.testing import completed, held, in_process, until


def run_daemon(tmp_path: Path, scenario: Callable[[ScheddClient], Awaitable[None]]) -> None:
    config = ScheddConfig(
        tmp_path / "pool",
        periodic_interval=0.1,
        kill_grace=1,
        fsync=False,
        daemons=frozenset({"MASTER", "SCHEDD"}),
        allow_root_jobs=True,  # the tests submit as root
    )
    in_process(config, scenario)


def submit(schedd: ScheddClient, ad: ClassAd) -> str:
    cluster = schedd.reserve_cluster()
    schedd.submit(cluster, ad, [ClassAd()])
    return f"{cluster}.0"


def local_job(owner: str, **attrs: Any) -> ClassAd:
    # Iwd "/" and no output files: whoever the job runs as can start it.
    return ClassAd({"Owner": owner, "JobUniverse": 12, "Cmd": "/bin/true", "Iwd": "/", **attrs})


def failures_logged(caplog: pytest.LogCaptureFixture, job: str, loop: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.getMessage().startswith(f"job {job}: the {loop} failed")
    )


def test_a_periodic_policy_that_fails_holds_its_job_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = periodic_module.periodic_decision

    def decision(ad: ClassAd, now: int) -> Any:
        if ad.get("Poison") is True:
            raise TypeError("a bug this job alone meets")
        return real(ad, now)

    monkeypatch.setattr(periodic_module, "periodic_decision", decision)
    caplog.set_level(logging.INFO)

    async def scenario(schedd: ScheddClient) -> None:
        # Vanilla: with no execute node it stays idle, evaluated at every pass.
        bad = await asyncio.to_thread(
            submit, schedd, ClassAd({"Owner": "alice", "JobUniverse": 5, "Poison": True,
                                     "PeriodicHold": False, "Cmd": "/bin/true", "Iwd": "/"})
        )  # fmt: skip
        ad = await held(schedd, bad)
        assert ad["HoldReason"] == (
            "The schedd's periodic policy evaluation failed for this job: "
            "internal error (TypeError: a bug this job alone meets)"
        )
        assert ad["HoldReasonCode"] == HoldReasonCode.JobPolicyUndefined
        # Other users' policies and jobs go on, pass after pass (its release fails too).
        for _ in range(3):
            policed = await asyncio.to_thread(
                submit, schedd, local_job("nobody", PeriodicHold=True, Cmd="/bin/sleep",
                                          Arguments="30")
            )  # fmt: skip
            await held(schedd, policed)
        await completed(schedd, await asyncio.to_thread(submit, schedd, local_job("nobody")))
        assert (await asyncio.to_thread(schedd.get, bad))["NumHolds"] == 1

    run_daemon(tmp_path, scenario)
    assert failures_logged(caplog, "1.0", "periodic policy evaluation") == 1


def test_a_local_job_that_cannot_be_started_is_held_not_left_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario(schedd: ScheddClient) -> None:
        # Arguments a user's qedit (or a client) left unparseable: a real trigger.
        bad = await asyncio.to_thread(
            submit, schedd, local_job("alice", Cmd="/bin/echo", Arguments="'unbalanced")
        )
        ad = await held(schedd, bad)
        assert ad["HoldReason"] == (
            "The local universe runner failed on this job: Unbalanced quote starting here: "
            "'unbalanced"
        )
        assert ad["HoldReasonCode"] == HoldReasonCode.FailedToCreateProcess
        await completed(schedd, await asyncio.to_thread(submit, schedd, local_job("nobody")))
        # Released, it fails alike: held again, and not logged again.
        await asyncio.to_thread(schedd.act, JobAction.Release, Jobs.of([bad]))
        await until(lambda: schedd.get(bad)["NumHolds"] == 2)
        await completed(schedd, await asyncio.to_thread(submit, schedd, local_job("nobody")))

    run_daemon(tmp_path, scenario)
    assert failures_logged(caplog, "1.0", "local universe runner") == 1


def test_a_job_whose_log_cannot_be_written_is_held_and_the_others_are_logged(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    shared_tmp_factory: Callable[[str], Path],
    test_users: tuple[str, ...],
) -> None:
    caplog.set_level(logging.INFO)
    # The logs are written as the jobs' owners (alice, nobody): where they reach them.
    logs = shared_tmp_factory("logs")
    directory = logs / "a-directory"
    directory.mkdir()
    mine = logs / "nobody"
    mine.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(mine, nobody.pw_uid, nobody.pw_gid)
    good_log = mine / "good.log"

    async def scenario(schedd: ScheddClient) -> None:
        bad = await asyncio.to_thread(
            submit, schedd, local_job("alice", Cmd="/bin/sleep", Arguments="30",
                                      UserLog=str(directory))
        )  # fmt: skip
        ad = await held(schedd, bad)
        assert ad["HoldReason"] == (f"Failed to initialize user log to {directory}: Is a directory")
        assert ad["HoldReasonCode"] == HoldReasonCode.UnableToInitUserLog
        good = await asyncio.to_thread(submit, schedd, local_job("nobody", UserLog=str(good_log)))
        await completed(schedd, good)
        await until(lambda: good_log.exists() and "005 (" in good_log.read_text())

    run_daemon(tmp_path, scenario)
    events = [int(e.type) for e in htcondor2.JobEventLog(str(good_log)).events(stop_after=0)]
    assert events == [0, 1, 5]
    # Its 000 and its 012 could not be written: one log line for both.
    assert failures_logged(caplog, "1.0", "event log writer") == 1
