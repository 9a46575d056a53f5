"""Job ids ("42.0") and the identity a caller acts as."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ID_MAX", "Identity", "JobId"]

_JOB_ID = re.compile(r"\s*(\d+)\.(\d+)\s*")
#: The largest cluster or proc id (the queue stores them as SQLite's 64-bit integers).
ID_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True, order=True)
class JobId:
    """A job's id: its cluster (from 1) and its proc within the cluster (from 0)."""

    cluster: int
    proc: int

    def __str__(self) -> str:
        return f"{self.cluster}.{self.proc}"

    @classmethod
    def parse(cls, text: str) -> JobId:
        """`JobId.parse("42.0")`; ValueError for anything else."""
        m = _JOB_ID.fullmatch(text)
        if m is None:
            raise ValueError(f"not a job id (cluster.proc): {text!r}")
        cluster, proc = int(m.group(1)), int(m.group(2))
        if cluster > ID_MAX or proc > ID_MAX:
            raise ValueError(f"not a job id: {text!r} is past the 64 bits an id may have")
        return cls(cluster, proc)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking: a user name, compared with the jobs' `Owner`.

    `admin` is HTCondor's queue super user (QUEUE_SUPER_USERS): it may act on anyone's
    jobs and submit jobs for another owner.
    """

    name: str
    admin: bool = False

    def may_act_on(self, owner: str) -> bool:
        """Whether this identity may hold, release, remove or edit `owner`'s jobs."""
        return self.admin or self.name == owner
