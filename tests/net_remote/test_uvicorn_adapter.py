"""What htgrid.net._guard relies on of uvicorn's internals (its H11Protocol and the
request cycle it makes) is there, and works as the guard reads it: a uvicorn that
changes any of it fails here, by name, before a daemon's clocks silently stop."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from htgrid.net._guard import GuardedProtocol, guarded_protocol
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


def _protocol(cls: type[H11Protocol]) -> H11Protocol:
    config = uvicorn.Config(_app, http=cls, lifespan="off", log_config=None)
    config.load()
    return cls(config=config, server_state=ServerState(), app_state={"app": 1})


def test_the_connection_and_request_state_the_guard_reads() -> None:
    async def run() -> None:
        limits = ApiLimits(header_timeout=30, body_timeout=30)
        protocol = _protocol(guarded_protocol(limits, Tagged))
        assert isinstance(protocol, GuardedProtocol)
        transport = Transport()
        protocol.connection_made(transport)
        assert protocol.transport is transport
        assert protocol.loop is asyncio.get_running_loop()
        assert protocol.client == ("127.0.0.1", 5000)
        assert protocol.cycle is None
        state = dict(protocol.app_state)
        assert callable(state.pop(PROGRESS_KEY))
        assert state == {"app": 1, "peer": "127.0.0.1"}

        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        cycle = protocol.cycle
        assert cycle is not None and cycle.more_body
        assert not cycle.response_started and not cycle.response_complete
        assert not cycle.disconnected and isinstance(cycle.message_event, asyncio.Event)

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


def test_the_guards_own_names_are_none_of_uvicorns() -> None:
    async def names_of_a_connection() -> set[str]:
        protocol = _protocol(H11Protocol)
        protocol.connection_made(Transport())
        return set(vars(protocol)) | set(dir(H11Protocol))

    theirs = asyncio.run(names_of_a_connection())
    ours = {name for name in vars(GuardedProtocol) if not name.startswith("__")}
    ours |= {"_guard", "_body_start", "_body_bytes"}  # its state, set per connection
    # Only the methods it extends (each calling uvicorn's) are uvicorn's names too.
    extended = {"connection_made", "connection_lost", "data_received", "handle_events"}
    assert ours & theirs == extended | {"on_response_complete"}


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
