"""A submit is answered once its jobs' 000 events are in their logs, and at once when no
job has a log: nothing to wait for then. A history read that finds a job is answered once
the job's last event is in its log."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

import pytest

import htgrid.schedd._userlog as userlog
from htgrid.classad import ClassAd
from htgrid.eventlog import JobAbortedEvent, UserLogEvent
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import Identity, JobAction, JobQueue
from htgrid.schedd import ScheddConfig
from htgrid.schedd._service import QueueService
from htgrid.schedd._userlog import UserLogWriter
from htgrid.schedd._worker import QueueWorker
from htgrid.testing import in_process, until

from ._harness import event_types

ALICE = Identity("alice")


def test_only_a_submit_of_jobs_with_a_log_waits_for_the_event_log(tmp_path: Path) -> None:
    # The daemon's after_submit writes every event since the last (the runner's included)
    # so that a job's 000 event is in its log when the submit returns; a job with no log
    # has none to wait for.
    worker = QueueWorker(JobQueue.open(tmp_path / "queue", fsync=False))
    caught_up = asyncio.Event()
    waits: list[str] = []

    async def after_submit() -> None:
        waits.append("catch-up")
        await caught_up.wait()

    service = QueueService(
        worker, dict, spool=lambda c, p: tmp_path / str(c) / str(p), after_submit=after_submit
    )
    plain = {"Cmd": "/bin/true", "JobUniverse": 12, "Iwd": str(tmp_path)}

    async def scenario() -> None:
        cluster = await service.reserve_cluster(ALICE)
        plain_submit = service.submit(ALICE, cluster, ClassAd(plain), [ClassAd()] * 3)
        assert len(await asyncio.wait_for(plain_submit, 5)) == 3
        assert waits == []

        logged = ClassAd({**plain, "UserLog": "job.log"})
        cluster = await service.reserve_cluster(ALICE)
        submit = asyncio.ensure_future(service.submit(ALICE, cluster, logged, [ClassAd()]))
        await asyncio.sleep(0.2)
        assert waits == ["catch-up"] and not submit.done()
        caught_up.set()
        assert len(await submit) == 1

        # A log named by one proc only counts too.
        caught_up.clear()
        cluster = await service.reserve_cluster(ALICE)
        procs = [ClassAd(), ClassAd({"UserLog": "one.log"})]
        submit = asyncio.ensure_future(service.submit(ALICE, cluster, ClassAd(plain), procs))
        await asyncio.sleep(0.2)
        assert waits == ["catch-up"] * 2 and not submit.done()
        caught_up.set()
        assert len(await submit) == 2

    try:
        asyncio.run(scenario())
    finally:
        worker.close()


def test_a_job_found_in_the_history_has_its_last_event_in_its_log(tmp_path: Path) -> None:
    # The writer's own loop is not started: as a writer still busy with earlier events,
    # it has not written the job's 009 when the history is read. The daemon's wiring.
    worker = QueueWorker(JobQueue.open(tmp_path / "queue", fsync=False))
    writer = UserLogWriter(worker, tmp_path / "userlog.seq", "<host>")
    catch_up = functools.partial(writer.catch_up, client=True)
    service = QueueService(
        worker,
        dict,
        spool=lambda c, p: tmp_path / str(c) / str(p),
        after_submit=catch_up,
        before_history=catch_up,
    )
    ad = ClassAd({"Cmd": "/bin/true", "UserLog": "job.log", "Iwd": str(tmp_path)})
    log = tmp_path / "job.log"

    async def scenario() -> None:
        cluster = await service.reserve_cluster(ALICE)
        (job,) = await service.submit(ALICE, cluster, ad, [ClassAd()])
        assert event_types(log) == [0]
        assert await service.history(ALICE, None, None, None) == []
        await service.act(ALICE, JobAction.Remove, Jobs.of([job]), "by the test")
        (gone,) = await service.history(ALICE, None, ["ProcId"], None)
        assert gone["ProcId"] == 0
        assert event_types(log) == [0, 9]

    try:
        asyncio.run(scenario())
    finally:
        worker.close()


def test_the_daemons_history_answer_waits_for_the_jobs_last_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole daemon, its event log writer slowed (a busy disk) at the 009 of a job
    # removed while idle: it leaves the queue at once, and the history that shows it
    # answers only once its 009 is in its log.
    class Slow(userlog.UserLog):
        def append(self, event: UserLogEvent) -> None:
            if isinstance(event, JobAbortedEvent):
                time.sleep(1.5)
            super().append(event)

    monkeypatch.setattr(userlog, "UserLog", Slow)
    config = ScheddConfig(
        tmp_path / "pool",
        kill_grace=1,
        fsync=False,
        daemons=frozenset({"MASTER", "SCHEDD"}),
        allow_root_jobs=True,  # the test submits as root
    )
    log = tmp_path / "job.log"
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": "/", "UserLog": str(log)})

    def submit_and_remove(schedd: ScheddClient) -> str:
        cluster = schedd.reserve_cluster()
        (job,) = schedd.submit(cluster, ad, [ClassAd()])
        schedd.act(JobAction.Remove, Jobs.of([job]))
        return f"ClusterId == {cluster}"

    async def scenario(schedd: ScheddClient) -> None:
        where = await asyncio.to_thread(submit_and_remove, schedd)
        await until(lambda: schedd.history(where, ["ProcId"]))
        assert event_types(log) == [0, 9]

    in_process(config, scenario)
