"""The daemons' logs: SchedLog, CollectorLog, StartLog, each a daemon's stderr."""

from __future__ import annotations

import logging

__all__ = ["configure_logging"]


def configure_logging() -> None:
    """Log lines as HTCondor's daemons write them: `MM/DD/YY HH:MM:SS message`."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%m/%d/%y %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("uvicorn", "httpx", "httpcore"):  # a line per request drowns the log
        logging.getLogger(noisy).setLevel(logging.WARNING)
