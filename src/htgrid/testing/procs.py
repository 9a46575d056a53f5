"""The state of a job's processes as /proc shows it, for tests of suspension."""

from __future__ import annotations

import os

__all__ = ["group_states", "group_stopped"]


def group_states(pgid: int) -> list[str]:
    """The state letters (R, S, D, T...) of the processes of process group `pgid`."""
    states = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and fields[2] == str(pgid):
            states.append(fields[0])
    return states


def group_stopped(pgid: int) -> bool:
    """Whether the group's processes are stopped (SIGSTOP): some in state T, none
    running or sleeping. A shell whose child was stopped between its vfork and its exec
    waits for it in D, stopped all the same."""
    states = group_states(pgid)
    return "T" in states and all(s in ("T", "t", "D") for s in states)
