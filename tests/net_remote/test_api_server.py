"""The one way an API is served (htgrid.net._listen): a 0600 Unix socket replacing a
dead daemon's, a server that leaves the daemon's signal handlers alone, and a start
that waits until it listens or says why it did not."""

from __future__ import annotations

import asyncio
import signal
import socket
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from htgrid.errors import HTGridError
from htgrid.net._listen import ApiServer, api_config, start, unix_listener
from htgrid.pool import DEFAULT_LIMITS


class NotStarted(HTGridError):
    pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


def test_a_unix_listener_is_private_and_replaces_a_dead_daemons(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # left behind by a daemon killed with -9
    sock = unix_listener(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_ISSOCK(path.stat().st_mode)
    finally:
        sock.close()


def test_an_api_served_on_its_socket_leaves_the_daemons_signals_alone(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"

    async def run() -> tuple[str, bool]:
        def mine(signum: int, frame: object) -> None: ...

        before = signal.signal(signal.SIGTERM, mine)
        try:
            server = ApiServer(api_config(_app, DEFAULT_LIMITS, grace=1), signals=False)
            serving = await start(server, unix_listener(path), "the test API", NotStarted)
            transport = httpx.AsyncHTTPTransport(uds=str(path))
            async with httpx.AsyncClient(transport=transport) as client:
                answer = (await client.get("http://api/")).text
            kept = signal.getsignal(signal.SIGTERM) is mine  # while it serves
            server.should_exit = True
            await serving
            return answer, kept and signal.getsignal(signal.SIGTERM) is mine
        finally:
            signal.signal(signal.SIGTERM, before)

    assert asyncio.run(run()) == ("served", True)


def test_a_server_that_cannot_listen_says_so() -> None:
    async def run() -> None:
        sock = socket.socket(socket.AF_UNIX)
        sock.close()  # nothing to listen on
        server = ApiServer(api_config(_app, DEFAULT_LIMITS), signals=False)
        await start(server, sock, "the test API", NotStarted)

    with pytest.raises(NotStarted, match=r"^the test API did not start: "):
        asyncio.run(run())
