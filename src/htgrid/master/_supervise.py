"""The master's children: daemons started, watched, restarted, stopped.

`htgrid up` runs the collector and the execute node (startd) as child processes of this
daemon (HTCondor's condor_master does the same for its DAEMON_LIST): each writes its own
log (`reconfig` passes condor_reconfig's SIGHUP on to those that take it), and one that dies is started again after a back-off (MASTER_BACKOFF_CONSTANT *
MASTER_BACKOFF_FACTOR ** restarts seconds, at most MASTER_BACKOFF_CEILING; a child that
ran MASTER_RECOVER_FACTOR seconds starts counting from zero again). A child that exits
with `EXIT_NO_RESTART` (99, HTCondor's DAEMON_NO_RESTART: the execute node after
STARTD_NOCLAIM_SHUTDOWN) is not restarted; the master is told instead.

Each child gets `--parent-fd`, the read end of a pipe whose write end only this process
holds: should the master die (even by kill -9), the pipe reads as closed and the children
stop by themselves, so none outlives the pool that started it.

Each child moves through:

    from \\ to      Running  BackingOff  Stopped
    Running           .         yes        yes     (died; stopped, or exited for good)
    BackingOff       yes         .         yes     (restarted; stopped while waiting)
    Stopped          yes         .          .      (started)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid._aio import wait_event
from htgrid.pool import Backoff
from htgrid.queue import InvalidTransition

__all__ = ["EXIT_NO_RESTART", "ChildSpec", "ChildState", "Supervisor"]

_log = logging.getLogger("htgrid.master")

EXIT_NO_RESTART: Final = 99


class ChildState(enum.Enum):
    """Where one child daemon is."""

    RUNNING = "running"
    BACKING_OFF = "backing off"
    STOPPED = "stopped"


TRANSITIONS: Final[Mapping[ChildState, frozenset[ChildState]]] = {
    ChildState.RUNNING: frozenset({ChildState.BACKING_OFF, ChildState.STOPPED}),
    ChildState.BACKING_OFF: frozenset({ChildState.RUNNING, ChildState.STOPPED}),
    ChildState.STOPPED: frozenset({ChildState.RUNNING}),
}


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """How to run one child daemon. `argv` may hold `{parent_fd}`, filled in at spawn."""

    name: str
    argv: tuple[str, ...]
    log: Path
    pass_fds: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    stop_timeout: float = 30.0  # SIGTERM, then SIGKILL after this long
    # It reads its configuration again on SIGHUP (condor_reconfig): a `python -m` child
    # is started through `htgrid._sighup`, which ignores SIGHUP until its handler is set.
    reconfig: bool = False


@dataclass(eq=False)
class _Child:
    spec: ChildSpec
    state: ChildState = ChildState.STOPPED
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started: float = 0.0
    exits: int = 0
    last_status: int | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set to cut a back-off short

    def stopped(self) -> bool:
        """Whether the supervisor stopped it (it may change while a child is awaited)."""
        return self.stopping

    def move(self, new: ChildState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{self.spec.name}: {self.state.value} -> {new.value}")
        self.state = new


class Supervisor:
    """Runs child daemons until stopped, restarting those that die."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        on_no_restart: Callable[[str, int], None] = lambda name, status: None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff = backoff
        self._on_no_restart = on_no_restart
        self._monotonic = monotonic
        self._children: dict[str, _Child] = {}
        # Only this process holds the write end: the children see EOF when it dies.
        self.parent_fd, self._keep = os.pipe()

    def add(self, spec: ChildSpec) -> None:
        """Supervise one more child (started by `start`)."""
        self._children[spec.name] = _Child(spec)

    def start(self) -> None:
        """Start every child that is not running, each watched by its own task."""
        for child in self._children.values():
            if child.task is None or child.task.done():
                child.task = asyncio.create_task(self._watch(child), name=child.spec.name)

    def status(self) -> dict[str, Any]:
        """Each child: state, pid, restarts, last exit status (for the health route)."""
        return {
            name: {
                "state": c.state.value,
                "pid": c.proc.pid if c.proc is not None and c.proc.returncode is None else None,
                "restarts": c.exits,
                "last_exit": c.last_status,
            }
            for name, c in self._children.items()
        }

    def reconfig(self) -> list[str]:
        """SIGHUP to each running child that reads its configuration again on it (the
        others would die of it); the names of those signalled."""
        told = []
        for name, child in self._children.items():
            proc = child.proc
            if child.spec.reconfig and proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGHUP)
                    told.append(name)
        return told

    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        if child is None or child.proc is None or child.proc.returncode is not None:
            return None
        return child.proc.pid

    async def _watch(self, child: _Child) -> None:
        name = child.spec.name
        while not child.stopping:
            try:
                child.proc = await self._spawn(child.spec)
            except OSError as exc:
                _log.error("cannot start the %s: %s", name, exc)
                status = -1
            else:
                child.move(ChildState.RUNNING)
                child.started = self._monotonic()
                _log.info("started the %s (pid %d)", name, child.proc.pid)
                if child.stopped():  # stopped while it was being started
                    await self._terminate(child, child.proc)
                status = await child.proc.wait()
                if child.stopped():
                    return
            child.last_status = status
            child.exits += 1
            if status == EXIT_NO_RESTART:
                _log.info("the %s exited for good (status %d)", name, status)
                child.move(ChildState.STOPPED)
                self._on_no_restart(name, status)
                return
            if self._monotonic() - child.started >= self._backoff.recover:
                child.restarts = 0
            delay = self._backoff.delay(child.restarts)
            child.restarts += 1
            _log.error("the %s died (%s); restarting it in %g s", name, _how(status), delay)
            if child.state is ChildState.RUNNING:
                child.move(ChildState.BACKING_OFF)
            await wait_event(child.wake, delay)

    async def _spawn(self, spec: ChildSpec) -> asyncio.subprocess.Process:
        argv = [a.format(parent_fd=self.parent_fd) for a in spec.argv]
        if spec.reconfig and argv[1:2] == ["-m"]:
            # SIGHUP ignored from its first moment, until its handler is in place: a
            # reconfig while it starts (its imports take seconds) must not end it.
            argv[1:2] = ["-m", "htgrid._sighup"]
        log = await asyncio.to_thread(open, spec.log, "ab")
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(self.parent_fd, *spec.pass_fds),
                env={**os.environ, **spec.env},
            )
        finally:
            log.close()

    async def stop(self, order: Sequence[str] | None = None) -> None:
        """Stop the children named in `order`, one after the other (default: all, in the
        reverse of the order they were added)."""
        names = list(order) if order is not None else list(reversed(self._children))
        for name in names:
            child = self._children.get(name)
            if child is not None:
                await self._stop(child)

    def close(self) -> None:
        """Let go of the pipe (after stopping every child)."""
        for fd in (self._keep, self.parent_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    async def _stop(self, child: _Child) -> None:
        child.stopping = True
        child.wake.set()
        if child.state is not ChildState.STOPPED:
            child.move(ChildState.STOPPED)
        proc = child.proc
        if proc is not None and proc.returncode is None:
            await self._terminate(child, proc)
            _log.info("stopped the %s", child.spec.name)
        if child.task is not None:
            await asyncio.gather(child.task, return_exceptions=True)

    async def _terminate(self, child: _Child, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM, and SIGKILL if it has not exited within its stop timeout."""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), child.spec.stop_timeout)
        except TimeoutError:
            _log.error(
                "the %s did not stop in %g s: killing it", child.spec.name, child.spec.stop_timeout
            )
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _how(status: int) -> str:
    return f"signal {-status}" if status < 0 else f"exit status {status}"
