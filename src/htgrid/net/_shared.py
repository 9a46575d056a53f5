"""One port, two protocols: the daemon's HTTPS API and HTCondor's CEDAR.

    serving = await start_shared(server, sock, "the collector", CollectorError, tls, cedar)

Each accepted connection is told apart by its first byte, which the client always sends
first: 0x16 opens a TLS ClientHello (the HTTPS API, served by `server`, uvicorn's, as on
a listener of its own), anything else is a CEDAR packet header (its end flag, 0 or 1)
and goes to the `CedarService`. A connection that sends nothing within the handshake
timeout is closed. At most NETWORK_MAX_PENDING_CONNECTS connections are held at once,
those not yet told apart and CEDAR's (an HTTPS one is uvicorn's once its TLS handshake
is done): past it a new one is closed at once, and the others go on. A shared port
(`_shared_port`) hands a connection that names another daemon's ID to that daemon. The listener is closed, and the CEDAR connections still open are
ended, when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import Final

from htgrid.errors import HTGridError
from htgrid.net._errors import CedarError
from htgrid.net._listen import ApiServer, serve_connection
from htgrid.net._shared_port import (
    SharedPort,
    pass_connection,
    serve_cedar,
    shared_port_request,
)
from htgrid.net.cedar import CedarService

__all__ = ["start_shared"]

_log = logging.getLogger("htgrid.net")
_TLS_RECORD: Final = 0x16  # a TLS handshake record: the ClientHello
FIRST_BYTE_TIMEOUT: Final = 20.0
REFUSALS_LOGGED_EVERY: Final = 10.0  # seconds between two lines saying the port is full


async def start_shared(
    server: ApiServer,
    sock: socket.socket,
    what: str,
    error: type[HTGridError],
    tls: ssl.SSLContext,
    cedar: CedarService,
    shared: SharedPort | None = None,
) -> asyncio.Task[None]:
    """`server` (HTTPS) and `cedar` serving on the listening `sock`, in a task returned
    once they listen; `error` saying `what` did not start otherwise. With `shared`, the
    port is a shared port: connections for another daemon's ID are handed to it."""
    serving = asyncio.create_task(server.serve(sockets=[]), name=what)
    ready = asyncio.create_task(server.ready.wait())
    await asyncio.wait((serving, ready), return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if not server.started:
        sock.close()
        await asyncio.wait((serving,))
        raise error(f"{what} did not start: {serving.exception()!r}")
    sock.setblocking(False)
    accepting = asyncio.create_task(
        _accept(server, sock, tls, cedar, shared), name=f"{what}: accept"
    )

    def stop(_: object) -> None:
        accepting.cancel()
        sock.close()

    serving.add_done_callback(stop)
    return serving


async def _accept(
    server: ApiServer,
    sock: socket.socket,
    tls: ssl.SSLContext,
    cedar: CedarService,
    shared: SharedPort | None,
) -> None:
    loop = asyncio.get_running_loop()
    open_cedar: set[asyncio.Task[None]] = set()
    cap = cedar.security.max_connections
    refused, said = 0, -REFUSALS_LOGGED_EVERY
    try:
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                # Out of descriptors, or a connection reset before it was taken: the
                # listener itself is fine; wait a moment rather than spin.
                _log.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if len(open_cedar) >= cap:
                # Full: the newcomer goes, those being served are not disturbed.
                conn.close()
                refused += 1
                if loop.time() - said >= REFUSALS_LOGGED_EVERY:
                    _log.warning(
                        "refused %d connection(s): %d open, the most this port holds "
                        "(NETWORK_MAX_PENDING_CONNECTS = %d)",
                        refused,
                        len(open_cedar),
                        cap,
                    )
                    refused, said = 0, loop.time()
                continue
            task = asyncio.create_task(_dispatch(server, conn, tls, cedar, shared))
            open_cedar.add(task)
            task.add_done_callback(open_cedar.discard)
    finally:
        for task in open_cedar:
            task.cancel()
        await asyncio.gather(*open_cedar, return_exceptions=True)


async def _first_byte(conn: socket.socket, timeout: float) -> int | None:
    """The connection's first byte, left unread; None if it closed or said nothing."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await asyncio.wait_for(readable, timeout)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(conn.fileno())
    try:
        data = conn.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError, OSError):
        return None
    return data[0] if data else None


async def _dispatch(
    server: ApiServer,
    conn: socket.socket,
    tls: ssl.SSLContext,
    cedar: CedarService,
    shared: SharedPort | None,
) -> None:
    conn.setblocking(False)
    try:
        first = await _first_byte(conn, FIRST_BYTE_TIMEOUT)
    except BaseException:
        conn.close()
        raise
    if first is None:
        conn.close()
        return
    if first == _TLS_RECORD:
        # uvicorn's own from here: its connection is tracked, and ended, by the server.
        with contextlib.suppress(OSError, ssl.SSLError, ConnectionError):
            await serve_connection(server, conn, tls)
        return
    if shared is not None and not await _stays(conn, shared):
        conn.close()
        return
    await serve_cedar(conn, cedar)


async def _stays(conn: socket.socket, shared: SharedPort) -> bool:
    """Whether this daemon serves the connection: it names no other daemon behind the
    shared port (else it is handed to that one, or refused when there is none)."""
    peer = "?"
    with contextlib.suppress(OSError):
        host, port = conn.getpeername()[:2]
        peer = f"{host}:{port}"
    try:
        target = await shared_port_request(conn, FIRST_BYTE_TIMEOUT)
    except (CedarError, OSError, TimeoutError) as exc:
        _log.warning("shared port request from %s refused: %s", peer, exc)
        return False
    if target is None or target == shared.own:
        return True
    try:
        pass_connection(conn, shared.directory, target)
    except OSError as exc:
        _log.warning(
            "shared port request from %s for %r: no such daemon behind this port (%s)",
            peer,
            target,
            exc.strerror or exc,
        )
    return False
