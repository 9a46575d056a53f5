"""The grid manager's errors: each a `GridError`, itself an `HTGridError`.

GridError
├── AlreadyRunning       (another grid manager runs on this queue)
├── UnsupportedGridJob   (a GridResource this grid manager cannot run: the job is held)
├── GahpUnavailable      (a GAHP server cannot be started; its resource counts as down)
└── BadTransition        (a job state machine was given an event its table lacks: our bug)

GAHP conversation failures keep their own types (`htgrid.gahp.GahpError`); queue failures
keep theirs (`htgrid.queue.QueueError`). Both are HTGridErrors already.
"""

from __future__ import annotations

from htgrid.errors import HTGridError
from htgrid.gahp import GahpRequestRefused, GahpServerExited, GahpTimeout, LocalGahpError

__all__ = [
    "ANSWER_LOST",
    "NO_ANSWER",
    "AlreadyRunning",
    "BadTransition",
    "GahpUnavailable",
    "GridError",
    "UnsupportedGridJob",
]


class GridError(HTGridError):
    """The grid manager could not do something."""


class AlreadyRunning(GridError):
    """Another grid manager runs on this queue (two would submit jobs twice)."""


class UnsupportedGridJob(GridError):
    """The job's GridResource names something this grid manager cannot run."""


class GahpUnavailable(GridError):
    """A GAHP server could not be started."""


class BadTransition(GridError):
    """A state machine got an event its transition table has no entry for."""


#: The GAHP server died or hung with the request: it may or may not have been carried out.
ANSWER_LOST = (GahpServerExited, GahpTimeout)
#: No result came: the answer was lost, the GAHP refused the request (an E or F line) or
#: does not know the command, or no GAHP server could be started.
NO_ANSWER = (*ANSWER_LOST, GahpRequestRefused, LocalGahpError, GahpUnavailable)
