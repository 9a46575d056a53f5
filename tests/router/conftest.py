"""The router tests' queue: a real one in the test's directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.queue import JobQueue


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, fsync=False) as q:
        yield q
