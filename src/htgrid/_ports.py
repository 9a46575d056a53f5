"""Who listens on a TCP port: so that "address already in use" names the program.

Read from /proc (Linux): the listening socket's inode in /proc/net/tcp{,6}, then the
process with that socket among its open files. Only processes this user may look into
are found (root sees all); anything else, or no /proc, is "cannot tell".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["PortHolder", "held_by", "port_holder"]

_LISTEN: Final = "0A"  # the TCP state in /proc/net/tcp


@dataclass(frozen=True, slots=True)
class PortHolder:
    """A process listening on a port."""

    pid: int
    command: str  # its command line, words joined by spaces

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.command}"


def port_holder(port: int, *, proc: Path = Path("/proc")) -> PortHolder | None:
    """The process listening on TCP `port` (any local address), if it can be told."""
    sockets = _listening(port, proc)
    if not sockets:
        return None
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:  # gone, or not ours to look into
            continue
        for fd in fds:
            try:
                target = os.readlink(proc / pid / "fd" / fd)
            except OSError:
                continue
            if target in sockets:
                return PortHolder(int(pid), _command(proc / pid / "cmdline"))
    return None


def held_by(port: int) -> str:
    """` (held by pid N: COMMAND)` for an error about `port`; "" when that cannot be told."""
    holder = port_holder(port) if port else None
    return f" (held by {holder})" if holder is not None else ""


def _listening(port: int, proc: Path) -> set[str]:
    """`socket:[inode]` of each socket listening on `port`."""
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local = fields[1].rpartition(":")[2]
            if int(local, 16) == port:
                found.add(f"socket:[{fields[9]}]")
    return found


def _command(path: Path) -> str:
    try:
        words = path.read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(" ".join(w.decode(errors="replace").split()) for w in words if w)
    return (text[:197] + "...") if len(text) > 200 else text or "?"
