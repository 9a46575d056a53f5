"""htgrid.client's TLS transport, built from httpx's and httpcore's public parts: it
raises httpx's errors as httpx's own transport does, and closes the socket of a request
cancelled in its TLS handshake (which httpx's own transport leaves to the GC)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpcore
import httpx
import pytest

from htgrid.client import tls_transport
from htgrid.client._transport import _as_httpx_errors

StartRequest = Callable[[str], tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]]


@pytest.mark.parametrize(
    "error",
    [
        getattr(httpcore, name)
        for name in dir(httpcore)
        if isinstance(getattr(httpcore, name), type)
        and issubclass(getattr(httpcore, name), Exception)
        and hasattr(httpx, name)  # (ConnectionNotAvailable is the pool's own, never out)
    ],
)
def test_each_httpcore_error_is_raised_as_httpxs_of_the_same_name(error: type[Exception]) -> None:
    # httpx's transport maps them so; an httpcore error this table does not know fails here.
    with pytest.raises(httpx.TransportError) as raised, _as_httpx_errors():
        raise error("what httpcore said")
    assert type(raised.value) is getattr(httpx, error.__name__)
    assert str(raised.value) == "what httpcore said"
    assert isinstance(raised.value.__cause__, error)


def test_an_error_not_httpcores_passes_as_it_is() -> None:
    with pytest.raises(KeyError), _as_httpx_errors():
        raise KeyError("x")


def test_nothing_listening_is_a_connect_error_naming_the_request() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    async def get() -> None:
        async with httpx.AsyncClient(transport=tls_transport(True)) as client:
            await client.get(f"https://127.0.0.1:{port}/v1/health")

    with pytest.raises(httpx.ConnectError) as raised:
        asyncio.run(get())
    assert raised.value.request.url.port == port


def test_a_silent_server_is_a_connect_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepted by the kernel, never answered
        port = listener.getsockname()[1]

        async def get() -> None:
            transport = tls_transport(ssl.create_default_context())
            async with httpx.AsyncClient(transport=transport, timeout=0.3) as client:
                await client.get(f"https://127.0.0.1:{port}/")

        with pytest.raises(httpx.ConnectTimeout):
            asyncio.run(get())


def test_a_request_cancelled_in_the_tls_handshake_leaves_no_socket_open(
    cancelled_in_handshake: Callable[[StartRequest], tuple[int, list[str]]],
) -> None:
    def start(address: str) -> tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]:
        client = httpx.AsyncClient(transport=tls_transport(ssl.create_default_context()))
        return client.get(f"https://{address}/"), client.aclose

    assert cancelled_in_handshake(start) == (0, [])


def test_httpxs_own_transport_leaves_it_to_the_garbage_collector(
    cancelled_in_handshake: Callable[[StartRequest], tuple[int, list[str]]],
) -> None:
    # Why the transport exists: if httpx's own ever closes it, this one can go.
    def start(address: str) -> tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]:
        client = httpx.AsyncClient(verify=ssl.create_default_context())
        return client.get(f"https://{address}/"), client.aclose

    left_open, warned = cancelled_in_handshake(start)
    assert left_open > 0 or warned


def test_a_kept_connection_the_server_closed_is_not_reused() -> None:
    """The pool's check of its connections at rest (readable: closed by the server)
    sees the close, and the next request goes on a new connection, unharmed."""
    connections = 0
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # at rest, closed behind the client's back (it asked keep-alive)
        await writer.wait_closed()
        closed.set()

    async def run() -> list[int]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, httpx.AsyncClient(transport=tls_transport(False)) as client:
            first = await client.get(f"http://127.0.0.1:{port}/")
            await closed.wait()
            second = await client.get(f"http://127.0.0.1:{port}/")
            return [first.status_code, second.status_code, connections]

    assert asyncio.run(run()) == [200, 200, 2]
