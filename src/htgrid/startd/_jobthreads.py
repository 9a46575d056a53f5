"""The threads the jobs' runs block in (`Starter._through`), kept for the next job.

A job's whole run is one blocking call: set up, started, waited for, packed. Each takes
a thread for as long as its job runs, so the pool has no bound but the node's slots;
and a daemon thread, which a node stopping does not wait for (its jobs are killed:
`concurrent.futures`' workers are joined at exit, which a job running for days would
hold up). A thread whose job ended waits for the next (a short job's run cost more to
start a thread for than the rest of what the node does for it); one left idle for
`idle_timeout` seconds ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["JobThreads"]

_IDLE_TIMEOUT: Final = 60.0


class JobThreads:
    """Runs each call given in a daemon thread: an idle one, else a new one."""

    def __init__(self, idle_timeout: float = _IDLE_TIMEOUT) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call; each call put is one fewer
        self._timeout = idle_timeout

    def submit(self, call: Callable[[], None]) -> None:
        """`call()` in a thread of the pool's (it must not raise: nothing would see it)."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._calls.put(call)
                return
        threading.Thread(target=self._serve, args=(call,), name="htgrid-job", daemon=True).start()

    def _serve(self, call: Callable[[], None]) -> None:
        while True:
            call()
            with self._lock:
                self._idle += 1
            try:
                call = self._calls.get(timeout=self._timeout)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # none was handed to an idle thread meanwhile: go
                        self._idle -= 1
                        return
                call = self._calls.get()  # one was, counting on this thread: take it
