"""A doorbell on the queue: the daemon that writes rings, a follower in another process wakes.

The grid manager is a process of its own that follows the queue's change feed. Reading
the feed on a timer alone makes every user action (a submit, `htgrid rm`) wait for the
next read, up to the whole interval. HTCondor's schedd signals its gridmanager
(GRIDMAN_ADD_JOBS) for the same reason. Here the signal is a byte written to a named pipe
beside the follower's state: writing never blocks, and costs a failed `open` when no
follower listens. A ring only says "read the feed"; what changed is in the feed itself,
so a lost or extra ring is harmless and the follower keeps its timer as a fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from pathlib import Path

__all__ = ["Doorbell", "ring"]


def ring(path: Path) -> bool:
    """Wake the follower listening on `path`; whether one was listening.

    Never blocks and never raises: with no follower (no pipe, or no reader) there is no
    one to wake, and a full pipe already holds a ring the follower has not read.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENOENT: never listened here; ENXIO: no reader now
        return False
    try:
        os.write(fd, b"\0")
    except BlockingIOError:
        pass
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


class Doorbell:
    """The listening end at `path`, on the running event loop; `wait` returns after a ring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rung = asyncio.Event()
        self._fds: tuple[int, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        """Make the pipe if it is not there, and listen (call on the event loop)."""
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISFIFO(os.stat(self.path).st_mode):
                os.unlink(self.path)  # not ours to keep: a stray file where the pipe goes
        with contextlib.suppress(FileExistsError):
            os.mkfifo(self.path, 0o600)
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            # A writer of our own: without one, the pipe reads as end-of-file each time
            # the last ringer closes, and the loop would call us forever.
            keeper = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            os.close(reader)
            raise
        self._fds = (reader, keeper)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(reader, self._drain)

    def _drain(self) -> None:
        assert self._fds is not None
        with contextlib.suppress(BlockingIOError):
            while os.read(self._fds[0], 4096):
                pass
        self._rung.set()

    async def wait(self) -> None:
        """Until the next ring (or one not yet waited for); it is used up."""
        await self._rung.wait()
        self._rung.clear()

    def close(self) -> None:
        """Stop listening; the pipe stays for the next follower."""
        if self._fds is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(self._fds[0])
        for fd in self._fds:
            os.close(fd)
        self._fds = None
