"""A request of the condor GAHP cancelled in its TLS handshake (a QUIT while the remote
schedd accepts connections and never answers) closes its socket at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from htgrid.backends.condor._http import Remotes, RemoteSettings
from htgrid.client import TokenSource

StartRequest = Callable[[str], tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]]


def test_a_request_cancelled_in_the_tls_handshake_leaves_no_socket_open(
    cancelled_in_handshake: Callable[[StartRequest], tuple[int, list[str]]],
) -> None:
    def start(address: str) -> tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]:
        remotes = Remotes(RemoteSettings(timeout=30), TokenSource())

        async def request() -> None:
            schedd = await remotes.schedd(f"https://{address}")
            await schedd.request("GET", "/v1/jobs")

        return request(), remotes.aclose

    assert cancelled_in_handshake(start) == (0, [])
