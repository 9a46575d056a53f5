"""The GAHP's HTTP side: one httpx.AsyncClient per remote schedd, found through the collector.

    remotes = Remotes(RemoteSettings(pool="127.0.0.1:9618", ...), TokenSource(...))
    schedd = await remotes.schedd("htgrid@host")    # located once, then cached
    response = await schedd.request("GET", "/v1/jobs", params={"constraint": "true"})

Every request of every command for one schedd URL goes through the same client, so its
keep-alive connections are shared: the pool never grows past `max_connections` whatever
the number of requests in flight (the rest wait for a connection, not for a timeout).
A lookup of a schedd's URL is shared by the requests that need it at the same moment, and
forgotten after a connection failure, so a schedd that moved is found again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

import httpx

from htgrid.backends.condor._errors import (
    ConnectFailure,
    LocateError,
    RemoteRefusal,
    SandboxError,
    refusal_of,
    translate,
)
from htgrid.client import BearerAuth, TokenSource, pool_url, tls_transport
from htgrid.errors import UsageError

__all__ = [
    "Endpoint",
    "FileBody",
    "RemoteSettings",
    "Remotes",
    "tls_context",
]

log = logging.getLogger("htgrid.gahp.condor")

CHUNK: Final = 1 << 20  # sandboxes move a MiB at a time


def tls_context(ca_files: Sequence[str]) -> ssl.SSLContext:
    """A client context trusting only `ca_files` (the system's CAs when none are given),
    checking host names, TLS 1.2 or newer."""
    if not ca_files:
        return ssl.create_default_context()
    # Given a CA file, the default context loads no system CA: a pool's own CA is the one
    # to trust for its daemons (and the system's 140-odd took 20-30 ms at each start).
    context = ssl.create_default_context(cafile=ca_files[0])
    for path in ca_files[1:]:
        context.load_verify_locations(cafile=path)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """How the GAHP reaches the remote pool."""

    #: The remote pool's collector, host[:port]; None: schedds must be named by URL.
    pool: str | None = None
    #: The schedd a request naming `NULL` means (the C-GAHP's -s); None: the pool's first.
    default_schedd: str | None = None
    ca_files: tuple[str, ...] = ()
    #: Seconds for connecting and for each read or write (not for waiting for a connection).
    timeout: float = 60.0
    #: Connections per remote schedd; further requests wait for one.
    max_connections: int = 20


class Endpoint:
    """One remote daemon (a schedd or the collector): its URL and its one HTTP client."""

    def __init__(self, url: str, what: str, client: httpx.AsyncClient) -> None:
        self.url = url
        self.what = what
        self.client = client
        #: Whether it takes a new cluster's jobs in one request (POST /v1/jobs); an older
        #: htgrid answers 405, and is sent a reserve, then a submit.
        self.submits_new = True

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: object = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """The answer to one request; ConnectFailure or RemoteRefusal when there is none."""
        if json_body is not None:
            content = json.dumps(json_body).encode("utf-8")
            headers = {"content-type": "application/json", **(headers or {})}
        with translate(self.what):
            response = await self.client.request(
                method, path, params=params, content=content, headers=headers
            )
        if response.status_code >= 400:
            raise refusal_of(self.what, response)
        return response

    async def json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The JSON object answered (RemoteRefusal when the answer is not one)."""
        response = await self.request(method, path, **kwargs)
        try:
            value = json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _odd_answer(self.what, f"not JSON ({exc})", response) from None
        if not isinstance(value, dict):
            raise _odd_answer(self.what, "not a JSON object", response)
        return value

    async def upload(self, path: str, body: FileBody | bytes, content_type: str) -> httpx.Response:
        """PUT `body` to `path`: a file streamed with its Content-Length, or bytes."""
        size = len(body) if isinstance(body, bytes) else body.size
        headers = {"content-type": content_type, "content-length": str(size)}
        with translate(self.what):
            response = await self.client.request("PUT", path, content=body, headers=headers)
        if response.status_code >= 400:
            raise refusal_of(self.what, response)
        return response

    async def download(self, path: str, into: IO[bytes], *, json_body: object = None) -> int:
        """GET `path` (POST `json_body` to it, if given) and write the answer's body to
        `into` as it comes (writes off the event loop); the bytes written. Nothing is
        written when the answer is an error."""
        written = 0
        method, content, headers = "GET", None, None
        if json_body is not None:
            method, content = "POST", json.dumps(json_body).encode("utf-8")
            headers = {"content-type": "application/json"}
        with translate(self.what):
            async with self.client.stream(
                method, path, content=content, headers=headers
            ) as response:
                if response.status_code >= 400:
                    await response.aread()  # the problem document (small)
                    raise refusal_of(self.what, response)
                async for chunk in response.aiter_bytes(CHUNK):
                    await asyncio.to_thread(_spool, into, chunk)
                    written += len(chunk)
        await asyncio.to_thread(_spool, into, b"")
        return written


class FileBody:
    """A request body read from an open file a MiB at a time, its reads off the event loop.

    Every iteration starts again from the file's beginning, so a request refused with
    401 can be sent once more with the right token (BearerAuth) without holding it in memory.
    """

    def __init__(self, file: IO[bytes], size: int) -> None:
        self.file = file
        self.size = size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.to_thread(_rewind, self.file)
        while chunk := await asyncio.to_thread(_read, self.file):
            yield chunk


def _rewind(file: IO[bytes]) -> None:
    try:
        file.seek(0)
    except OSError as exc:
        raise SandboxError(f"cannot read the sandbox tar to send: {exc}") from None


def _read(file: IO[bytes]) -> bytes:
    try:
        return file.read(CHUNK)
    except OSError as exc:
        raise SandboxError(f"cannot read the sandbox tar to send: {exc}") from None


def _spool(file: IO[bytes], chunk: bytes) -> None:
    """Write `chunk` (flush when it is empty) to the file a download goes to."""
    try:
        if chunk:
            file.write(chunk)
        else:
            file.flush()
    except OSError as exc:
        raise SandboxError(f"cannot keep the sandbox tar received: {exc}") from None


def _odd_answer(what: str, problem: str, response: httpx.Response) -> RemoteRefusal:
    detail = f"the answer of {what} to {response.request.url.path} is {problem}"
    return RemoteRefusal(detail, status=response.status_code, error="", detail=detail)


class Remotes:
    """The remote pool's collector and schedds, each with one reused HTTP client."""

    def __init__(self, settings: RemoteSettings, tokens: TokenSource) -> None:
        self.settings = settings
        self.auth = BearerAuth(source=tokens)
        self._verify = tls_context(settings.ca_files)
        self._endpoints: dict[str, Endpoint] = {}  # by URL: one client per remote daemon
        self._urls: dict[str, str] = {}  # schedd name -> URL, from the collector
        self._lookups: dict[str, asyncio.Future[str]] = {}

    @property
    def pools(self) -> int:
        """How many connection pools (HTTP clients) are open."""
        return len(self._endpoints)

    def _endpoint(self, url: str, what: str) -> Endpoint:
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            limits = httpx.Limits(
                max_connections=self.settings.max_connections,
                max_keepalive_connections=self.settings.max_connections,
            )
            timeout = httpx.Timeout(self.settings.timeout, pool=None)
            # A request cancelled mid-handshake (a QUIT while the remote is silent) closes
            # its socket at once, not when the garbage collector finds it.
            transport = tls_transport(self._verify, limits)
            client = httpx.AsyncClient(
                base_url=url, auth=self.auth, transport=transport, timeout=timeout
            )
            endpoint = Endpoint(url, what, client)
            self._endpoints[url] = endpoint
        return endpoint

    def collector(self) -> Endpoint:
        """The remote pool's collector."""
        if self.settings.pool is None:
            raise LocateError("no remote pool was given (htgrid gahp condor --pool HOST:PORT)")
        try:
            url = pool_url(self.settings.pool)
        except UsageError as exc:
            raise LocateError(str(exc)) from None
        return self._endpoint(url, f"the collector at {self.settings.pool}")

    async def schedd(self, name: str | None) -> Endpoint:
        """The remote schedd `name` (a URL is taken as is; None: the default schedd)."""
        name = name or self.settings.default_schedd
        if name is not None and name.startswith(("https://", "http://")):
            return self._endpoint(name.rstrip("/"), f"schedd at {name}")
        key = name or ""
        url = self._urls.get(key)
        if url is None:
            url = await self._shared_lookup(key)
        return self._endpoint(url, f"schedd {name or '(the pool default)'} at {url}")

    def forget(self, name: str | None) -> None:
        """Look `name` up again next time (its schedd did not answer)."""
        self._urls.pop(name or self.settings.default_schedd or "", None)

    async def _shared_lookup(self, key: str) -> str:
        pending = self._lookups.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._lookups[key] = pending
            try:
                url = await self._lookup(key or None)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved here: the waiters (if any) re-raise it
                raise
            finally:
                del self._lookups[key]
            self._urls[key] = url
            pending.set_result(url)
            return url
        return await asyncio.shield(pending)

    async def _lookup(self, name: str | None) -> str:
        label = name or "(the pool's first)"
        try:
            collector = self.collector()
            params = {"type": "Scheduler", "projection": "Name,HTGridURL,MyAddress"}
            response = await collector.request("GET", "/v1/ads", params=params)
            ads = json.loads(response.content)
        except LocateError as exc:
            raise LocateError(f"Error locating schedd {label}: {exc}") from None
        except (ConnectFailure, RemoteRefusal) as exc:
            raise LocateError(f"Error locating schedd {label}: {exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LocateError(
                f"Error locating schedd {label}: bad collector answer: {exc}"
            ) from None
        if not isinstance(ads, list):
            raise LocateError(f"Error locating schedd {label}: the collector's answer is no list")
        named = [ad for ad in ads if isinstance(ad, dict)]
        found = [ad for ad in named if name is None or ad.get("Name") == name]
        where = f"the pool at {self.settings.pool}"
        if not found:
            names = ", ".join(sorted(str(ad.get("Name")) for ad in named)) or "no schedds"
            raise LocateError(f"Error locating schedd {label}: not in {where}; it has: {names}")
        url = found[0].get("HTGridURL")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise LocateError(
                f"Error locating schedd {label}: its ad in {where} has no HTGridURL "
                "(it does not serve the network API)"
            )
        log.info("schedd %s is at %s", label, url)
        return url.rstrip("/")

    async def aclose(self) -> None:
        """Close every client."""
        clients = [e.client for e in self._endpoints.values()]
        self._endpoints.clear()
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
