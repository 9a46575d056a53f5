"""How every htgrid API is served: its listening socket and its uvicorn server, made once.

    sock = unix_listener(path)                         # or tcp_listener(host), bound
    server = ApiServer(api_config(app, limits, protocol=PeerCredProtocol), signals=False)
    serving = await start(server, sock, "the API server", ScheddError)
    ...
    server.should_exit = True
    await serving

Each API (the schedd's on its socket and over TLS, the collector's, the execute node's)
runs on `GuardedProtocol` with the daemon's limits (slow clients cut off, see `_limits`)
on uvicorn's httptools protocol (h11's when httptools is not installed, see `_guard`),
over TLS with the pool's own context (TLS 1.2 at least, renewed in place by
`CertRotator`), without an access log, and with uvicorn's own lines left to the
process's logging, so that they land in the daemon's log like its other lines. A daemon
that handles SIGTERM and SIGINT itself serves with `signals=False`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import uvicorn

from htgrid._aio import wait_event
from htgrid.errors import HTGridError
from htgrid.net._guard import GuardedProtocol, guarded_protocol
from htgrid.net._limits import MAX_HEAD
from htgrid.pool import ApiLimits

__all__ = [
    "ApiServer",
    "api_config",
    "serve_connection",
    "start",
    "tcp_listener",
    "unix_listener",
]

_BACKLOG: Final = 2048  # uvicorn's, which it sets again once it serves
_KEEP_ALIVE: Final = 15  # seconds an idle connection is kept (below API_HEADER_TIMEOUT)
# uvicorn's `on_tick` renews the Date header at the ticks whose count is a multiple of
# this (once a second at its 0.1 s): each of `ApiServer`'s one-second ticks does.
_TICKS_A_SECOND: Final = 10


def tcp_listener(host: str) -> socket.socket:
    """A TCP socket for `host` (an IPv6 address has a colon), not yet bound.

    Made as TCP by name (IPPROTO_TCP, not 0): asyncio turns Nagle's algorithm off only on
    the connections of a socket that says it is TCP. With Nagle on, a response's last TLS
    record waited for the client's delayed ACK: 40 ms added to every remote request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def unix_listener(path: Path) -> socket.socket:
    """A Unix socket bound at `path`, made 0600 (nobody else connects), and listening: a
    client that finds the file connects (answered once the server serves), where one
    between the bind and the server's start was refused. A socket file left there is
    replaced (the caller holds the daemon's lock: it was a dead daemon's)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600, never wider first
    try:
        sock.bind(str(path))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    return sock


def api_config(
    app: Any,
    limits: ApiLimits,
    *,
    protocol: type[GuardedProtocol] = GuardedProtocol,
    tls: ssl.SSLContext | None = None,
    lifespan: bool = False,
    grace: int = 5,
    address: tuple[str, int] = ("127.0.0.1", 0),
) -> uvicorn.Config:
    """uvicorn's configuration of an API: `app` on `protocol` with `limits`, over `tls`
    when given; `lifespan` runs the app's startup and shutdown; a stopping server waits
    `grace` seconds for the requests in progress (a TLS close waits for the peer's
    close_notify, 30 s in asyncio: an idle client must not hold a stopping daemon that
    long). `address` is where `ApiServer.serve()` listens when given no socket."""
    return uvicorn.Config(
        app,
        host=address[0],
        port=address[1],
        http=guarded_protocol(limits, protocol),
        # No API serves WebSockets: an Upgrade stays with the guard (answered on HTTP/1.1),
        # never handed to a WebSocket protocol without its clocks.
        ws="none",
        h11_max_incomplete_event_size=MAX_HEAD,  # h11's cap on a head, as the guard's
        lifespan="on" if lifespan else "off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=grace,
        # An idle connection outlives the client's keep-alive (httpx drops its own after
        # 5 s): at uvicorn's 5 s both ends let go at once, and a request the client sent
        # on a connection as the server closed it failed ("Server disconnected without
        # sending a response": a node taken for lost, its job evicted).
        timeout_keep_alive=_KEEP_ALIVE,
        # The pool's context, in place of the one uvicorn would build from files: the
        # certificate rotation loads the renewed one into it.
        ssl_context_factory=(lambda config, default: tls) if tls is not None else None,
    )


class ApiServer(uvicorn.Server):
    """uvicorn's server of an API; `ready` is set once it listens (or gave up).

    With `signals=False` it leaves the process's SIGTERM and SIGINT alone (uvicorn would
    take them over while it serves): the daemon handles them and stops it.

    Its main loop (uvicorn's `Server.main_loop`, overridden) runs uvicorn's `on_tick`
    once a second, each time as uvicorn's once-a-second tick (the Date header, the
    notify callback, the request limit), and is woken at once by `should_exit` (a
    property here, set by whoever stops the server, or by uvicorn's signal handler): an
    idle server then costs one wake-up a second, not ten.
    """

    def __init__(self, config: uvicorn.Config, *, signals: bool = True) -> None:
        self._exiting = False
        self._exit = asyncio.Event()  # wakes the main loop
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__(config)
        self.signals = signals
        self.ready = asyncio.Event()

    @property
    def should_exit(self) -> bool:
        return self._exiting

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exiting = value
        if value and self._loop is not None:
            # Perhaps from a signal handler or another thread: the loop wakes for it.
            with contextlib.suppress(RuntimeError):  # it closed: nothing to wake
                self._loop.call_soon_threadsafe(self._exit.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + _TICKS_A_SECOND) % 864000  # uvicorn's wrap, a multiple of 10
            self._exit.clear()
            if not self._exiting:
                await wait_event(self._exit, 1.0)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self.signals:
            yield
            return
        with super().capture_signals():
            yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


async def start(
    server: ApiServer, sock: socket.socket, what: str, error: type[HTGridError]
) -> asyncio.Task[None]:
    """`server` serving on `sock` in a task, returned once it listens; `error` saying
    `what` did not start otherwise. The socket is closed when the serving ends."""
    serving = asyncio.create_task(server.serve(sockets=[sock]), name=what)
    serving.add_done_callback(lambda _: sock.close())  # uvicorn leaves given sockets open
    ready = asyncio.create_task(server.ready.wait())
    await asyncio.wait((serving, ready), return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if not server.started:
        await asyncio.wait((serving,))  # it gave up: its task ends
        raise error(f"{what} did not start: {serving.exception()!r}")
    return serving


async def serve_connection(
    server: ApiServer, sock: socket.socket, tls: ssl.SSLContext | None
) -> None:
    """Serve `server`'s API (started) on a connection made elsewhere (one an execute
    node opened to a schedd, through its broker), as on one its listener accepted: the
    same protocol, limits and TLS `tls` (the server's side), and it closes with the
    server. Relies on what uvicorn's `Server.startup` gives each connection's protocol
    (`server_state`, the lifespan's `state`), as `_guard` says."""
    config = server.config
    lifespan = getattr(server, "lifespan", None)
    state = lifespan.state if lifespan is not None else {}

    def protocol() -> asyncio.Protocol:
        made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=server.server_state, app_state=state
        )
        return made

    loop = asyncio.get_running_loop()
    handshake = config.timeout_keep_alive + 10 if tls is not None else None
    try:
        await loop.connect_accepted_socket(protocol, sock, ssl=tls, ssl_handshake_timeout=handshake)
    except BaseException:
        sock.close()
        raise
