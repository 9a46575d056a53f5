"""An httpx transport whose connections are closed when their TLS handshake is cancelled.

httpcore (1.0) closes the TCP connection under a failed TLS handshake on an error only:
a task cancelled while the server has not yet answered its hello leaves the socket open
until the garbage collector finds it (a ResourceWarning). That is what a daemon stopping
while its collector is silent does (a collector that died, its listening socket kept by
the master): the ad's and the negotiator's requests are cancelled mid-handshake; and a
condor GAHP server told to QUIT while a remote schedd does not answer.

Shared by the daemons' clients and the GAHP servers (htgrid.client).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["tls_transport"]


class _Stream(httpcore.AsyncNetworkStream):
    """A connection that is closed when its TLS handshake does not complete, whatever the
    reason."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # Nothing else holds the connection now (httpcore keeps no reference to it).
            # Closing it is synchronous underneath, so a second cancellation cannot stop it.
            await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    """httpcore's backend, its connections wrapped in `_Stream`."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def tls_transport(
    verify: ssl.SSLContext | bool, limits: httpx.Limits | None = None
) -> httpx.AsyncHTTPTransport:
    """httpx's transport (as `httpx.AsyncClient(verify=..., limits=...)` makes it),
    closing the connection of a cancelled TLS handshake at once."""
    transport = (  # httpx's own limits unless told (httpx.Limits() would be none at all)
        httpx.AsyncHTTPTransport(verify=verify)
        if limits is None
        else httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    )
    # httpx takes no network backend; its pool's is the one place to put ours. Another
    # httpx may keep it elsewhere: then its transport is used as it is (only the leak left).
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is not None and isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _Backend(backend)
    return transport
