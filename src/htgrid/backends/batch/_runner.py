"""Running one LRM command: no shell, output captured, bounded in time.

`run_command` is the real runner; back ends take any `Runner`, so tests inject fakes
and `CountingRunner` counts what ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from typing import IO, Protocol

from htgrid.backends.batch._base import BackendUnavailable, CommandResult

__all__ = ["CountingRunner", "Runner", "run_command"]


class Runner(Protocol):
    """Runs one command: no shell, output captured, bounded by `timeout` seconds."""

    async def __call__(
        self, argv: Sequence[str], *, stdin: str | None = None, timeout: float
    ) -> CommandResult: ...


async def run_command(
    argv: Sequence[str], *, stdin: str | None = None, timeout: float
) -> CommandResult:
    """The real runner: a process in its own session (killed whole on timeout).

    Output goes to anonymous temporary files and the exit is awaited through a pidfd,
    so the event loop wakes once per command. (Python 3.11's asyncio subprocesses start
    a watcher thread per child, about 1.5 ms each: a quarter of what an sbatch costs.)
    The process is started in a worker thread: the fork waits until the child has
    exec'd, a millisecond or more on a busy machine, during which an event loop that
    started it could do nothing else (with 16 sbatch at a time, a third of its time).
    """
    if not hasattr(os, "pidfd_open"):
        return await _run_asyncio(argv, stdin, timeout)
    starting = asyncio.ensure_future(asyncio.to_thread(_start, argv, stdin))
    try:
        proc, out, err = await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(_abandon)  # started all the same: killed, not left
        raise
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    with out, err:
        try:
            await asyncio.wait_for(_exited(proc), timeout)
        except TimeoutError:
            raise BackendUnavailable(f"{argv[0]} did not answer within {timeout:g}s") from None
        finally:
            if proc.returncode is None:  # timed out or cancelled
                _kill(proc)
        out.seek(0)
        err.seek(0)
        return CommandResult(
            argv=tuple(argv),
            returncode=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


_Started = tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]


def _start(argv: Sequence[str], stdin: str | None) -> _Started:
    """(In a worker thread) the process started, and the files its output goes to."""
    with contextlib.ExitStack() as files:
        out = files.enter_context(tempfile.TemporaryFile())
        err = files.enter_context(tempfile.TemporaryFile())
        source: IO[bytes] | int = subprocess.DEVNULL
        with contextlib.ExitStack() as input_file:
            if stdin is not None:
                source = input_file.enter_context(tempfile.TemporaryFile())
                source.write(stdin.encode())
                source.seek(0)
            proc = subprocess.Popen(
                list(argv), stdin=source, stdout=out, stderr=err, start_new_session=True
            )
        files.pop_all()  # the caller's now
        return proc, out, err


def _abandon(starting: asyncio.Future[_Started]) -> None:
    """A process started for a caller that went away: killed, reaped, its files closed."""
    if starting.cancelled() or starting.exception() is not None:
        return
    proc, out, err = starting.result()
    _kill(proc)
    out.close()
    err.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def _exited(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the process to exit, and reap it."""
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(proc.pid)
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    proc.wait()  # at once: the pidfd says it has exited


async def _run_asyncio(argv: Sequence[str], stdin: str | None, timeout: float) -> CommandResult:
    """The portable path: asyncio's own subprocesses."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    data = stdin.encode() if stdin is not None else None
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise BackendUnavailable(f"{argv[0]} did not answer within {timeout:g}s") from None
    return CommandResult(
        argv=tuple(argv),
        returncode=proc.returncode if proc.returncode is not None else -1,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
    )


class CountingRunner:
    """A runner that records every command it runs (tests, benchmarks)."""

    def __init__(self, inner: Runner = run_command) -> None:
        self.inner = inner
        self.commands: list[tuple[str, ...]] = []

    async def __call__(
        self, argv: Sequence[str], *, stdin: str | None = None, timeout: float
    ) -> CommandResult:
        self.commands.append(tuple(argv))
        return await self.inner(argv, stdin=stdin, timeout=timeout)

    def count(self, program: str) -> int:
        """How many commands ran `program` (by base name)."""
        return sum(1 for argv in self.commands if os.path.basename(argv[0]) == program)
