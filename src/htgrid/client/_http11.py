"""`Http11`: HTTP/1.1 on asyncio's own streams, a lean client of one server.

A schedd makes a request of an execute node for each job it starts there (and a few a
claim): with twenty nodes, hundreds a second. httpx spent ~1 ms of the schedd's CPU on
each (its request and answer models, httpcore's pool scanning its connections before
every request, anyio's TLS in Python), most of a busy schedd's time. This is the part of
HTTP/1.1 those requests need, on asyncio's streams (its TLS in C): a request with a body
whole or streamed (chunked); the answer's status, headers and body by Content-Length,
chunks, or to the end, read whole or a part at a time; connections kept for the next
request (idle ones for `IDLE_EXPIRY` seconds, well within the server's keep-alive, so
that both do not let go of one at once).

The connections go to one server: over TCP with TLS (`tls`), on a Unix socket (`unix`), or
over TLS on sockets something else makes (`tls_over`: a node behind NAT connects back to
the schedd through its broker). A request cancelled part way drops its connection.
Errors are OSError: TimeoutError when the server does not answer in time, ssl's errors
(a certificate refused) and ConnectionError (the connection lost or refused, an answer
that is not HTTP) otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Final, Protocol, Required, TypedDict, Unpack
from urllib.parse import urlencode

__all__ = [
    "IDLE_EXPIRY",
    "SHORT_AT_ONCE",
    "Answer",
    "Http11",
    "Options",
    "Parts",
    "Streamed",
    "said",
]

IDLE_EXPIRY: Final = 10.0
"""Seconds a connection is kept idle (htgrid's servers keep theirs 15 s). At 5 s, a
node's connections beyond the one its activations keep busy were gone between two
negotiation cycles, and each burst of claims made TLS handshakes again."""

_HEAD_MAX: Final = 1 << 16  # an answer's status line and headers
SHORT_AT_ONCE: Final = 4
"""Short requests in progress at once; the server answers them one after another anyway.

A schedd's requests to a node overlap rarely but at bursts (a node's jobs ending at
once: their activations); each TLS connection of asyncio's holds a 256 KB buffer, and
one a request in a burst made most of the schedd's memory per running job (200 jobs on
20 nodes: 425 KB a job, against 170 over httpx), while keeping fewer at rest made a
TLS handshake of most of them."""

_MAX_IDLE: Final = SHORT_AT_ONCE + 2  # connections kept at rest

Open = Callable[[float | None], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""Opens a connection to the server in `timeout` seconds (the caller bounds it too)."""

Body = bytes | AsyncIterator[bytes] | None


class Options(TypedDict, total=False):
    """A request's options but its `read` timeout (`Http11.stream`'s parameters)."""

    params: Mapping[str, str] | None
    body: Body
    headers: Mapping[str, str] | None
    timeout: Required[float | None]
    short: bool


class Answer:
    """An answer read whole: `status`, `headers` (names in lower case), `content`."""

    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status = status
        self.headers = headers
        self.content = content


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self) -> bool:
        """Whether a connection at rest may carry a request: the server has not closed
        it (nor sent anything unasked)."""
        return not (self.reader.at_eof() or self.writer.transport.is_closing())

    def drop(self) -> None:
        self.writer.transport.abort()


class Parts(Protocol):
    """An answer's body as `Streamed` reads it."""

    async def receive(self, most: int) -> bytes:
        """The next part, at most `most` bytes; b"" at the end."""
        ...


class Streamed:
    """An answer whose body is read a part at a time (`receive`), or whole (`read`)."""

    def __init__(self, status: int, headers: dict[str, str], body: Parts) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    async def receive(self, most: int) -> bytes:
        """The next part of the body, at most `most` bytes; b"" at its end."""
        return await self._body.receive(most)

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = []
        while part := await self._body.receive(1 << 20):
            parts.append(part)
        return b"".join(parts)


