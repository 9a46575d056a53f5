"""A collector on a loopback port (TLS, the pool's tokens), for the command-line tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.testing.collector import collector_thread, pool_home

DOMAIN = "collector.test"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pool home with its security material, as $HTGRID_HOME; ~ is a scratch directory
    too, so no token of the real user's is seen."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("HTGRID_TOKEN", raising=False)
    path = pool_home(tmp_path / "pool", DOMAIN)
    monkeypatch.setenv("HTGRID_HOME", str(path))
    return path


@pytest.fixture
def pool(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`host:port` of a running collector, also set as HTGRID_COLLECTOR_HOST."""
    with collector_thread(home) as address:
        monkeypatch.setenv("HTGRID_COLLECTOR_HOST", address)
        yield address
