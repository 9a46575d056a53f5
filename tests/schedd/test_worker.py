"""The queue thread: what API clients ask goes before the daemon's own bookkeeping, which
still runs; calls keep their order within each line; close finishes what waits."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.queue import JobQueue
from htgrid.schedd._userlog import UserLogWriter
from htgrid.schedd._worker import QueueWorker


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[QueueWorker]:
    w = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    yield w
    w.close()


async def _busy(worker: QueueWorker) -> tuple[threading.Event, asyncio.Future[Any]]:
    """Keep the queue thread busy until the returned event is set."""
    began, free = threading.Event(), threading.Event()

    def hold(q: JobQueue) -> None:
        began.set()
        free.wait(10)

    blocker = asyncio.ensure_future(worker.read(hold))
    while not began.is_set():
        await asyncio.sleep(0.005)
    return free, blocker


def test_a_query_waits_for_no_bookkeeping_queued_before_it(worker: QueueWorker) -> None:
    ran: list[str] = []

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        later = [
            asyncio.ensure_future(worker.write(lambda q, i=i: ran.append(f"runner {i}")))
            for i in range(20)
        ]
        query = asyncio.ensure_future(
            worker.read(lambda q: ran.append("query") or q.query(None), client=True)
        )
        await asyncio.sleep(0.05)  # every call is waiting now
        free.set()
        assert await query == []
        await asyncio.gather(blocker, *later)

    asyncio.run(scenario())
    assert ran == ["query"] + [f"runner {i}" for i in range(20)]


def test_the_daemons_own_calls_still_run_while_clients_keep_calling(
    worker: QueueWorker,
) -> None:
    ran: list[str] = []

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        clients = [
            asyncio.ensure_future(
                worker.read(lambda q, i=i: ran.append(f"client {i}"), client=True)
            )
            for i in range(20)
        ]
        own = asyncio.ensure_future(worker.write(lambda q: ran.append("runner")))
        await asyncio.sleep(0.05)
        free.set()
        await asyncio.gather(blocker, own, *clients)

    asyncio.run(scenario())
    assert "runner" in ran[:5], ran  # not after all twenty clients
    assert [r for r in ran if r != "runner"] == [f"client {i}" for i in range(20)]


def test_a_call_whose_caller_gave_up_before_it_began_never_runs(worker: QueueWorker) -> None:
    ran: list[str] = []

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        gave_up = asyncio.ensure_future(worker.write(lambda q: ran.append("abandoned")))
        kept = asyncio.ensure_future(worker.write(lambda q: ran.append("kept")))
        await asyncio.sleep(0.05)
        gave_up.cancel()
        await asyncio.sleep(0)
        free.set()
        await asyncio.gather(blocker, kept)

    asyncio.run(scenario())
    assert ran == ["kept"]


def test_what_a_call_raises_reaches_its_caller(worker: QueueWorker) -> None:
    async def scenario() -> None:
        with pytest.raises(ZeroDivisionError):
            await worker.read(lambda q: 1 / 0, client=True)
        assert await worker.read(lambda q: "still serving") == "still serving"

    asyncio.run(scenario())


def test_close_finishes_the_calls_already_waiting(tmp_path: Path) -> None:
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    ran: list[int] = []

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        waiting = [
            asyncio.ensure_future(worker.write(lambda q, i=i: ran.append(i), client=i % 2 == 0))
            for i in range(6)
        ]
        await asyncio.sleep(0.05)
        threading.Timer(0.05, free.set).start()
        worker.close()  # blocks until the six have run
        assert sorted(ran) == list(range(6))
        await asyncio.gather(blocker, *waiting)
        with pytest.raises(RuntimeError, match="closed"):
            await worker.read(lambda q: None)

    asyncio.run(scenario())


def test_a_submits_wait_for_its_events_goes_before_the_bookkeeping(
    worker: QueueWorker, tmp_path: Path
) -> None:
    # The daemon answers a submit once its 000 events are written (UserLogWriter.catch_up);
    # with hundreds of the runner's calls waiting, that answer must not wait for them.
    writer = UserLogWriter(worker, tmp_path / "userlog.seq", "host")
    ran: list[str] = []

    def bookkeeping(q: JobQueue) -> None:
        time.sleep(0.3)
        ran.append("bookkeeping")

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        later = [asyncio.ensure_future(worker.write(bookkeeping)) for _ in range(5)]
        await asyncio.sleep(0.05)
        free.set()
        await writer.catch_up(client=True)
        ran.append("submit answered")
        await asyncio.gather(blocker, *later)

    asyncio.run(scenario())
    assert ran.index("submit answered") <= 1, ran


class _Clock:
    """A monotonic clock the test moves (the worker reads it from its thread)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_background_work_waits_for_both_lines_and_no_longer_than_its_bound(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False), clock=clock)
    ran: list[str] = []

    async def scenario() -> None:
        free, blocker = await _busy(worker)
        cleanup = asyncio.ensure_future(worker.write(lambda q: ran.append("let go"), later=True))
        runner = [
            asyncio.ensure_future(worker.write(lambda q, i=i: ran.append(f"runner {i}")))
            for i in range(3)
        ]
        query = asyncio.ensure_future(worker.read(lambda q: ran.append("query"), client=True))
        await asyncio.sleep(0.05)  # every call is waiting now
        free.set()
        await asyncio.gather(blocker, cleanup, query, *runner)
        assert ran == ["query", "runner 0", "runner 1", "runner 2", "let go"]

        # Behind a line that stays busy, background work waits its bound, then goes first.
        ran.clear()
        free, blocker = await _busy(worker)
        cleanup = asyncio.ensure_future(worker.write(lambda q: ran.append("let go"), later=True))
        runner = [
            asyncio.ensure_future(worker.write(lambda q, i=i: ran.append(f"runner {i}")))
            for i in range(3)
        ]
        await asyncio.sleep(0.05)
        clock.now += 0.5  # the bound, _LATER_WAIT
        free.set()
        await asyncio.gather(blocker, cleanup, *runner)
        assert ran == ["let go", "runner 0", "runner 1", "runner 2"]

    try:
        asyncio.run(scenario())
    finally:
        worker.close()


def test_background_work_runs_at_once_on_an_idle_queue(worker: QueueWorker) -> None:
    async def scenario() -> list[Any]:
        return await asyncio.wait_for(worker.write(lambda q: q.query(None), later=True), 5)

    assert asyncio.run(scenario()) == []
