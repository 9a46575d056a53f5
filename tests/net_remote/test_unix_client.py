"""The local client's own HTTP on a Unix socket (htgrid.net._unix), against a server that
answers as a test says: bodies by length, chunks or to the end, a connection the server
closed while idle, a streamed request body, an answer sent before the whole body."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.net import DaemonUnavailable, ScheddClient
from htgrid.net._unix import UnixHttp

Handler = Callable[[socket.socket, bytes], bool]  # the request's bytes; keep the connection?


def _request(conn: socket.socket) -> bytes:
    """A request's head and body (by content-length, or chunks up to the last)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return data
        data += more
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    if b"content-length:" in head:
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(data.split(b"\r\n\r\n", 1)[1]) < length:
            data += conn.recv(65536)
    elif b"transfer-encoding: chunked" in head:
        while not data.endswith(b"\r\n0\r\n\r\n"):
            data += conn.recv(65536)
    return data


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Handler], tuple[str, list[int]]]]:
    """Start a server on a Unix socket; its path, and the connections it took."""
    servers: list[socket.socket] = []

    def start(handler: Handler) -> tuple[str, list[int]]:
        path = str(tmp_path / f"s{len(servers)}.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen()
        servers.append(server)
        connections: list[int] = []

        def loop() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                connections.append(1)
                with conn:
                    while (request := _request(conn)) and handler(conn, request):
                        pass

        threading.Thread(target=loop, daemon=True).start()
        return path, connections

    yield start
    for server in servers:
        server.close()


def _ok(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_a_kept_connection_carries_the_next_request(serve: Callable[..., Any]) -> None:
    def handler(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(_ok(request.split(b" ")[1]))
        return True

    path, connections = serve(handler)
    http = UnixHttp(path, 5.0)
    assert http.request("GET", "/a", params={"constraint": 'Owner == "x y"'}).content == (
        b"/a?constraint=Owner+%3D%3D+%22x+y%22"
    )
    assert http.request("GET", "/b").content == b"/b"
    assert len(connections) == 1
    http.close()


def test_a_connection_the_server_closed_while_idle_is_not_used_again(
    serve: Callable[..., Any],
) -> None:
    def handler(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(_ok(b"once"))
        return False  # closes after each answer, without saying so

    path, connections = serve(handler)
    http = UnixHttp(path, 5.0)
    for _ in range(3):
        assert http.request("POST", "/x", content=b"{}").content == b"once"
    assert len(connections) == 3
    http.close()


def test_chunked_answers_and_answers_to_the_end_read_whole_and_by_line(
    serve: Callable[..., Any],
) -> None:
    def handler(conn: socket.socket, request: bytes) -> bool:
        if b"/chunked" in request:
            conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for part in (b'{"a": 1}\n{"b"', b": 2}\n", b'{"c": 3}'):
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            conn.sendall(b"0\r\n\r\n")
            return True
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nto the end")
        return False

    path, connections = serve(handler)
    http = UnixHttp(path, 5.0)
    lines = list(http.request("GET", "/chunked", stream=True).iter_lines())
    assert lines == ['{"a": 1}', '{"b": 2}', '{"c": 3}']
    assert http.request("GET", "/end").content == b"to the end"
    assert http.request("GET", "/chunked").content.count(b"\n") == 2
    assert len(connections) == 2  # the answer to the end closed the first
    http.close()


def test_a_streamed_body_goes_in_chunks(serve: Callable[..., Any]) -> None:
    got: list[bytes] = []

    def handler(conn: socket.socket, request: bytes) -> bool:
        got.append(request.split(b"\r\n\r\n", 1)[1])
        conn.sendall(_ok(b"{}"))
        return True

    path, _ = serve(handler)
    http = UnixHttp(path, 5.0)
    http.request("POST", "/s", content=iter([b"one\n", b"", b"two\n"]))
    assert got == [b"4\r\none\n\r\n4\r\ntwo\n\r\n0\r\n\r\n"]
    http.close()


def test_an_answer_before_the_whole_body_is_read(serve: Callable[..., Any]) -> None:
    def handler(conn: socket.socket, request: bytes) -> bool:
        return False

    def early(conn: socket.socket) -> None:
        conn.recv(1000)  # the head, then an answer and close, the body left unread
        conn.sendall(b"HTTP/1.1 413 Too Large\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1 << 16)

    path, _ = serve(handler)
    big = str(Path(path).with_name("big.sock"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(big)
        server.listen()

        def once() -> None:
            with server.accept()[0] as conn:
                early(conn)

        threading.Thread(target=once, daemon=True).start()
        http = UnixHttp(big, 5.0)
        answer = http.request("PUT", "/in", content=b"x" * (64 << 20))
        http.close()
    assert answer.status_code == 413


def test_no_daemon_and_a_daemon_that_does_not_answer(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    with (
        pytest.raises(DaemonUnavailable, match="daemons are not running"),
        ScheddClient(tmp_path / "none.sock") as schedd,
    ):
        schedd.health()
    path, _ = serve(lambda conn, request: threading.Event().wait(5) and False)
    with (
        pytest.raises(DaemonUnavailable, match="did not answer in time"),
        ScheddClient(path, timeout=0.3) as schedd,
    ):
        schedd.health()
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(stale))  # a daemon that died: its socket, nobody listening
    with (
        pytest.raises(DaemonUnavailable, match="daemons are not running"),
        ScheddClient(stale) as schedd,
    ):
        schedd.health()
