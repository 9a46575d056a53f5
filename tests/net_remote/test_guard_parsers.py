"""The guard (htgrid.net._guard) on both of uvicorn's HTTP/1.1 protocols, httptools'
(what every API runs on) and h11's (without httptools), over real connections: the
clocks answer 408, and where the two parsers differ a client sees the same answers
(a head too large refused, a request asking to switch protocols answered on HTTP/1.1,
pipelined requests answered in order)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from htgrid.net._guard import guarded_protocol
from htgrid.net._limits import MAX_HEAD, read_body
from htgrid.net.server import ApiServer, api_config, start, tcp_listener
from htgrid.pool import ApiLimits

LIMITS = ApiLimits(max_request_mb=1, header_timeout=1, body_timeout=1)
GIVE_UP = 30.0  # a connection never closed fails the test after this long


async def _echo(request: Request) -> PlainTextResponse:
    body = await read_body(request, LIMITS)
    return PlainTextResponse(f"{request.url.path} {len(body)}")


async def _early(request: Request) -> PlainTextResponse:
    return PlainTextResponse("refused unread", status_code=413)  # its body never read


APP = Starlette(
    routes=[
        Route("/early", _early, methods=["POST"]),
        Route("/{p:path}", _echo, methods=["GET", "POST"]),
    ]
)


@pytest.fixture(scope="module", params=[HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])
def address(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """An API on 127.0.0.1 on the guard with LIMITS, on uvicorn's protocol `param`."""
    config = api_config(APP, LIMITS)
    config.http = guarded_protocol(LIMITS, http=request.param)
    server = ApiServer(config, signals=False)
    sock = tcp_listener("127.0.0.1")
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def serve() -> None:
        serving = await start(server, sock, "a test API", RuntimeError)  # type: ignore[arg-type]
        ready.set()
        await serving

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    assert ready.wait(30), "the test API did not start"
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(30)
        loop.close()


def _exchange(address: tuple[str, int], data: bytes, *, trickle: bytes = b"") -> bytes:
    """Send `data`, then `trickle` a byte at a time (a slow client) while reading; all the
    server sent until it closed (AssertionError if it never does)."""
    sock = socket.create_connection(address)
    sock.settimeout(0.1)
    got = b""
    try:
        sock.sendall(data)
        for _ in range(int(GIVE_UP / 0.1)):
            if trickle:
                try:
                    sock.sendall(trickle[:1])
                except OSError:
                    trickle = b""  # closed: what it said is read below
                trickle = trickle[1:]
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk
        raise AssertionError(f"the server never closed the connection (got {got[:200]!r})")
    finally:
        sock.close()


def _answers(data: bytes) -> list[tuple[int, bytes]]:
    """The status and body of each answer in `data` (bodies by Content-Length)."""
    answers = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length = next(
            int(v)
            for k, _, v in (x.partition(b":") for x in lines[1:])
            if k.lower() == b"content-length"
        )
        if status == 100:
            length = 0
        answers.append((status, rest[:length]))
        data = rest[length:]
    return answers


def test_a_slow_head_and_a_slow_body_are_answered_408(address: tuple[str, int]) -> None:
    head = b"GET /x HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 200
    [(status, body)] = _answers(_exchange(address, head[:20], trickle=head[20:]))
    assert status == 408 and b"API_HEADER_TIMEOUT = 1 s" in body
    head = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n"
    [(status, body)] = _answers(_exchange(address, head, trickle=b"b" * 5000))
    assert status == 408 and b"API_BODY_TIMEOUT = 1 s" in body


def test_a_head_over_the_cap_is_refused(address: tuple[str, int]) -> None:
    sock = socket.create_connection(address)
    try:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: t\r\n")
        for _ in range(2 * MAX_HEAD // 1024):  # sent in pieces, as a client streams it
            try:
                sock.sendall(b"X-Big: " + b"a" * 1015 + b"\r\n")
            except OSError:
                break  # refused and closed: the answer is read below
        sock.settimeout(GIVE_UP)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    # httptools' parser has no cap of its own (the guard's: 431); h11's is the guard's
    # size (400, its own answer).
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")), answer[:200]


def test_a_head_under_the_cap_is_taken(address: tuple[str, int]) -> None:
    head = b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: " + b"a" * (MAX_HEAD - 1024)
    assert _answers(_exchange(address, head + b"\r\n\r\n")) == [(200, b"/x 0")]


def test_an_upgrade_is_answered_on_http11_and_the_connection_closed(
    address: tuple[str, int],
) -> None:
    """httptools stops parsing a connection at a request asking to switch protocols (and
    drops its body): it is answered, and the connection closed after it, as on h11."""
    upgrade = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n"
    get = b"GET /a HTTP/1.1\r\nHost: t\r\n" + upgrade + b"\r\n"
    second = b"GET /b HTTP/1.1\r\nHost: t\r\n\r\n"
    assert _answers(_exchange(address, get + second)) == [(200, b"/a 0")]
    post = b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n" + upgrade + b"\r\nabc"
    [(status, body)] = _answers(_exchange(address, post))
    assert status == 400 and b"without its Upgrade header" in body


def test_pipelined_requests_are_answered_in_order(address: tuple[str, int]) -> None:
    requests = b"".join(
        b"POST /%d HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (i, i) + b"z" * i
        for i in range(1, 4)
    )
    last = b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    answers = _answers(_exchange(address, requests + last))
    assert answers == [(200, b"/1 1"), (200, b"/2 2"), (200, b"/3 3"), (200, b"/last 0")]


def test_expect_100_continue_and_an_unread_body(address: tuple[str, int]) -> None:
    """A client that waits for 100 Continue gets it once the app reads; one answered
    before its body was read is served its next request on the same connection."""
    expect = b"POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    sock = socket.create_connection(address)
    sock.settimeout(GIVE_UP)
    try:
        sock.sendall(expect)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    finally:
        sock.close()
    early = b"POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
    after = b"GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    answers = _answers(_exchange(address, early + after))
    assert answers == [(413, b"refused unread"), (200, b"/after 0")]
