"""HTTP/1.1 on the daemon's Unix socket with the standard library's socket alone.

The local client (every command: `htgrid q` among them) talks only to its own daemon, on
a Unix socket, without TLS or proxies: loading httpx for that (httpcore, h11, anyio,
certifi, ssl, email...) cost most of a short command's start. This is the part of HTTP
it needs: a request with a body whole or streamed (chunked), the answer's status and
body by Content-Length, chunks, or to the end; one connection kept while the server
keeps it. Errors are OSError (ConnectionError for an answer that is not HTTP,
TimeoutError when the daemon does not answer in time).
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator, Mapping
from typing import Any, Final
from urllib.parse import urlencode

__all__ = ["UnixHttp", "UnixResponse"]

_LINE_MAX: Final = 65536
_HEADERS_MAX: Final = 100
_READ: Final = 65536


class UnixHttp:
    """A client of an HTTP server on a Unix socket, one request at a time."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._open: UnixResponse | None = None  # a streamed answer not read to its end

    def close(self) -> None:
        self._drop()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: str | bytes | Iterator[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
    ) -> UnixResponse:
        """Send one request; its answer (the body read already unless `stream`)."""
        if self._open is not None:  # the last answer was not read through: its socket goes
            self._open.close()
        target = f"{path}?{urlencode(params)}" if params else path
        head = [f"{method} {target} HTTP/1.1", "host: htgrid", "accept-encoding: identity"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        body: bytes | Iterator[bytes] | None = (
            content.encode() if isinstance(content, str) else content
        )
        if isinstance(body, bytes):
            head.append(f"content-length: {len(body)}")
        elif body is not None:
            head.append("transfer-encoding: chunked")
        elif method in ("POST", "PUT"):
            head.append("content-length: 0")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        # A kept connection the server closes just as this request goes out: the request
        # goes again on a new one, when its body can be sent again (the server answers
        # whatever it has read, so it had not read this one).
        again = not isinstance(body, Iterator)
        while True:
            reused = self._sock is not None
            sock = self._connection()
            reader = _Reader(sock)
            try:
                self._send(sock, data, body)
                response = UnixResponse(self, reader, method == "HEAD")
            except ConnectionError:
                self._drop()
                if not (reused and again and not reader.began):
                    raise
                again = False
                continue
            except BaseException:
                self._drop()
                raise
            break
        if stream:
            self._open = response
        else:
            response.read()
        return response

    @staticmethod
    def _send(sock: socket.socket, head: bytes, body: bytes | Iterator[bytes] | None) -> None:
        try:
            sock.sendall(head)
            if isinstance(body, bytes):
                sock.sendall(body)
            elif body is not None:
                for chunk in body:
                    if chunk:
                        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            # The server answered (a request too large) and closed before the body was
            # all sent, or closed a kept connection: reading says which.
            pass

    def _connection(self) -> socket.socket:
        sock = self._sock
        if sock is not None:
            # A kept connection the server has closed (or sent something on unasked) is
            # readable: a new one then, rather than a request lost on it.
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return sock
            self._drop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        return sock

    def _done(self, response: UnixResponse, keep: bool) -> None:
        if self._open is response:
            self._open = None
        if not keep:
            self._drop()

    def _drop(self) -> None:
        self._open = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class UnixResponse:
    """An answer: `status_code`, and its body whole (`content`, `json()`) or as lines."""

    def __init__(self, client: UnixHttp, reader: _Reader, head_only: bool) -> None:
        self._client = client
        self._reader = reader
        status = reader.line().split(None, 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
            raise ConnectionError(f"the daemon's answer is not HTTP: {b' '.join(status)!r}")
        self.status_code = int(status[1])
        self.headers: dict[str, str] = {}
        for _ in range(_HEADERS_MAX):
            line = reader.line()
            if not line:
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise ConnectionError(
                    f"a header line of the daemon's answer has no colon: {line!r}"
                )
            self.headers[name.strip().lower()] = value.strip()
        else:
            raise ConnectionError("the daemon's answer has too many header lines")
        self._keep = self.headers.get("connection", "").lower() != "close"
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length = self.headers.get("content-length")
        self._left: int | None = None
        if head_only or self.status_code in (204, 304) or 100 <= self.status_code < 200:
            self._left = 0
        elif not self._chunked and length is not None:
            if not length.isdigit():
                raise ConnectionError(f"the daemon's answer has a bad length: {length!r}")
            self._left = int(length)
        elif not self._chunked:
            self._keep = False  # the body runs to the connection's end
        self._content: bytes | None = None
        self._finished = False

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def content(self) -> bytes:
        return self.read()

    def json(self) -> Any:
        return json.loads(self.read())

    def read(self) -> bytes:
        """The whole body."""
        if self._content is None:
            self._content = b"".join(self._chunks())
        return self._content

    def iter_lines(self) -> Iterator[str]:
        """The body's lines (without their ends), as they come."""
        pending = b""
        for chunk in self._chunks():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r").decode()
        if pending:
            yield pending.decode()

    def close(self) -> None:
        if not self._finished:  # left half read: the connection cannot carry another
            self._finished = True
            self._client._done(self, keep=False)

    def _chunks(self) -> Iterator[bytes]:
        if self._finished:
            return
        reader = self._reader
        if self._chunked:
            while True:
                size_line = reader.line().split(b";", 1)[0].strip()
                try:
                    size = int(size_line, 16)
                except ValueError:
                    what = f"bad chunk size in the daemon's answer: {size_line!r}"
                    raise ConnectionError(what) from None
                if size == 0:
                    while reader.line():  # trailers
                        pass
                    break
                yield reader.exactly(size)
                reader.line()
        elif self._left is not None:
            while self._left > 0:
                data = reader.some(min(self._left, _READ))
                self._left -= len(data)
                yield data
        else:
            yield from reader.to_end()
        self._finished = True
        self._client._done(self, keep=self._keep)


class _Reader:
    """Buffered reads of a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self.began = False  # whether any of the answer came

    def _fill(self) -> None:
        data = self._sock.recv(_READ)
        if not data:
            raise ConnectionError("the daemon closed the connection before its answer ended")
        self.began = True
        self._buffer += data

    def line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > _LINE_MAX:
                raise ConnectionError("a line of the daemon's answer is too long")
            self._fill()
        line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return line.rstrip(b"\r")

    def some(self, most: int) -> bytes:
        if not self._buffer:
            self._fill()
        data, self._buffer = self._buffer[:most], self._buffer[most:]
        return data

    def exactly(self, size: int) -> bytes:
        parts = []
        while size > 0:
            data = self.some(size)
            size -= len(data)
            parts.append(data)
        return b"".join(parts)

    def to_end(self) -> Iterator[bytes]:
        if self._buffer:
            yield self._buffer
            self._buffer = b""
        while data := self._sock.recv(_READ):
            yield data
