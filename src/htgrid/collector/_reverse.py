"""The two ends of a reversed connection (HTCondor's CCB; `_ccb` has the whole story):
the schedd's `ReverseConnector`, which asks a node's broker for a connection and takes
it when the node makes it, and the node's `connect_back`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from typing import Final

from htgrid.collector._ccb import CONNECT_ID, CcbContact, CcbRequest, parse_return_address
from htgrid.collector._errors import CollectorUnavailable, ProtocolError
from htgrid.collector.client import CollectorClient

__all__ = ["ReverseConnector", "connect_back"]

_log = logging.getLogger("htgrid.collector.ccb")

_ID_LINE: Final = 160  # a connect id's line, at most
_SAY_ID_WAIT: Final = 10.0  # how long a connection may take to say its connect id
_WAIT: Final = 30.0  # for a node's connection, unless told
# Connections that have not yet said their connect id, at most: past it the oldest is
# dropped, so a flood of silent connections costs the schedd a bounded number of file
# descriptors, and a node's connection (which says its id at once) still gets through.
_UNIDENTIFIED: Final = 64


def _shown(host: str, port: int) -> str:
    return f"<[{host}]:{port}>" if ":" in host else f"<{host}:{port}>"


class ReverseConnector:
    """The schedd's side: a listener for the connections nodes make back to it.

    `connect(contact)` asks the broker for a connection from the node and returns the
    socket once the node has made it; a connection that does not say a connect id being
    waited for within seconds is closed unanswered.
    """

    def __init__(
        self,
        host: str,
        home: str | os.PathLike[str],
        *,
        max_unidentified: int = _UNIDENTIFIED,
    ) -> None:
        """`host`: where to listen (the nodes connect there); `home`: the pool whose
        daemon token the schedd asks brokers with; `max_unidentified`: connections
        waiting to say their connect id, at most (the oldest goes first)."""
        self.host = host
        self.home = home
        self.max_unidentified = max_unidentified
        self._brokers: dict[str, CollectorClient] = {}
        self._sock: socket.socket | None = None
        self._pending: dict[str, asyncio.Future[socket.socket]] = {}
        self._accepting: asyncio.Task[None] | None = None
        # In order of arrival (dicts keep it): the oldest is the first dropped.
        self._saying: dict[asyncio.Task[None], None] = {}
        self._dropped = 0

    @property
    def address(self) -> str:
        """The return address nodes are told (`<host:port>`)."""
        if self._sock is None:
            raise CollectorUnavailable("the schedd does not listen for reversed connections")
        host, port = self._sock.getsockname()[:2]
        if host in ("0.0.0.0", "::"):  # listening on every address: the host's name
            host = socket.getfqdn()
        return _shown(str(host), int(port))

    async def start(self, port: int = 0) -> None:
        """Listen on `port` (that of an earlier start: the nodes, and the firewalls of
        their NAT, know it), or any free port when it is 0 or taken."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        for each in dict.fromkeys((port, 0)):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self.host, each))
                sock.listen(128)
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                if each == 0:
                    raise
                _log.warning("port %d is taken (%s): listening on another", each, exc.strerror)
                continue
            break
        self._sock = sock
        self._accepting = asyncio.create_task(self._accept(sock), name="ccb listener")

    async def aclose(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        for task in list(self._saying):
            task.cancel()
        await asyncio.gather(*self._saying, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
        for fut in self._pending.values():
            fut.cancel()
        for client in self._brokers.values():
            await client.aclose()

    async def connect(self, contact: CcbContact, timeout: float | None = None) -> socket.socket:
        """A connection the node of `contact` made to us, through its broker's request
        (NotRegistered, CollectorUnavailable, or TimeoutError when none comes)."""
        connect_id = secrets.token_urlsafe(24)
        fut: asyncio.Future[socket.socket] = asyncio.get_running_loop().create_future()
        self._pending[connect_id] = fut
        try:
            async with asyncio.timeout(timeout if timeout is not None else _WAIT):
                await self._ask(contact, connect_id)
                return await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                fut.result().close()  # it came as the wait ended: nobody takes it
            raise
        finally:
            del self._pending[connect_id]
            if not fut.done():
                fut.cancel()

    async def _ask(self, contact: CcbContact, connect_id: str) -> None:
        client = self._brokers.get(contact.broker)
        if client is None:
            client = CollectorClient(contact.broker, timeout=10.0, home=self.home, daemon=True)
            self._brokers[contact.broker] = client
        await client.ccb_request(contact.ccbid, connect_id, self.address)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                _log.warning("reversed connections: accept failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            while len(self._saying) >= self.max_unidentified:
                oldest = next(iter(self._saying))
                del self._saying[oldest]
                oldest.cancel()
                self._dropped += 1
                if self._dropped in (1, 10, 100) or self._dropped % 1000 == 0:
                    _log.warning(
                        "reversed connections: more than %d say nothing; dropped %d so far "
                        "(the latest from %s)",
                        self.max_unidentified,
                        self._dropped,
                        _peer(sock),
                    )
            task = asyncio.create_task(self._hear_id(sock))
            self._saying[task] = None
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._saying.pop(task, None)

    async def _hear_id(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            async with asyncio.timeout(_SAY_ID_WAIT):
                line = await _read_line(sock)
        except (TimeoutError, OSError):
            sock.close()
            return
        except BaseException:  # dropped for a newer one, or the listener closes
            sock.close()
            raise
        fut = self._pending.get(line)
        if fut is None or fut.done():
            sock.close()  # nobody waits for it: a late, repeated or made-up connection
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fut.set_result(sock)


def _peer(sock: socket.socket) -> str:
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return "a connection already gone"


async def _read_line(sock: socket.socket) -> str:
    """The connect id a reversed connection says first (one line, nothing after it:
    the node then waits for our TLS hello)."""
    loop = asyncio.get_running_loop()
    data = b""
    while not data.endswith(b"\n"):
        chunk = await loop.sock_recv(sock, _ID_LINE - len(data))
        if not chunk or len(data) + len(chunk) >= _ID_LINE:
            raise OSError("not a connect id")
        data += chunk
    text = data[:-1].decode("ascii", "replace")
    if not CONNECT_ID.fullmatch(text):
        raise OSError("not a connect id")
    return text


async def connect_back(request: CcbRequest, timeout: float) -> socket.socket:
    """The node's side: a connection to the schedd's return address that has said the
    connect id (OSError or TimeoutError when it cannot be made)."""
    if not CONNECT_ID.fullmatch(request.connect_id):
        raise ProtocolError("the broker's request has no valid connect id")
    host, port = parse_return_address(request.return_address)
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, target = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, target)
            await loop.sock_sendall(sock, f"{request.connect_id}\n".encode("ascii"))
    except BaseException:
        sock.close()
        raise
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
