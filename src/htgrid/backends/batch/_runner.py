"""Running one LRM command: no shell, output captured, bounded in time.

`run_command` is the real runner; back ends take any `Runner`, so tests inject fakes
and `CountingRunner` counts what ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Sequence
from typing import Protocol

from htgrid.backends.batch._base import BackendUnavailable, CommandResult
from htgrid.backends.batch._spawn import RESTORED_SIGNALS, spawn

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

    The process is started in a worker thread by posix_spawn (`_spawn`: a vfork, with
    the GIL released while it waits for the exec, so the event loop goes on meanwhile).
    Output goes to memory files, read once it has exited, and the exit is awaited
    through a pidfd, so the event loop wakes once per command. (Python 3.11's asyncio
    subprocesses start a watcher thread per child, about 1.5 ms each: a quarter of what
    an sbatch costs.)
    """
    if not hasattr(os, "pidfd_open"):
        return await _run_asyncio(argv, stdin, timeout)
    starting = asyncio.ensure_future(asyncio.to_thread(_start, argv, stdin))
    try:
        child = await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(_abandon)  # started all the same: killed, not left
        raise
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    with child:
        try:
            await asyncio.wait_for(_exited(child), timeout)
        except TimeoutError:
            raise BackendUnavailable(f"{argv[0]} did not answer within {timeout:g}s") from None
        finally:
            if child.returncode is None:  # timed out or cancelled
                child.kill()
        return CommandResult(
            argv=tuple(argv),
            returncode=child.reap(),
            stdout=_contents(child.out).decode(errors="replace"),
            stderr=_contents(child.err).decode(errors="replace"),
        )


class _Child:
    """A started process, the pidfd that says when it exits, and its output files."""

    def __init__(self, pid: int, pidfd: int, out: int, err: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.out = out
        self.err = err
        self.returncode: int | None = None

    def reap(self) -> int:
        """Its exit code, waiting for it (at once when the pidfd says it has exited)."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else: as subprocess.Popen does
                self.returncode = 0
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL its whole session, and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.reap()

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (self.pidfd, self.out, self.err):
            os.close(fd)


# Each program's path, by name and PATH: a search in the child would try (and fail) an
# exec in each directory of the PATH before the right one, while this process waits.
_paths: dict[tuple[str, str], str] = {}


def _spawn(argv: Sequence[str], dup2: Sequence[tuple[int, int]]) -> int:
    name = argv[0]
    key = (name, os.environ.get("PATH", os.defpath))
    path = name if "/" in name else _paths.get(key)
    if path is None:
        path = shutil.which(name, path=key[1]) or name
    try:
        pid = spawn(path, argv, dup2, RESTORED_SIGNALS)
    except OSError:
        if _paths.pop(key, None) is None:
            raise
        # Moved since it was found: look again.
        return _spawn(argv, dup2)
    if path != name:
        _paths[key] = path
    return pid


def _start(argv: Sequence[str], stdin: str | None) -> _Child:
    """(In a worker thread) the process started, with the files its output goes to.

    Anonymous memory files (memfd: no directory entry, no disk) take its output; the
    pidfd_open that comes with them is Linux's too.
    """
    with contextlib.ExitStack() as fds:
        out = os.memfd_create("stdout", os.MFD_CLOEXEC)
        fds.callback(os.close, out)
        err = os.memfd_create("stderr", os.MFD_CLOEXEC)
        fds.callback(os.close, err)
        with contextlib.ExitStack() as input_file:
            if stdin is None:
                source = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            else:
                source = os.memfd_create("stdin", os.MFD_CLOEXEC)
            input_file.callback(os.close, source)
            if stdin is not None:
                data = memoryview(stdin.encode())
                while data:
                    data = data[os.write(source, data) :]
                os.lseek(source, 0, os.SEEK_SET)
            pid = _spawn(argv, [(source, 0), (out, 1), (err, 2)])
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        fds.pop_all()  # the caller's now
        return _Child(pid, pidfd, out, err)


def _contents(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _abandon(starting: asyncio.Future[_Child]) -> None:
    """A process started for a caller that went away: killed, reaped, its files closed."""
    if starting.cancelled() or starting.exception() is not None:
        return
    with starting.result() as child:
        child.kill()


async def _exited(child: _Child) -> None:
    """Wait for the process to exit, and reap it."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(child.pidfd, on_exit)
    try:
        await exited
    finally:
        loop.remove_reader(child.pidfd)
    child.reap()  # at once: the pidfd says it has exited


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
