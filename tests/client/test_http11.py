"""`Http11`, the lean HTTP/1.1 client (the schedd's of its execute nodes), against a
scripted server: connections kept and reused, bodies by length and by chunks both ways,
a kept connection closed under a request, answers late, cancelled or not HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from htgrid.client import Http11
from htgrid.client._http11 import IDLE_EXPIRY, SHORT_AT_ONCE
from htgrid.startd import StartdClient

Answer = Callable[[str, dict[str, str], bytes], Awaitable[bytes | None]]


@dataclass
class Server:
    """An HTTP/1.1 server on 127.0.0.1 answering each request with what `answer` gives
    (None: the connection closed unanswered)."""

    answer: Answer
    connections: int = 0
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                line, *rest = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in rest if h)
                }
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding") == "chunked":
                    parts = []
                    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                        parts.append(await reader.readexactly(size))
                        await reader.readexactly(2)
                    await reader.readexactly(2)
                    body = b"".join(parts)
                else:
                    body = b""
                self.requests.append((line, headers, body))
                # The answer, unless the client goes first (a request cancelled, timed out).
                answering = asyncio.ensure_future(self.answer(line, headers, body))
                gone = asyncio.ensure_future(reader.read(1))
                await asyncio.wait({answering, gone}, return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gone  # the reader free again for the next request
                if not answering.done():
                    answering.cancel()
                    return
                data = answering.result()
                if data is None:
                    return
                writer.write(data)
                await writer.drain()
                if b"connection: close" in data:
                    return
        finally:
            writer.close()
            self.closed.set()

    def client(self) -> Http11:
        def open_connection(
            timeout: float | None,
        ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
            return asyncio.open_connection("127.0.0.1", self.port)

        return Http11(open_connection, f"127.0.0.1:{self.port}")


def ok(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def serving(answer: Answer) -> tuple[Server, asyncio.Server]:
    server = Server(answer)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    server.port = listening.sockets[0].getsockname()[1]
    return server, listening


async def echo(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
    return ok(line.encode() + b"|" + body)


def test_requests_reuse_one_connection_and_send_their_bodies() -> None:
    async def scenario() -> None:
        server, listening = await serving(echo)
        async with listening:
            http = server.client()
            first = await http.request(
                "POST",
                "/v1/claims",
                body=b'{"a": 1}',
                headers={"content-type": "application/json"},
                timeout=5,
                read=5,
            )
            second = await http.request(
                "GET", "/v1/claims/x", params={"wait": "0", "version": "3"}, timeout=5, read=5
            )
            third = await http.request("DELETE", "/v1/claims/x", timeout=None, read=None)
            await http.aclose()
        assert first.status == 200
        assert first.content == b'POST /v1/claims HTTP/1.1|{"a": 1}'
        assert second.content == b"GET /v1/claims/x?wait=0&version=3 HTTP/1.1|"
        assert third.content == b"DELETE /v1/claims/x HTTP/1.1|"
        assert server.connections == 1
        _, headers, _ = server.requests[0]
        assert headers["host"] == f"127.0.0.1:{server.port}"
        assert headers["content-type"] == "application/json"

    asyncio.run(scenario())


def test_a_streamed_body_goes_in_chunks_and_a_chunked_answer_reads_whole() -> None:
    async def chunked(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        return (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n"
            + (b"%x\r\n%s\r\n" % (len(body), body) if body else b"")
            + b"0\r\nx-trailer: 1\r\n\r\n"
        )

    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two"):
            yield part

    async def scenario() -> None:
        server, listening = await serving(chunked)
        async with listening:
            http = server.client()
            answer = await http.request("PUT", "/input", body=parts(), timeout=5, read=5)
            async with http.stream("GET", "/output", timeout=5, read=5) as streamed:
                pieces = []
                while piece := await streamed.receive(3):
                    pieces.append(piece)
            again = await http.request("GET", "/again", timeout=5, read=5)
            await http.aclose()
        assert answer.content == b"helloone two"
        assert server.requests[0][1]["transfer-encoding"] == "chunked"
        assert pieces == [b"hel", b"lo"]  # the empty body's chunk: none
        assert again.content == b"hello"
        assert server.connections == 1  # kept after each answer read through

    asyncio.run(scenario())


def test_a_kept_connection_closed_under_a_request_sends_it_again_once() -> None:
    seen = 0

    async def close_the_second(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        nonlocal seen
        seen += 1
        return None if seen == 2 else ok(b"fine")

    async def scenario() -> None:
        server, listening = await serving(close_the_second)
        async with listening:
            http = server.client()
            await http.request("GET", "/one", timeout=5, read=5)
            # The server closes the kept connection on reading the request (as one
            # timing out its idle connections would): sent again on a new connection.
            again = await http.request("POST", "/two", body=b"x", timeout=5, read=5)
            await http.aclose()
        assert again.content == b"fine"
        assert [line for line, _, _ in server.requests] == [
            "GET /one HTTP/1.1",
            "POST /two HTTP/1.1",
            "POST /two HTTP/1.1",
        ]
        assert server.connections == 2

    asyncio.run(scenario())


def test_a_new_connection_closed_unanswered_is_an_error_not_a_retry() -> None:
    async def close(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        return None

    async def scenario() -> None:
        server, listening = await serving(close)
        async with listening:
            http = server.client()
            with pytest.raises(ConnectionError, match="without an answer"):
                await http.request("POST", "/once", body=b"x", timeout=5, read=5)
            await http.aclose()
        assert len(server.requests) == 1

    asyncio.run(scenario())


def test_an_answer_late_times_out_and_a_cancelled_request_drops_its_connection() -> None:
    never = asyncio.Event()  # set by nobody

    async def slow(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        if line.startswith("GET /slow"):
            await never.wait()
        return ok(b"quick")

    async def scenario() -> None:
        server, listening = await serving(slow)
        async with listening:
            http = server.client()
            with pytest.raises(TimeoutError):
                await http.request("GET", "/slow", timeout=5, read=0.2)
            await asyncio.wait_for(server.closed.wait(), 5)  # that connection was dropped
            server.closed.clear()
            task = asyncio.create_task(http.request("GET", "/slow", timeout=5, read=None))
            while len(server.requests) < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.closed.wait(), 5)
            answer = await http.request("GET", "/quick", timeout=5, read=5)
            await http.aclose()
        assert answer.content == b"quick"
        assert server.connections == 3  # neither connection cut short went back for reuse

    asyncio.run(scenario())


def test_an_answer_to_the_end_of_its_connection_and_one_not_http() -> None:
    async def odd(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        if "/garbage" in line:
            return b"SSH-2.0-OpenSSH_9.6\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"

    async def scenario() -> None:
        server, listening = await serving(odd)
        async with listening:
            http = server.client()
            whole = await http.request("GET", "/close", timeout=5, read=5)
            with pytest.raises(ConnectionError, match="not HTTP"):
                await http.request("GET", "/garbage", timeout=5, read=5)
            await http.aclose()
        assert whole.content == b"all of it"
        assert server.connections == 2  # the first was not kept

    asyncio.run(scenario())


def test_a_burst_of_short_requests_goes_a_few_at_a_time_on_as_few_connections() -> None:
    # Each TLS connection holds a 256 KB buffer: a burst of activations at a node (its
    # jobs ended at once) opened one each, most of the schedd's memory per running job.
    release = asyncio.Event()
    at_once = 0
    most = 0

    async def held(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        nonlocal at_once, most
        if "/poll" in line:
            return ok(b"poll")
        at_once += 1
        most = max(most, at_once)
        await release.wait()
        at_once -= 1
        return ok(b"done")

    async def scenario() -> list[bytes]:
        server, listening = await serving(held)
        async with listening:
            http = server.client()
            burst = [
                asyncio.ensure_future(
                    http.request(
                        "POST", f"/activate/{n}", body=b"{}", timeout=5, read=5, short=True
                    )
                )
                for n in range(12)
            ]
            while at_once < SHORT_AT_ONCE:
                await asyncio.sleep(0.01)
            # A request that is not short (a long poll) is not held behind them.
            poll = await http.request("GET", "/poll", timeout=5, read=5)
            release.set()
            answers = [a.content for a in await asyncio.gather(*burst)]
            await http.aclose()
        assert server.connections <= SHORT_AT_ONCE + 1
        return [poll.content, *answers]

    assert asyncio.run(scenario()) == [b"poll"] + [b"done"] * 12
    assert most == SHORT_AT_ONCE


def test_a_connection_idle_within_the_expiry_is_used_again() -> None:
    # Between two negotiation cycles (seconds apart) a node's connections beyond the one
    # its activations keep busy were let go at 5 s, and each burst of claims made TLS
    # handshakes again; they are kept 10 s (the node keeps its own 15 s).
    now = [1000.0]

    async def scenario() -> tuple[int, int]:
        server, listening = await serving(echo)
        async with listening:
            port = server.port

            def open_connection(
                timeout: float | None,
            ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
                return asyncio.open_connection("127.0.0.1", port)

            http = Http11(open_connection, f"127.0.0.1:{port}", monotonic=lambda: now[0])
            await http.request("GET", "/a", timeout=5, read=5)
            now[0] += IDLE_EXPIRY - 1
            await http.request("GET", "/b", timeout=5, read=5)
            kept = server.connections
            now[0] += IDLE_EXPIRY + 1
            await http.request("GET", "/c", timeout=5, read=5)
            await http.aclose()
        return kept, server.connections

    assert IDLE_EXPIRY >= 10
    assert asyncio.run(scenario()) == (1, 2)


def test_releases_of_idle_claims_go_as_short_requests(tmp_path: Path) -> None:
    # A claim whose job is over is released at once by the node: a burst of them (the
    # last jobs of a run ending) waits its turn over kept connections, where each opened
    # a connection (and a TLS handshake) of its own.
    release = asyncio.Event()
    at_once = 0
    most = 0

    async def held(line: str, headers: dict[str, str], body: bytes) -> bytes | None:
        nonlocal at_once, most
        at_once += 1
        most = max(most, at_once)
        await release.wait()
        at_once -= 1
        return ok(b"{}", "content-type: application/json")

    async def scenario() -> int:
        server = Server(held)
        path = tmp_path / "startd.sock"
        listening = await asyncio.start_unix_server(server.serve, str(path))
        async with listening, StartdClient(path) as client:
            burst = [
                asyncio.ensure_future(client.release(f"claim{n}", idle=True)) for n in range(12)
            ]
            while at_once < SHORT_AT_ONCE:
                await asyncio.sleep(0.01)
            for _ in range(5):
                await asyncio.sleep(0.01)  # the others, were they not held, came by now
            release.set()
            await asyncio.gather(*burst)
        assert len(server.requests) == 12
        assert all(line.startswith("DELETE /v1/claims/claim") for line, _, _ in server.requests)
        return server.connections

    assert asyncio.run(scenario()) <= SHORT_AT_ONCE
    assert most == SHORT_AT_ONCE
