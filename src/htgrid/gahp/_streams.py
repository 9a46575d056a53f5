"""The two byte-stream shapes the GAHP runtimes move data through.

asyncio's StreamReader and StreamWriter fit; tests and odd descriptors (a regular file as
stdin) supply their own.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from typing import Protocol

from htgrid._files import write_all

__all__ = ["ByteReader", "ByteWriter", "stdin_reader", "stdout_writer"]

_READ_SIZE = 256 * 1024


class ByteReader(Protocol):
    """Where bytes come from."""

    async def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes; b"" at end of file."""


class ByteWriter(Protocol):
    """Where bytes go."""

    def write(self, data: bytes) -> None:
        """Queue `data` for writing, whole and in order."""

    async def drain(self) -> None:
        """Wait until the queued data has room to flow."""


# ---- stdin and stdout ---------------------------------------------------------------------------


class _ThreadReader:
    """Reads a regular file given as stdin without blocking the event loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def read(self, n: int = -1) -> bytes:
        return await asyncio.to_thread(os.read, self._fd, n if n > 0 else _READ_SIZE)


class _BlockingWriter:
    """Writes to a regular file given as stdout (asyncio pipes refuse files)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        write_all(self._fd, data)

    async def drain(self) -> None:
        return None


async def stdin_reader(loop: asyncio.AbstractEventLoop) -> ByteReader:
    """This process's stdin as a ByteReader (a pipe, a terminal or a regular file)."""
    mode = os.fstat(0).st_mode
    if stat.S_ISCHR(mode) and not os.isatty(0):
        # /dev/null and its kind: epoll refuses them (EPERM, raised only once the loop
        # runs, so the server would wait forever); read them in a thread like a file.
        return _ThreadReader(0)
    reader = asyncio.StreamReader(limit=_READ_SIZE, loop=loop)
    stdin = os.fdopen(0, "rb", buffering=0, closefd=False)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except ValueError:
        return _ThreadReader(0)
    return reader


async def stdout_writer(loop: asyncio.AbstractEventLoop) -> ByteWriter:
    """This process's stdout as a ByteWriter (a pipe, a terminal or a regular file)."""
    sys.stdout.flush()
    stdout = os.fdopen(1, "wb", buffering=0, closefd=False)
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stdout
        )
    except ValueError:
        return _BlockingWriter(1)
    return asyncio.StreamWriter(transport, protocol, None, loop)
