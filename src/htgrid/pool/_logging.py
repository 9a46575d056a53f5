"""The daemons' logs: SchedLog, CollectorLog, StartLog, each a daemon's stderr."""

from __future__ import annotations

import logging
import time
from typing import Final

__all__ = ["configure_logging"]

#: HTCondor's daemons' time stamp: `MM/DD/YY HH:MM:SS`.
_STAMP: Final = "%m/%d/%y %H:%M:%S"


class _Stamped(logging.Formatter):
    """`time message`; the stamp made once a second, not once a line: a burst of jobs
    writes thousands of lines a second, each of which paid for a `localtime` and a
    `strftime` (a few per cent of an execute node's CPU a job)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(message)s", _STAMP)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:  # the handler's lock is held: one thread at a time
            self._second, self._stamp = second, time.strftime(_STAMP, time.localtime(second))
        return self._stamp


def configure_logging() -> None:
    """Log lines as HTCondor's daemons write them: `MM/DD/YY HH:MM:SS message`."""
    # No record carries what no line shows (the logging HOWTO's "Optimization").
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler()
    handler.setFormatter(_Stamped())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("uvicorn", "httpx", "httpcore"):  # a line per request drowns the log
        logging.getLogger(noisy).setLevel(logging.WARNING)
