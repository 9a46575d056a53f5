"""What the execute node does on disk before it serves: take its lock (waiting for a
predecessor still shutting down), and clear what a killed predecessor left behind (its
jobs' processes, found by their marker, and its sandboxes)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Final

from htgrid.pool import kill_leftovers
from htgrid.startd._errors import StartdError

__all__ = ["clean_up_after_predecessor", "hold_lock"]

_log = logging.getLogger("htgrid.startd")

_LOCK_WAIT: Final = 60.0
_STALE: Final = re.compile(r"dir_\d+_\d+(\.input\.tar|\.output\.tar)?")


def hold_lock(path: Path) -> int:
    """Hold the node's lock, waiting (up to a minute) for a predecessor still stopping."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise StartdError(f"another startd holds {path}") from None
            time.sleep(0.1)


def clean_up_after_predecessor(marker: str, execute_dir: Path) -> None:
    """Kill the processes left by jobs of an earlier startd (`marker`) and remove its
    sandboxes under `execute_dir`."""
    killed = kill_leftovers(marker)
    if killed:
        _log.warning("killed %d process(es) left by jobs of an earlier startd", len(killed))
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(execute_dir):
            if _STALE.fullmatch(entry.name):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
