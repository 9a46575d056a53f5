"""The daemons' log lines: `MM/DD/YY HH:MM:SS message`, as HTCondor's daemons write them,
the stamp right for every line though it is made once a second."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator

import pytest

from htgrid.pool import configure_logging


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    kept = root.handlers[:], root.level
    flags = logging.logThreads, logging.logProcesses, logging.logMultiprocessing
    configure_logging()
    out = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    yield out
    root.handlers[:], level = kept
    root.setLevel(level)
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = flags


def _line(created: float, message: str) -> logging.LogRecord:
    record = logging.LogRecord("htgrid.test", logging.INFO, __file__, 1, message, (), None)
    record.created = created
    return record


def test_each_line_has_its_own_seconds_stamp(log: io.StringIO) -> None:
    base = 1_795_000_000.0
    logger = logging.getLogger("htgrid.test")
    for created, message in ((base, "a"), (base + 0.5, "b"), (base + 1.2, "c"), (base, "d")):
        logger.handle(_line(created, message))
    stamps = [time.strftime("%m/%d/%y %H:%M:%S", time.localtime(base + s)) for s in (0, 0, 1, 0)]
    assert log.getvalue().splitlines() == [
        f"{stamp} {message}" for stamp, message in zip(stamps, "abcd", strict=True)
    ]
