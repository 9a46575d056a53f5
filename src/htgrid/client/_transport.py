"""An httpx transport whose connections are closed when their TLS handshake is cancelled.

httpcore (1.0) closes the TCP connection under a failed TLS handshake on an error only:
a task cancelled while the server has not yet answered its hello leaves the socket open
until the garbage collector finds it (a ResourceWarning). That is what a daemon stopping
while its collector is silent does (a collector that died, its listening socket kept by
the master): the ad's and the negotiator's requests are cancelled mid-handshake; and a
condor GAHP server told to QUIT while a remote schedd does not answer.

httpx's own transport takes no network backend, so this one is built from the public
parts of both libraries: httpcore's connection pool with the backend below, under an
httpx transport doing what httpx's does (requests and answers passed across, httpcore's
errors raised as httpx's).

The same transport runs over connections made another way (`connect`): an execute node
behind NAT connects to the schedd, through its broker (HTCondor's CCB), and the schedd's
TLS and HTTP then run over that socket exactly as over one it opened itself.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Final

import anyio
import anyio.abc
import anyio.streams.tls
import httpcore
import httpx

__all__ = ["Connect", "tls_transport"]

Connect = Callable[[float | None], Awaitable[socket.socket]]
"""Makes a connected socket (in `timeout` seconds) in place of a TCP connection."""

#: httpx's own limits, which its client uses unless told (httpx.Limits() is none at all).
_HTTPX_LIMITS: Final = httpx.Limits(max_connections=100, max_keepalive_connections=20)

#: httpcore's errors as httpx raises them, the most specific first.
_ERRORS: Final[tuple[tuple[type[Exception], type[httpx.TransportError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


def _readable(sock: socket.socket | None) -> bool:
    """Whether a connection at rest can be read: the server closed it (or it is gone)."""
    if sock is None or sock.fileno() < 0:
        return True
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))


class _Stream(httpcore.AsyncNetworkStream):
    """A connection that is closed when its TLS handshake does not complete, whatever the
    reason.

    httpcore asks each connection at rest whether it is readable before every request
    the pool sends; anyio answers that by building every attribute of the stream (a
    getpeername among them) each time, which was a tenth of a busy schedd's time with
    a few dozen connections to its execute nodes: the socket is looked up once here.
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._socket: socket.socket | None = None

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
            tls = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # Nothing else holds the connection now (httpcore keeps no reference to it).
            # Closing it is synchronous underneath, so a second cancellation cannot stop it.
            await self._stream.aclose()
            raise
        return _Stream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            if self._socket is None:
                self._socket = self._stream.get_extra_info("socket")
            return _readable(self._socket)
        return self._stream.get_extra_info(info)


class _SocketStream(httpcore.AsyncNetworkStream):
    """An anyio stream over a socket made by a `Connect`, as httpcore's asyncio backend
    wraps the sockets it opens (anyio's errors raised as httpcore's)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        self._socket: socket.socket | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            with anyio.fail_after(timeout):
                return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            with anyio.fail_after(timeout):
                await self._stream.send(buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                tls = await anyio.streams.tls.TLSStream.wrap(
                    self._stream,
                    ssl_context=ssl_context,
                    hostname=server_hostname,
                    standard_compatible=False,
                    server_side=False,
                )
        except BaseException as exc:
            await self._stream.aclose()
            if isinstance(exc, TimeoutError):
                raise httpcore.ConnectTimeout(str(exc)) from exc
            if isinstance(exc, ssl.SSLError | OSError | anyio.BrokenResourceError):
                raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
            raise
        return _SocketStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._stream.extra(anyio.streams.tls.TLSAttribute.ssl_object, None)
        if info == "is_readable":  # the socket looked up once, as `_Stream` does
            if self._socket is None:
                self._socket = self._stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
            return _readable(self._socket)
        return None


class _Backend(httpcore.AsyncNetworkBackend):
    """httpcore's asyncio backend (htgrid runs on asyncio alone), its connections wrapped
    in `_Stream`; with `connect`, each connection is the socket that makes."""

    def __init__(self, connect: Connect | None = None) -> None:
        self._backend = httpcore.AnyIOBackend()
        self._connect = connect

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._connect is not None:
            try:
                sock = await self._connect(timeout)
            except TimeoutError as exc:
                raise httpcore.ConnectTimeout(f"no connection in time: {exc}") from exc
            except Exception as exc:  # the connector's own errors say what failed
                raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
            return _SocketStream(await anyio.abc.SocketStream.from_socket(sock))
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


class _Body(httpx.AsyncByteStream):
    """An answer's body, httpcore's errors raised as httpx's."""

    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class _Transport(httpx.AsyncBaseTransport):
    """httpx's HTTP/1.1 transport over httpcore's pool with `_Backend`."""

    def __init__(
        self, context: ssl.SSLContext, limits: httpx.Limits, connect: Connect | None = None
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_Backend(connect),
        )

    async def __aenter__(self) -> _Transport:
        await self._pool.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        with _as_httpx_errors():
            await self._pool.__aexit__(exc_type, exc_value, traceback)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            answer = await self._pool.handle_async_request(sent)
        assert isinstance(answer.stream, AsyncIterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def tls_transport(
    verify: ssl.SSLContext | bool,
    limits: httpx.Limits | None = None,
    connect: Connect | None = None,
) -> httpx.AsyncBaseTransport:
    """A transport as `httpx.AsyncClient(verify=..., limits=...)` makes it, closing the
    connection of a cancelled TLS handshake at once; its connections made by `connect`
    when given (the URL's host then only names the server for TLS)."""
    if isinstance(verify, ssl.SSLContext):
        context = verify
    else:  # what httpx makes of True or False (its CA bundle, or no checks)
        context = httpx.create_ssl_context(verify=verify)
    return _Transport(context, limits if limits is not None else _HTTPX_LIMITS, connect)
