"""A collector on a loopback port, for the command-line tests."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from htgrid.collector.daemon import make_server


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`host:port` of a running collector, also set as HTGRID_COLLECTOR_HOST."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server("127.0.0.1", port)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    address = f"127.0.0.1:{port}"
    monkeypatch.setenv("HTGRID_COLLECTOR_HOST", address)
    yield address
    server.should_exit = True
    thread.join(timeout=10)
