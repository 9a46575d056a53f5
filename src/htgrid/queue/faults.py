"""One job's failure, contained: what the daemons' loops over jobs share.

The periodic pass, the negotiator, the shadows, the event-log writer, the local runner
and the grid manager each handle many jobs in one loop. What handling one job raises (an
attribute of an unexpected type, an expression that cannot be evaluated, an OSError on
that job's file, a bug met by that job alone) is that job's problem: the loop holds the
job with a reason naming what failed, logs it once, and goes on with the others.

What no hold can contain is the daemon's own fault and still propagates
(`daemon_fault`): the queue's database failing or closed, memory exhausted,
cancellation, an interrupt.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from htgrid.errors import HTGridError
from htgrid.queue._errors import StoreError
from htgrid.queue._ids import JobId

__all__ = ["FaultLog", "JobFailure", "daemon_fault", "problem"]

#: The longest problem text put into a HoldReason.
_MAX_PROBLEM: Final = 500
#: Jobs remembered as reported (the oldest are forgotten first).
_MAX_REMEMBERED: Final = 10_000


def daemon_fault(exc: BaseException) -> bool:
    """Whether `exc` is the daemon's own failure rather than one job's: it must propagate."""
    if not isinstance(exc, Exception):  # CancelledError, KeyboardInterrupt, SystemExit
        return True
    return isinstance(exc, MemoryError | StoreError | sqlite3.Error)


def problem(exc: BaseException) -> str:
    """What went wrong, as a HoldReason says it to the job's owner."""
    if isinstance(exc, RecursionError):
        text = "an expression is nested too deeply to evaluate"
    elif isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else None
        text = exc.strerror if where is None else f"{exc.strerror}: {where}"
    elif isinstance(exc, HTGridError):
        text = str(exc) or type(exc).__name__
    else:
        detail = str(exc)
        text = f"internal error ({type(exc).__name__}{': ' + detail if detail else ''})"
    text = " ".join(text.split())  # one line, as every HoldReason
    return text if len(text) <= _MAX_PROBLEM else text[: _MAX_PROBLEM - 3] + "..."


@dataclass(frozen=True, slots=True)
class JobFailure:
    """A job one loop could not handle: what failed, and whether the job is now held."""

    job_id: JobId
    problem: str
    held: bool
    #: The exception, for the daemon's log (a bug's traceback); not compared.
    error: BaseException | None = field(default=None, compare=False, repr=False)


class FaultLog:
    """Logs each job's failure once while it lasts, not at every pass of its loop."""

    def __init__(self, logger: logging.Logger, loop: str) -> None:
        self._logger = logger
        self._loop = loop
        self._reported: dict[JobId, str] = {}

    def report(self, failure: JobFailure) -> bool:
        """Log `failure` unless the same problem of the job was logged; whether it was."""
        if self._reported.get(failure.job_id) == failure.problem:
            return False
        if len(self._reported) >= _MAX_REMEMBERED:
            del self._reported[next(iter(self._reported))]
        self._reported[failure.job_id] = failure.problem
        outcome = "held it" if failure.held else "could not hold it; skipping it"
        error = failure.error
        # A bug's traceback is worth its lines once; a job's own bad value is not.
        trace = error is not None and not isinstance(error, HTGridError | OSError | RecursionError)
        self._logger.error(
            "job %s: the %s failed on it (%s); %s",
            failure.job_id,
            self._loop,
            failure.problem,
            outcome,
            exc_info=error if trace else None,
        )
        return True

    def pass_over(self, failures: Iterable[JobFailure]) -> None:
        """The failures of a whole pass of a loop: each logged once while it lasts; a job
        that no longer fails is forgotten (logged again if it fails again)."""
        failed = set()
        for failure in failures:
            failed.add(failure.job_id)
            self.report(failure)
        for job_id in [j for j in self._reported if j not in failed]:
            del self._reported[job_id]

    def cleared(self, job_id: JobId) -> None:
        """The job was handled again without failing: a new failure is logged anew."""
        self._reported.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._reported
