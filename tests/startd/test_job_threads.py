"""The threads the jobs' runs block in: as many at once as jobs run, kept for the next
job when one ends, gone once idle for long."""

from __future__ import annotations

import threading
import time

from htgrid.startd._jobthreads import JobThreads


def _run(pool: JobThreads, calls: int, hold: threading.Event | None = None) -> list[int]:
    """The threads `calls` calls ran in, all started before any may end (`hold`)."""
    ran: list[int] = []
    done = threading.Semaphore(0)

    def call() -> None:
        ran.append(threading.get_ident())
        if hold is not None:
            hold.wait(10)
        done.release()

    for _ in range(calls):
        pool.submit(call)
    if hold is not None:
        deadline = time.monotonic() + 10
        while len(ran) < calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ran) == calls  # each blocking call got a thread of its own
        hold.set()
    for _ in range(calls):
        assert done.acquire(timeout=10)
    return ran


def test_blocking_calls_run_at_once_and_their_threads_serve_the_next() -> None:
    pool = JobThreads(idle_timeout=30)
    first = _run(pool, 3, threading.Event())
    assert len(set(first)) == 3
    time.sleep(0.05)  # the three back to waiting
    again = _run(pool, 3, threading.Event())
    assert set(again) == set(first)  # no new thread for the next jobs


def test_a_thread_idle_past_its_timeout_ends_and_calls_still_run() -> None:
    pool = JobThreads(idle_timeout=0.2)
    before = threading.active_count()
    _run(pool, 1)
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() == before  # it ended
    assert len(_run(pool, 1)) == 1  # and the next call has a thread again
