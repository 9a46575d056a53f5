"""InProcess: Http11's requests and answers carried by an httpx transport (an app in the
test's process), its errors Http11's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from htgrid.client import InProcess

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Says what it was sent; /parts answers in three parts."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/parts":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one\n", b"two\n", b"three\n"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    said = {
        "method": scope["method"],
        "path": scope["path"],
        "query": scope["query_string"].decode(),
        "authorization": dict(scope["headers"]).get(b"authorization", b"").decode(),
        "body": body.decode(),
    }
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"WWW-Authenticate", b'Bearer realm="x"')],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(said).encode()})


def test_a_request_and_a_streamed_answer_go_through_the_transport() -> None:
    async def run() -> None:
        http = InProcess(httpx.ASGITransport(app=_echo), "https://server.test:9618")
        answer = await http.request(
            "POST",
            "/v1/things",
            params={"constraint": "a == 1"},
            body=b"[1]",
            headers={"authorization": "Bearer t"},
            timeout=5,
            read=5,
        )
        assert answer.status == 201
        assert answer.headers["www-authenticate"] == 'Bearer realm="x"'
        assert json.loads(answer.content) == {
            "method": "POST",
            "path": "/v1/things",
            "query": "constraint=a+%3D%3D+1",
            "authorization": "Bearer t",
            "body": "[1]",
        }
        async with http.stream("GET", "/parts", timeout=5, read=5) as streamed:
            assert await streamed.receive(2) == b"on"
            assert await streamed.read() == b"e\ntwo\nthree\n"
            assert await streamed.receive(10) == b""
        await http.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("raised", "expected"),
    [(httpx.ConnectError("refused"), ConnectionError), (httpx.ReadTimeout("slow"), TimeoutError)],
)
def test_the_transports_errors_are_http11s(raised: Exception, expected: type[OSError]) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise raised

    async def run() -> None:
        http = InProcess(httpx.MockTransport(fail), "https://server.test")
        with pytest.raises(expected, match=str(raised)):
            await http.request("GET", "/", timeout=1, read=1)

    asyncio.run(run())
