"""The condor type's GridResource and GridJobId (HTCondor's formats).

    GridResource   condor <remote schedd name> <remote pool host:port>
    GridJobId      condor <schedd> <pool> <cluster>.<proc>

Before the remote id is known the job holds its submission tag in GridSubmitTag
(`_gridids.new_tag`): it travels in the remote ad, and a lost submit is found by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import grid_job_id_words

__all__ = ["CondorJobId", "CondorResourceName"]

_JOB_ID = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class CondorResourceName:
    """A condor GridResource: the remote schedd's name and its pool's collector."""

    schedd: str
    pool: str

    @property
    def key(self) -> str:
        return f"condor {self.schedd} {self.pool}"

    @classmethod
    def parse(cls, grid_resource: str) -> CondorResourceName:
        """Read `condor <schedd> <pool>`; UnsupportedGridJob naming what is wrong."""
        words = grid_resource.split()
        if not words or words[0].lower() != "condor":
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not of type condor")
        if len(words) < 2:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r}: missing schedd name")
        if len(words) < 3:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: missing pool name (condor <schedd> <host:port>)"
            )
        if len(words) > 3:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected condor <schedd> <host:port>"
            )
        return cls(words[1], words[2])


@dataclass(frozen=True, slots=True)
class CondorJobId:
    """A condor GridJobId: the remote schedd, its pool, and the job's id there."""

    schedd: str
    pool: str
    cluster: int
    proc: int

    @property
    def remote(self) -> str:
        return f"{self.cluster}.{self.proc}"

    def __str__(self) -> str:
        return f"condor {self.schedd} {self.pool} {self.remote}"

    @classmethod
    def parse(cls, text: object) -> CondorJobId | None:
        """The id in a GridJobId value; None when absent or not a condor id."""
        words = grid_job_id_words(text, ("condor",), (4,))
        match = None if words is None else _JOB_ID.fullmatch(words[3])
        if words is None or match is None:
            return None
        return cls(words[1], words[2], int(match[1]), int(match[2]))
