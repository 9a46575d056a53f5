"""`InProcess`: `Http11`'s requests carried by an httpx transport instead of a network.

A client built on `Http11` (the collector's) takes an httpx transport in its place to talk
to an app in the same process (`httpx.ASGITransport`, in tests), its requests and answers
the same, so that the client has one code path for both. The transport's errors come out
as `Http11`'s: TimeoutError, and ConnectionError for the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Unpack

import httpx

from htgrid.client._http11 import Answer, Options, Streamed

__all__ = ["InProcess"]


class InProcess:
    """`Http11.request` and `.stream` on `transport`, as to the server at `base_url`."""

    def __init__(self, transport: httpx.AsyncBaseTransport, base_url: str) -> None:
        self._transport = transport
        self._base = base_url.rstrip("/")

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def request(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> Answer:
        async with self.stream(method, path, read=read, **options) as answer:
            return Answer(answer.status, answer.headers, await answer.read())

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, path: str, *, read: float | None, **options: Unpack[Options]
    ) -> AsyncIterator[Streamed]:
        timeout = options["timeout"]
        request = httpx.Request(
            method,
            self._base + path,
            params=options.get("params"),
            content=options.get("body"),
            headers=options.get("headers"),
            extensions={
                "timeout": {"connect": timeout, "write": timeout, "pool": timeout, "read": read}
            },
        )
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.TransportError as exc:
            raise ConnectionError(str(exc)) from exc
        try:
            headers = {name.lower(): value for name, value in response.headers.items()}
            yield Streamed(response.status_code, headers, _Parts(response.aiter_bytes()))
        finally:
            await response.aclose()


class _Parts:
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._rest = b""

    async def receive(self, most: int) -> bytes:
        while not self._rest:
            try:
                self._rest = await anext(self._chunks)
            except StopAsyncIteration:
                return b""
            except httpx.TransportError as exc:
                raise ConnectionError(str(exc)) from exc
        part, self._rest = self._rest[:most], self._rest[most:]
        return part
