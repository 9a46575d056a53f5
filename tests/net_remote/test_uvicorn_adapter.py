"""What htgrid.net._guard relies on of uvicorn's internals (its HttpToolsProtocol and
H11Protocol, and the request cycles they make) is there, and works as the guard reads
it: a uvicorn that changes any of it fails here, by name, before a daemon's clocks
silently stop."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from htgrid.net._guard import HTTP_PROTOCOL, GuardedProtocol, guarded_protocol, http_protocol
from htgrid.net._limits import PROGRESS_KEY
from htgrid.net.server import ApiServer, api_config, serve_connection, start, tcp_listener
from htgrid.pool import ApiLimits


class Transport(asyncio.Transport):
    """A connection from 127.0.0.1:5000, collecting what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 80)}.get(name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Tagged(GuardedProtocol):
    def connection_state(self, transport: Any) -> dict[str, Any]:
        return {"peer": transport.get_extra_info("peername")[0]}


async def _app(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    state = dict(scope["state"])
    progress = state.pop(PROGRESS_KEY)  # a streamed body's reader calls it
    assert callable(progress)
    answer = json.dumps({"state": state, "body": body.decode()}).encode()
    length = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": length})
    await send({"type": "http.response.body", "body": answer})


#: uvicorn's two HTTP/1.1 protocols: the guard runs on either.
PROTOCOLS = pytest.mark.parametrize(
    "http", [HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"]
)


def _protocol(cls: type[asyncio.Protocol]) -> Any:
    config = uvicorn.Config(_app, http=cls, lifespan="off", log_config=None)
    config.load()
    return cls(config=config, server_state=ServerState(), app_state={"app": 1})  # type: ignore[call-arg]


def test_the_api_protocol_is_httptools_and_h11_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HTTP_PROTOCOL is HttpToolsProtocol  # a dependency: installed with htgrid
    assert guarded_protocol(ApiLimits()).__mro__[1:3] == (GuardedProtocol, HttpToolsProtocol)
    monkeypatch.setitem(sys.modules, "httptools", None)  # as if not installed
    assert http_protocol() is H11Protocol


@PROTOCOLS
def test_the_connection_and_request_state_the_guard_reads(http: type[asyncio.Protocol]) -> None:
    async def run() -> None:
        limits = ApiLimits(header_timeout=30, body_timeout=30)
        protocol = _protocol(guarded_protocol(limits, Tagged, http))
        assert isinstance(protocol, GuardedProtocol) and isinstance(protocol, http)
        transport = Transport()
        protocol.connection_made(transport)
        assert protocol.transport is transport
        assert protocol.loop is asyncio.get_running_loop()
        assert protocol.client == ("127.0.0.1", 5000)
        assert protocol.cycle is None and protocol.scope is None
        state = dict(protocol.app_state)
        assert callable(state.pop(PROGRESS_KEY))
        assert state == {"app": 1, "peer": "127.0.0.1"}

        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")
        if http is HttpToolsProtocol:  # a head begun: its scope made, no cycle yet
            assert protocol.scope is not None and protocol.cycle is None
        protocol.data_received(b"ngth: 5\r\n\r\n")
        cycle = protocol.cycle
        assert cycle is not None and cycle.more_body and cycle.keep_alive
        assert cycle.scope is protocol.scope
        assert not cycle.response_started and not cycle.response_complete
        assert not cycle.disconnected and isinstance(cycle.message_event, asyncio.Event)
        if http is HttpToolsProtocol:
            assert not protocol.pipeline  # the requests waiting behind the one served

        protocol.data_received(b"hello")
        for _ in range(100):  # the app's task runs on this loop
            if cycle.response_complete:
                break
            await asyncio.sleep(0)
        assert cycle.response_started and cycle.response_complete
        assert transport.written.startswith(b"HTTP/1.1 200 OK")
        answer = json.loads(transport.written.split(b"\r\n\r\n", 1)[1])
        assert answer == {"state": {"app": 1, "peer": "127.0.0.1"}, "body": "hello"}
        protocol.connection_lost(None)

    asyncio.run(run())


@PROTOCOLS
def test_the_guards_own_names_are_none_of_uvicorns(http: type[asyncio.Protocol]) -> None:
    async def names_of_a_connection() -> set[str]:
        protocol = _protocol(http)
        protocol.connection_made(Transport())
        return set(vars(protocol)) | set(dir(http))

    theirs = asyncio.run(names_of_a_connection())
    ours = {name for name in vars(GuardedProtocol) if not name.startswith("__")}
    # its state, set per connection
    ours |= {"_guard", "_served", "_head_bytes", "_body_start", "_body_bytes", "_body_line"}
    # Only the methods it extends (each calling uvicorn's) are uvicorn's names too.
    extended = {"connection_made", "connection_lost", "data_received", "on_response_complete"}
    assert ours & theirs == extended


def test_a_connection_made_elsewhere_is_served_as_one_the_listener_accepted() -> None:
    """`serve_connection` builds the protocol as uvicorn's `Server.startup` does, from
    the config's protocol class, the server's state and its lifespan's state: served over
    a socket pair, a request gets its answer, and the connection counts as the server's
    (closed by its shutdown)."""

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    async def scenario() -> bytes:
        app = Starlette(routes=[Route("/", hello)])
        server = ApiServer(api_config(app, ApiLimits()), signals=False)
        sock = tcp_listener("127.0.0.1")
        sock.bind(("127.0.0.1", 0))
        serving = await start(server, sock, "a test API", RuntimeError)  # type: ignore[arg-type]
        ours, theirs = socket.socketpair()
        try:
            theirs.setblocking(False)
            await serve_connection(server, theirs, None)
            assert len(server.server_state.connections) == 1
            reader, writer = await asyncio.open_connection(sock=ours)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            return answer
        finally:
            server.should_exit = True
            await serving

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")


def test_the_api_server_ticks_as_uvicorns_once_a_second_tick_and_stops_when_told() -> None:
    """`ApiServer.main_loop` (uvicorn's, overridden) runs uvicorn's `on_tick` each time
    as its once-a-second tick, which renews the Date header (a counter a multiple of 10;
    uvicorn's own loop ticks ten times a second, nine of them for nothing), and ends when
    `should_exit` is set from another thread (as a signal handler or a daemon's stop)."""

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    server = ApiServer(api_config(Starlette(routes=[Route("/", hello)]), ApiLimits()))
    ticks: list[int] = []
    real = server.on_tick

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        if len(ticks) == 2:
            threading.Thread(target=setattr, args=(server, "should_exit", True)).start()
        return await real(counter)

    server.on_tick = on_tick  # type: ignore[method-assign]
    server.server_state.default_headers = []
    asyncio.run(asyncio.wait_for(server.main_loop(), 60))
    assert ticks[:2] == [0, 10] and all(counter % 10 == 0 for counter in ticks)
    assert [name for name, _ in server.server_state.default_headers] == [b"date"]