class Http11:
    """A client of one HTTP/1.1 server, keeping connections for the next requests."""

    def __init__(
        self,
        open_connection: Open,
        host: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_connection
        self._host = host
        self._monotonic = monotonic
        self._idle: deque[_Connection] = deque()  # the most recently used at the right
        self._closed = False
        self._short = asyncio.Semaphore(SHORT_AT_ONCE)

    @classmethod
    def tls(cls, host: str, port: int, context: ssl.SSLContext) -> Http11:
        """A client of `host`:`port` over TLS, `context` checking the server (its
        certificate names `host`)."""

        def open_connection(
            timeout: float | None,
        ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
            return asyncio.open_connection(
                host, port, ssl=context, server_hostname=host, limit=_HEAD_MAX
            )

        shown = f"[{host}]" if ":" in host else host
        return cls(open_connection, f"{shown}:{port}")

    @classmethod
    def tls_over(
        cls,
        connect: Callable[[float | None], Awaitable[socket.socket]],
        host: str,
        context: ssl.SSLContext,
    ) -> Http11:
        """A client over TLS on the sockets `connect` makes (given the seconds it has),
        the server's certificate naming `host`."""

        async def open_connection(
            timeout: float | None,
        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            try:
                sock = await connect(timeout)
            except OSError:
                raise
            except Exception as exc:  # the connector's own errors say what failed
                raise ConnectionError(str(exc) or type(exc).__name__) from exc
            try:
                return await asyncio.open_connection(
                    sock=sock, ssl=context, server_hostname=host, limit=_HEAD_MAX
                )
            except BaseException:
                sock.close()
                raise

        return cls(open_connection, f"[{host}]" if ":" in host else host)

    @classmethod
    def unix(cls, path: str) -> Http11:
        """A client of the server on the Unix socket `path`."""

        def open_connection(
            timeout: float | None,
        ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
            return asyncio.open_unix_connection(path, limit=_HEAD_MAX)

        return cls(open_connection, "localhost")

    async def aclose(self) -> None:
        """Close the connections at rest (those in use close as their requests end)."""
        self._closed = True
        while self._idle:
            self._idle.pop().drop()

    async def request(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> Answer:
        """Send one request and read its answer whole: `timeout` bounds connecting and
        sending, `read` the answer's head, then its body (None: no bound)."""
        # No context manager of `stream`'s: a request is the schedd's most frequent call.
        if options.get("short", False):
            async with self._short:
                return await self._whole(method, path, read=read, **options)
        return await self._whole(method, path, read=read, **options)

    async def _whole(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> Answer:
        conn, status, headers, keep, reader = await self._exchange(
            method, path, read=read, **options
        )
        try:
            async with asyncio.timeout(read):  # None: no bound
                content = await Streamed(status, headers, reader).read()
        except BaseException:
            conn.drop()
            raise
        self._end(conn, keep and reader.done)
        return Answer(status, headers, content)

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> AsyncIterator[Streamed]:
        """Send one request; its answer, once its head came (within `read` seconds), to
        read in the block. The connection is kept only if the body was read through.
        `short` requests (answered at once, small) go `SHORT_AT_ONCE` at a time, the
        others wait: a burst of them would open as many connections."""
        if not options.get("short", False):
            async with self._stream(method, path, read=read, **options) as answer:
                yield answer
            return
        async with self._short, self._stream(method, path, read=read, **options) as answer:
            yield answer

    @contextlib.asynccontextmanager
    async def _stream(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> AsyncIterator[Streamed]:
        conn, status, headers, keep, reader = await self._exchange(
            method, path, read=read, **options
        )
        try:
            yield Streamed(status, headers, reader)
        except BaseException:
            conn.drop()
            raise
        self._end(conn, keep and reader.done)

    def _end(self, conn: _Connection, keep: bool) -> None:
        """The answer was read (through, if `keep`): its connection is kept, or goes."""
        if keep and not self._closed:
            self._rest(conn)
        else:
            conn.drop()

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Body = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None,
        read: float | None,
        short: bool = False,  # `request`'s and `stream`'s to heed
    ) -> tuple[_Connection, int, dict[str, str], bool, _BodyReader]:
        """Send the request; its connection and answer's head (status, headers, whether
        the connection may be kept), and the reader of its body."""
        if self._closed:
            raise ConnectionError("the client is closed")
        target = f"{path}?{urlencode(params)}" if params else path
        head = [f"{method} {target} HTTP/1.1\r\nhost: {self._host}\r\n"]
        head += [f"{name}: {value}\r\n" for name, value in (headers or {}).items()]
        if isinstance(body, bytes):
            head.append(f"content-length: {len(body)}\r\n")
        elif body is not None:
            head.append("transfer-encoding: chunked\r\n")
        elif method in ("POST", "PUT", "PATCH"):
            head.append("content-length: 0\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1")
        # A kept connection the server closes just as this request goes out: the request
        # goes again on a new one if it can be sent again (not a stream) and nothing of
        # an answer came (the server answers what it has read, so it had not read it).
        again = body is None or isinstance(body, bytes)
        while True:
            conn, reused = await self._connection(timeout)
            try:
                await self._send(conn, data, body, timeout)
                async with asyncio.timeout(read):
                    status, answer_headers, keep = await _read_head(conn.reader)
                empty = method == "HEAD" or status in (204, 304)
                return (
                    conn,
                    status,
                    answer_headers,
                    keep,
                    _BodyReader(conn.reader, answer_headers, empty),
                )
            except _NothingCame as exc:
                conn.drop()
                if reused and again:
                    again = False
                    continue
                raise ConnectionError("the server closed the connection without an answer") from (
                    exc.__cause__
                )
            except BaseException:
                conn.drop()
                raise

    # -- plumbing -----------------------------------------------------------------------

    async def _connection(self, timeout: float | None) -> tuple[_Connection, bool]:
        """A connection at rest, or a new one (and whether it is one kept)."""
        now = self._monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < IDLE_EXPIRY and conn.usable():
                return conn, True
            conn.drop()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await self._open(timeout)
        except TimeoutError:
            raise TimeoutError("no connection in time") from None
        return _Connection(reader, writer), False

    def _rest(self, conn: _Connection) -> None:
        now = self._monotonic()
        conn.idle_since = now
        self._idle.append(conn)
        while self._idle and (
            len(self._idle) > _MAX_IDLE or now - self._idle[0].idle_since >= IDLE_EXPIRY
        ):
            self._idle.popleft().drop()

    @staticmethod
    async def _send(conn: _Connection, head: bytes, body: Body, timeout: float | None) -> None:
        writer = conn.writer
        try:
            if isinstance(body, bytes):
                writer.write(head + body)
                await _drain(writer, timeout)
            elif body is None:
                writer.write(head)
                await _drain(writer, timeout)
            else:
                writer.write(head)
                async for chunk in body:
                    if chunk:
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        await _drain(writer, timeout)
                writer.write(b"0\r\n\r\n")
                await _drain(writer, timeout)
        except (BrokenPipeError, ConnectionResetError):
            # The server answered (a request too large) and closed before the body was
            # all sent, or closed a kept connection: reading says which.
            pass


def said(exc: OSError) -> str:
    """What a network error says (a refused connection's errno text, at least)."""
    return str(exc) or exc.strerror or type(exc).__name__


class _NothingCame(Exception):
    """The connection ended before any byte of an answer."""


async def _drain(writer: asyncio.StreamWriter, timeout: float | None) -> None:
    transport = writer.transport
    if not transport.get_write_buffer_size() and not transport.is_closing():
        return  # all sent already (a request's head and small body, as a rule): no wait
    async with asyncio.timeout(timeout):
        await writer.drain()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """The answer's status and headers, and whether the connection may be kept."""
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _NothingCame() from None
            raise ConnectionError("the server's answer ended in its head") from None
        except asyncio.LimitOverrunError:
            raise ConnectionError("the server's answer has too long a head") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise _NothingCame() from exc
        lines = raw.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if (
            len(status_line) < 2
            or not status_line[0].startswith("HTTP/1.")
            or not status_line[1].isdigit()
        ):
            raise ConnectionError(f"the server's answer is not HTTP: {lines[0][:80]!r}")
        status = int(status_line[1])
        if 100 <= status < 200:  # 100 Continue and the like: the answer follows
            continue
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise ConnectionError(f"the server's answer has a bad header: {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        keep = status_line[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return status, headers, keep


class _BodyReader:
    """An answer's body by Content-Length, chunks, or to the end of the connection."""

    def __init__(self, reader: asyncio.StreamReader, headers: dict[str, str], empty: bool) -> None:
        self._reader = reader
        self._chunked = False
        self._left: int | None = None  # bytes left of the body (or of the chunk)
        self.done = False
        if empty:
            self._left = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
            self._left = 0
        elif (length := headers.get("content-length")) is not None:
            if not length.strip().isdigit():
                raise ConnectionError(f"the server's answer has a bad Content-Length: {length!r}")
            self._left = int(length)
        # else: to the end, and the connection is not kept (done stays False)
        if self._left == 0 and not self._chunked:
            self.done = True

    async def receive(self, most: int) -> bytes:
        if self.done:
            return b""
        try:
            if self._chunked:
                return await self._chunk(most)
            if self._left is None:
                return await self._reader.read(most)
            data = await self._reader.readexactly(min(most, self._left))
            self._left -= len(data)
            self.done = self._left == 0
            return data
        except asyncio.IncompleteReadError:
            raise ConnectionError("the server's answer ended before its body did") from None
        except asyncio.LimitOverrunError:
            raise ConnectionError("the server's chunked answer has too long a line") from None

    async def _chunk(self, most: int) -> bytes:
        if self._left == 0:
            line = await self._reader.readuntil(b"\r\n")
            size = line.split(b";", 1)[0].strip()
            try:
                self._left = int(size, 16)
            except ValueError:
                raise ConnectionError(
                    f"the server's answer has a bad chunk size: {size!r}"
                ) from None
            if self._left == 0:  # the last chunk: trailers to the empty line
                while await self._reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                self.done = True
                return b""
        assert self._left is not None
        data = await self._reader.readexactly(min(most, self._left))
        self._left -= len(data)
        if self._left == 0 and await self._reader.readexactly(2) != b"\r\n":
            raise ConnectionError("the server's answer has a chunk not ended by CRLF")
        return data
