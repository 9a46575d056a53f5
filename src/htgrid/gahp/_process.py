"""The GAHP server as a process the client talks to; spawning is injectable.

`spawn_subprocess` is the real thing. Tests (and a grid manager that wants to run a
server in process) pass another `Spawner` returning anything that fits `GahpProcess`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from htgrid.gahp._codec import LineSplitter
from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp._streams import ByteReader, ByteWriter

__all__ = ["GahpProcess", "Spawner", "read_stderr", "spawn_subprocess"]

log = logging.getLogger("htgrid.gahp.client")

_READ_SIZE = 256 * 1024


class GahpProcess(Protocol):
    """A running GAHP server as the client sees it."""

    @property
    def pid(self) -> int | None: ...

    @property
    def stdin(self) -> ByteWriter: ...

    @property
    def stdout(self) -> ByteReader: ...

    @property
    def stderr(self) -> ByteReader | None: ...

    async def wait(self) -> int | None:
        """The exit status once the process has exited."""

    def close_stdin(self) -> None:
        """Close the server's stdin (EOF makes a GAHP server quit)."""

    def kill(self) -> None:
        """Kill the process."""


Spawner = Callable[[Sequence[str], Mapping[str, str] | None], Awaitable[GahpProcess]]


class _Subprocess:
    """An asyncio subprocess as a GahpProcess."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin and process.stdout  # created with PIPE just below
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def stdin(self) -> ByteWriter:
        return self._stdin

    @property
    def stdout(self) -> ByteReader:
        return self._stdout

    @property
    def stderr(self) -> ByteReader | None:
        return self._process.stderr

    async def wait(self) -> int | None:
        return await self._process.wait()

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._stdin.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()


async def spawn_subprocess(
    argv: Sequence[str], env: Mapping[str, str] | None, **popen: Any
) -> GahpProcess:
    """Start `argv` with pipes on stdin, stdout and stderr; `popen` goes to Popen as it
    is (the user to run as, the umask)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=None if env is None else dict(env),
        limit=_READ_SIZE,
        **popen,
    )
    return _Subprocess(process)


async def read_stderr(stderr: ByteReader, tail: deque[str], pid: int | None) -> None:
    """Log what the server writes on stderr and keep its last lines in `tail`.

    The grid manager keeps the last four for hold reasons; reading also keeps a chatty
    server from blocking on a full stderr pipe.
    """
    splitter = LineSplitter()
    with contextlib.suppress(OSError, RuntimeError, GahpProtocolError):
        while data := await stderr.read(_READ_SIZE):
            splitter.feed(data)
            while (line := splitter.next_line()) is not None:
                text = line.decode("utf-8", "replace").rstrip("\r")
                tail.append(text)
                log.debug("GAHP[%s] (stderr) -> %s", pid, text)
