"""Where the schedd keeps a job's MyProxy password for the grid manager.

`htgrid submit -p` (HTCondor's `condor_submit -password`) or a submit file's
MyProxyPassword sends the password with the job; the schedd never queues it (the job ad
gets MyProxyPasswordExists = true) but writes it to `<spool>/myproxy/<cluster>.<proc>`,
mode 0600 in a directory of mode 0700, both the daemons' own (as HTCondor's schedd keeps
SPOOL/mpp.<cluster>.<proc>): not in the job's spool directory, which its owner controls.
The grid manager reads it when it renews the job's proxy; the spool sweep removes it once
the job has left the queue.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from htgrid._files import write_atomic

__all__ = [
    "MYPROXY_DIR",
    "myproxy_jobs",
    "myproxy_password_file",
    "read_myproxy_password",
    "store_myproxy_password",
]

MYPROXY_DIR: Final = "myproxy"


def myproxy_password_file(spool: Path, cluster: int, proc: int) -> Path:
    """The file of job `cluster.proc`'s MyProxy password under the queue's `spool`."""
    return spool / MYPROXY_DIR / f"{cluster}.{proc}"


def store_myproxy_password(spool: Path, cluster: int, proc: int, password: str) -> None:
    """Keep the password (0600, written whole, on disk before it is used). Blocking."""
    directory = spool / MYPROXY_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = myproxy_password_file(spool, cluster, proc)
    write_atomic(path, password.encode("utf-8"), sync=True, mode=0o600)


def read_myproxy_password(spool: Path, cluster: int, proc: int) -> str | None:
    """The job's password, None if none is kept. Blocking."""
    path = myproxy_password_file(spool, cluster, proc)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with open(fd, "rb") as f:
        return f.read().decode("utf-8", "replace")


def myproxy_jobs(spool: Path) -> set[tuple[int, int]]:
    """The (cluster, proc) of every password kept."""
    found: set[tuple[int, int]] = set()
    with contextlib.suppress(FileNotFoundError), os.scandir(spool / MYPROXY_DIR) as entries:
        for entry in entries:
            cluster, dot, proc = entry.name.partition(".")
            if dot and cluster.isdigit() and proc.isdigit():
                found.add((int(cluster), int(proc)))
    return found
