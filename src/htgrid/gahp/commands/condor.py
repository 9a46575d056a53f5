"""The condor GAHP's commands (HTCondor's condor_c-gahp, `schedd_client.cpp` and
`gahp-client.cpp`), as the grid manager sends them and the condor GAHP server answers them.

Job ids are the remote queue's `<cluster>.<proc>`; ads are new ClassAd syntax on one line,
`[ A = 1; B = "x" ]`, escaped as every GAHP field is:

    CONDOR_JOB_SUBMIT <id> <schedd> <ad>            -> S <c.p> NULL | F <-1.-1|NULL> <err>
    CONDOR_JOB_STATUS_CONSTRAINED <id> <schedd> <constraint>
                                                    -> S NULL <n> <ad>*n | F <err> 0
    CONDOR_JOB_REMOVE|HOLD|RELEASE <id> <schedd> <c.p> <reason>    -> S NULL | F <err>
    CONDOR_JOB_UPDATE <id> <schedd> <c.p> <ad of attributes>       -> S NULL | F <err>
    CONDOR_JOB_UPDATE_CONSTRAINED <id> <schedd> <constraint> <ad>  -> S NULL | F <err>
    CONDOR_JOB_STAGE_IN <id> <schedd> <ad with ClusterId, ProcId>  -> S NULL | F <err>
    CONDOR_JOB_STAGE_OUT <id> <schedd> <c.p>                       -> S NULL | F <err>
    CONDOR_JOB_REFRESH_PROXY <id> <schedd> <c.p> <file> [<expiry>] -> S NULL | F <err>
    CONDOR_JOB_UPDATE_LEASE <id> <schedd> <n> (<c.p> <expiry>)*n   -> S NULL <c.p,...|NULL>
                                                                    | F <err> NULL

`<schedd>` is the remote schedd's name in its pool (NULL: the pool's first), or its URL.
Status ads carry `ServerTime`, the remote daemon's clock, written last. The error words
the grid manager matches are this module's: the schedd could not be reached (DOWN: the
resource is down), the job needs nothing more done (ALREADY), a sandbox too large for
the remote schedd (INPUT_TOO_LARGE, OUTPUT_TOO_LARGE: HTCondor's hold codes 32 and 33),
an answer over the GAHP's line limit (TOO_LONG).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from htgrid.gahp._codec import unnull
from htgrid.gahp.commands import Spec

__all__ = [
    "ALREADY",
    "ALREADY_DONE",
    "BAD_JOB_STATUS",
    "DOWN",
    "HOLD",
    "INPUT_TOO_LARGE",
    "JOB_NOT_FOUND",
    "OUTPUT_TOO_LARGE",
    "PERMISSION_DENIED",
    "REFRESH_PROXY",
    "RELEASE",
    "REMOVE",
    "STAGE_IN",
    "STAGE_OUT",
    "STATUS",
    "SUBMIT",
    "TOO_LONG",
    "UPDATE",
    "UPDATE_CONSTRAINED",
    "UPDATE_LEASE",
    "Done",
    "Leases",
    "Renewed",
    "Statuses",
    "Submitted",
]

SUBMIT = Spec("CONDOR_JOB_SUBMIT", 2)
STATUS = Spec("CONDOR_JOB_STATUS_CONSTRAINED", 2)
REMOVE = Spec("CONDOR_JOB_REMOVE", 3)
HOLD = Spec("CONDOR_JOB_HOLD", 3)
RELEASE = Spec("CONDOR_JOB_RELEASE", 3)
UPDATE = Spec("CONDOR_JOB_UPDATE", 3)
UPDATE_CONSTRAINED = Spec("CONDOR_JOB_UPDATE_CONSTRAINED", 3)
STAGE_IN = Spec("CONDOR_JOB_STAGE_IN", 2)
STAGE_OUT = Spec("CONDOR_JOB_STAGE_OUT", 2)
REFRESH_PROXY = Spec("CONDOR_JOB_REFRESH_PROXY", 3, variadic=True)
UPDATE_LEASE = Spec("CONDOR_JOB_UPDATE_LEASE", 2, variadic=True)

#: HTCondor's words for an act on a job that needs nothing more done.
JOB_NOT_FOUND: Final = "Job not found"
ALREADY_DONE: Final = "Already done"
BAD_JOB_STATUS: Final = "Bad job status"
PERMISSION_DENIED: Final = "Permission denied"
#: A failed act's error that says the job needs nothing more done.
ALREADY: Final = re.compile(r"already done|job not found|not found|bad job status", re.IGNORECASE)
#: How a stage-in's error starts when the remote daemon refused the input as too large.
INPUT_TOO_LARGE: Final = "Transfer input too large: "
#: How a stage-out's error starts when the remote daemon refused the output as too large.
OUTPUT_TOO_LARGE: Final = "Transfer output too large: "
#: An error that says the remote schedd could not be reached (HTCondor's
#: GahpErrorResourceDown looks for the first two: "Error locating schedd NAME: ..." and
#: "Failed to connect to schedd NAME at URL: ..."); anything else (refused, not
#: authorized) leaves it up.
DOWN: Final = re.compile(
    r"failed to connect|error locating schedd|connection (refused|reset|error|failed)"
    r"|timed? ?out|unreachable|no route to host|cannot reach|not answer",
    re.IGNORECASE,
)
#: An error that says the answer was over the line limit.
TOO_LONG: Final = re.compile(r"over the (\d+ )?limit", re.IGNORECASE)

_OK = "S"
_FAILED = "F"
_NULL = "NULL"


def _failure(fields: Sequence[str], at: int = 1) -> str | None:
    """None after an S; else the error (at field `at`; "" when none was given)."""
    if fields[:1] == (_OK,):
        return None
    error = fields[at] if len(fields) > at else ""
    return "" if unnull(error) is None else error


@dataclass(frozen=True, slots=True)
class Done:
    """`S NULL` or `F <error>`: every command's result but SUBMIT's, STATUS's and LEASE's."""

    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        return (_OK, _NULL) if self.error is None else (_FAILED, self.error)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Done:
        return cls(_failure(fields))


@dataclass(frozen=True, slots=True)
class Submitted:
    """CONDOR_JOB_SUBMIT's result: the remote job's `c.p`, or the error (and the id the
    server gives a failed submit: `-1.-1` or NULL)."""

    job_id: str | None = None
    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        if self.error is None:
            return (_OK, self.job_id or _NULL, _NULL)
        return (_FAILED, self.job_id or _NULL, self.error)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Submitted:
        job_id = unnull(fields[1]) if len(fields) > 1 else None
        if fields[:1] == (_OK,):
            return cls(job_id)
        at = 2 if fields[:1] == (_FAILED,) and len(fields) > 2 else 1
        return cls(job_id, _failure(fields, at) or "")


@dataclass(frozen=True, slots=True)
class Statuses:
    """CONDOR_JOB_STATUS_CONSTRAINED's result: the matching jobs' ads, or the error."""

    ads: tuple[str, ...] = ()
    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        if self.error is None:
            return (_OK, _NULL, str(len(self.ads)), *self.ads)
        return (_FAILED, self.error, "0")

    @classmethod
    def of(cls, fields: Sequence[str]) -> Statuses:
        error = _failure(fields)
        if error is not None:
            return cls(error=error)
        if len(fields) < 3 or not fields[2].isdigit():
            return cls(error=f"a {STATUS.name} result without a count: {tuple(fields[1:3])}")
        return cls(tuple(fields[3 : 3 + int(fields[2])]))


@dataclass(frozen=True, slots=True)
class Leases:
    """CONDOR_JOB_UPDATE_LEASE's request after the schedd: each job's new expiration."""

    leases: tuple[tuple[str, int], ...]

    def args(self) -> tuple[str, ...]:
        return (
            str(len(self.leases)),
            *(word for job, when in self.leases for word in (job, str(when))),
        )

    @classmethod
    def of(cls, args: Sequence[str]) -> Leases:
        """The pairs after the count (the server has checked them)."""
        pairs = args[1:]
        return cls(tuple((pairs[i], int(pairs[i + 1])) for i in range(0, len(pairs), 2)))


@dataclass(frozen=True, slots=True)
class Renewed:
    """CONDOR_JOB_UPDATE_LEASE's result: the jobs whose lease was updated, or the error."""

    jobs: tuple[str, ...] = ()
    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        if self.error is None:
            return (_OK, _NULL, ",".join(self.jobs) or _NULL)
        return (_FAILED, self.error, _NULL)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Renewed:
        error = _failure(fields)
        if error is not None:
            return cls(error=error)
        updated = unnull(fields[2]) if len(fields) > 2 else None
        return cls(tuple(updated.split(",")) if updated else ())
