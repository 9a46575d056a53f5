"""`StartdClient`: the execute node's API from the schedd (or a test), over its socket.

    async with StartdClient(path) as startd:
        grant = await startd.request_claim(claim_id, job_ad, "htgrid@host", lease=360)
        await startd.activate(claim_id, job_ad)
        await startd.send_input(claim_id, tar_path)           # when the files travel
        status = await startd.status(claim_id, wait=60, version=status.version)
        ended = await startd.watch(token, {claim_id: status.version, ...}, wait=60)
        await startd.fetch_output(claim_id, dest)             # once it has ended
        await startd.alive([claim_id, ...], timeout=60)       # the node's claims' keep-alive
        await startd.release(claim_id)

The socket must belong to this user (or root): a socket someone else made is refused
before anything is sent, since job ads carry the job's environment. A node on another
host is reached over TLS (`StartdClient.over_tls(address, context)`, the context pinning
the certificate its ad carries and presenting the schedd's own); one behind NAT over the
same TLS on connections it makes back to the schedd through its broker
(`StartdClient.over_ccb`). Errors come back as the startd's classes; a node that does
not answer is `StartdUnavailable`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ad_lines, ad_to_json, json_object, loads
from htgrid.client import Connect, Http11, Streamed, said
from htgrid.net import ad_from_json
from htgrid.startd._errors import (
    StartdError,
    StartdProtocolError,
    StartdUnavailable,
    from_problem,
)
from htgrid.startd._wire import ACTIVATION_TAR, ClaimGrant, ClaimStatus

__all__ = ["StartdClient", "host_port_of", "socket_of"]

_CHUNK = 1 << 20


def socket_of(address: str) -> Path | None:
    """The socket path in a startd's address (`<host?sock=/path/startd.sock>`), if any."""
    inner = address.strip().removeprefix("<").removesuffix(">")
    _, _, query = inner.partition("?")
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "sock" and value.startswith("/"):
            return Path(value)
    return None


def host_port_of(address: str) -> tuple[str, int] | None:
    """The host and port of a node's network address (`<10.1.2.3:9620>`, `<[::1]:9620>`),
    if it has them (None for a Unix socket's `<host?sock=...>`)."""
    inner = address.strip().removeprefix("<").removesuffix(">").partition("?")[0]
    host, sep, port = inner.rpartition(":")
    if not sep or not port.isdigit() or not host or (":" in host and not host.startswith("[")):
        return None
    return host.strip("[]"), int(port)


class StartdClient:
    """An HTTP client of one execute node: on its Unix socket, or over TLS."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path: Path | None = Path(path)
        self.where = str(path)
        self.timeout = timeout
        self._http = Http11.unix(str(path))
        self._tar_activation = False  # the node's grants said it takes ACTIVATION_TAR
        self._changes = False  # ... and a reused claim's activation as its changes
        # Per claim, the lines of the job ad and the digest of the input its last
        # activation sent, which the node holds: the next job's go as their changes.
        self._sent: dict[str, tuple[dict[str, str], bytes | None]] = {}

    @classmethod
    def over_tls(
        cls, address: tuple[str, int], tls: ssl.SSLContext, *, timeout: float = 30.0
    ) -> StartdClient:
        """A client of the node at `address` over TLS, `tls` checking whom it talks to."""
        self = cls.__new__(cls)
        host, port = address
        self.path = None
        self.where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        self.timeout = timeout
        self._http = Http11.tls(host, port, tls)
        self._tar_activation = self._changes = False
        self._sent = {}
        return self

    @classmethod
    def over_ccb(
        cls,
        where: str,
        host: str,
        tls: ssl.SSLContext,
        connect: Connect,
        *,
        timeout: float = 30.0,
    ) -> StartdClient:
        """A client of the node at `where` (its broker contact) over TLS on the
        connections `connect` makes (the node's, reversed through its broker), `tls`
        checking whom it talks to as over `over_tls`: the node's certificate names
        `host`, its name or address."""
        self = cls.__new__(cls)
        self.path = None
        self.where = where
        self.timeout = timeout
        self._http = Http11.tls_over(connect, host, tls)
        self._tar_activation = self._changes = False
        self._sent = {}
        return self

    async def __aenter__(self) -> StartdClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- the routes ---------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return await self._json("GET", "/v1/health")

    async def slots(self) -> list[ClassAd]:
        response = await self._request("GET", "/v1/slots")
        doc = _decode(response)
        if not isinstance(doc, list):
            raise StartdProtocolError("the slot ads are not a JSON array")
        return [ad_from_json(obj) for obj in doc]

    async def request_claim(
        self, claim_id: str, job_ad: ClassAd, schedd: str, lease: float
    ) -> ClaimGrant:
        """Claim a dynamic slot for the job (ClaimRefused when the node cannot give it)."""
        body = _raw({"claim_id": claim_id, "schedd": schedd, "lease": lease}, job_ad)
        grant = ClaimGrant.from_json(await self._json("POST", "/v1/claims", body))
        self._tar_activation = grant.tar_activation
        self._changes = grant.reuse_changes
        return grant

    async def status(self, claim_id: str, *, wait: float = 0.0, version: int = -1) -> ClaimStatus:
        """The claim, once past `version` or after `wait` seconds (this renews its lease)."""
        params = {"wait": f"{wait:g}", "version": str(version)}
        doc = await self._json("GET", f"/v1/claims/{claim_id}", params=params, read=wait)
        return ClaimStatus.from_json(doc)

    async def watch(
        self, token: str, claims: dict[str, int], *, wait: float, seq: int | None = None
    ) -> dict[str, ClaimStatus | StartdError]:
        """The claims over (ENDED, RELEASED, gone: that one's error) among `claims` (each
        with the version known of it) and those activated with `token`: once one is, or
        after `wait` seconds, or when a newer poll of `token` came (perhaps none); `seq`
        orders the polls of a token (one older than the newest is answered at once)."""
        body: dict[str, Any] = {"watch": token, "claims": claims, "wait": wait}
        if seq is not None:
            body["seq"] = seq
        doc = await self._json("POST", "/v1/watch", body, read=wait)
        found = doc.get("claims")
        if not isinstance(found, dict):
            raise StartdProtocolError('the watch\'s answer has no "claims" object')
        ended: dict[str, ClaimStatus | StartdError] = {}
        for claim_id, each in found.items():
            if not isinstance(each, dict):
                raise StartdProtocolError(f"the watch's answer for {claim_id} is not an object")
            if "status" in each:
                ended[claim_id] = ClaimStatus.from_json(each["status"])
            else:
                code = each.get("code")
                ended[claim_id] = from_problem(
                    code if isinstance(code, int) else 500, each.get("problem")
                )
        return ended

    async def activate(
        self,
        claim_id: str,
        job_ad: ClassAd,
        input_data: bytes | None = None,
        *,
        after: str | None = None,
        watch: str | None = None,
    ) -> ClaimStatus:
        """Run the job on the claim; `transfer_input` says whether to send its input
        (`send_input`), unless the node took it with the activation: `input_data`, a
        small input sandbox's tar. `after` names the claim's last job, whose end the
        caller has recorded: the claim, ENDED for it, is reused in the same request.
        `watch`: the caller's `watch` poll of that token follows the claim from now on.

        A claim reused (`after`) whose last activation went from here sends only what
        changed since, to a node that takes that: of the job ad, the attributes that
        differ (the next job of a cluster differs from the last in a few of its ~100,
        which the node then parses alone); of the input, nothing when it is the same
        tar again (its executable, say: tens of KB a job through TLS, each way). Any
        failure forgets what was sent: the next goes whole."""
        fields: dict[str, Any] = {}
        if after is not None:
            fields["after"] = after
        if watch is not None:
            fields["watch"] = watch
        lines = ad_lines(job_ad)
        last = self._sent.pop(claim_id, None)
        ad = ("job_ad", json_object(lines.values()))
        data = input_data
        digest = None if input_data is None else _digest(input_data)
        if after is not None and last is not None and self._changes:
            last_lines, last_digest = last
            changed = [line for key, line in lines.items() if last_lines.get(key) != line]
            fields["job_ad_unset"] = [key for key in last_lines if key not in lines]
            ad = ("job_ad_changes", json_object(changed))
            if digest is not None and digest == last_digest:
                fields["input_again"], data = True, None
        sent = (lines, digest)  # not the input itself: up to 256 KiB for each claim
        path = f"/v1/claims/{claim_id}/activate"
        if data is not None and self._tar_activation:
            # The tar after the JSON: no base64 to make, nor for the node to undo.
            head = _raw(fields, ad).data
            kind = f"{ACTIVATION_TAR}; json={len(head)}"
            try:
                doc = await self._json("POST", path, head + data, content_type=kind)
                self._sent[claim_id] = sent
                return ClaimStatus.from_json(doc)
            except StartdProtocolError as exc:
                if "not JSON" not in str(exc):
                    raise
                # An older node, since the grant (it read it all as JSON and did nothing).
                self._tar_activation = False
        body = _raw(fields, ad, data)
        status = ClaimStatus.from_json(await self._json("POST", path, body))
        self._sent[claim_id] = sent
        return status

    async def send_input(self, claim_id: str, tar_path: Path) -> ClaimStatus:
        """Stream the input sandbox (a tar file) to the claim."""
        doc = await self._json(
            "PUT",
            f"/v1/claims/{claim_id}/input",
            _chunks(tar_path),
            content_type="application/x-tar",
            timeouts=(None, None),
        )
        return ClaimStatus.from_json(doc)

    async def put_proxy(self, claim_id: str, data: bytes) -> ClaimStatus:
        """Hand the claim's running job its renewed X.509 proxy."""
        doc = await self._json(
            "PUT",
            f"/v1/claims/{claim_id}/proxy",
            data,
            content_type="application/octet-stream",
        )
        return ClaimStatus.from_json(doc)

    async def fetch_output(
        self, claim_id: str, dest: Path, check: Callable[[int], None] | None = None
    ) -> int:
        """Write the claim's output sandbox (a tar) to `dest`, a chunk at a time; its
        size. `check` is given the bytes come so far after each chunk: what it raises
        (a sandbox over its limit) stops the transfer there."""
        size = 0
        self._check_socket()
        lost = f"lost the execute node at {self.where}"
        async with contextlib.AsyncExitStack() as stack:
            try:
                r = await stack.enter_async_context(
                    self._http.stream(
                        "GET", f"/v1/claims/{claim_id}/output", timeout=self.timeout, read=None
                    )
                )
            except OSError as exc:
                raise StartdUnavailable(f"{lost}: {said(exc)}") from None
            if r.status >= 400:
                raise _error(r.status, await _receive(r, None, lost))
            length = r.headers.get("content-length", "")
            if length.isdigit() and int(length) <= _CHUNK:  # one call off the loop
                data = await _receive(r, None, lost)
                await asyncio.to_thread(dest.write_bytes, data)
                return len(data)
            f = await asyncio.to_thread(open, dest, "wb")
            try:
                while chunk := await _receive(r, _CHUNK, lost):
                    size += len(chunk)
                    if check is not None:
                        check(size)
                    await asyncio.to_thread(f.write, chunk)
            finally:
                await asyncio.to_thread(f.close)
        return size

    async def vacate(self, claim_id: str, reason: str = "vacate") -> ClaimStatus:
        """Stop the claim's job (its kill signal, then SIGKILL after its vacate time)."""
        doc = await self._json("POST", f"/v1/claims/{claim_id}/vacate", {"reason": reason})
        return ClaimStatus.from_json(doc)

    async def reuse(self, claim_id: str) -> ClaimStatus:
        """Keep the claim, its job's end recorded, for another job (activate it again)."""
        return ClaimStatus.from_json(await self._json("POST", f"/v1/claims/{claim_id}/reuse"))

    async def alive(
        self, claim_ids: list[str], *, timeout: float, every: float | None = None
    ) -> list[str]:
        """Renew the leases of the schedd's claims on this node, all in one message (the
        keep-alive, sent each `every` seconds: its ALIVE_INTERVAL); the ids of those the
        node has not. A node that does not answer within `timeout` seconds is
        `StartdUnavailable`."""
        body: dict[str, object] = {"claims": claim_ids}
        if every is not None:
            body["every"] = every
        doc = await self._json("POST", "/v1/alive", body, timeouts=(timeout, timeout))
        unknown = doc.get("unknown")
        if not isinstance(unknown, list):
            raise StartdProtocolError('the keep-alive\'s answer has no "unknown" list')
        return [str(each) for each in unknown]

    async def release(self, claim_id: str, *, idle: bool = False) -> None:
        """Give the claim back (a job still running is vacated first, with no bound on
        the wait: the caller's). `idle`: no job runs on it, so the node answers at once:
        the release goes as a short request, over a kept connection (a burst of claims
        let go at once opened one each, and a TLS handshake)."""
        timeouts = None if idle else (None, None)
        self._sent.pop(claim_id, None)
        await self._json("DELETE", f"/v1/claims/{claim_id}", timeouts=timeouts)

    # -- plumbing -----------------------------------------------------------------------

    def _check_socket(self) -> None:
        if self.path is None:
            return  # over TLS: the context checks the node's certificate
        try:
            owner = os.stat(self.path).st_uid
        except OSError as exc:
            raise StartdUnavailable(f"no execute node at {self.path}: {exc.strerror}") from None
        if owner not in (os.getuid(), 0):
            raise StartdError(f"{self.path} belongs to uid {owner}: not an execute node of ours")

    async def _request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        read: float = 0.0,
        timeouts: tuple[float | None, float | None] | None = None,
    ) -> bytes:
        """The answer's body. `timeouts`: the seconds to connect and send, and to read
        the answer (None: no bound); by default the client's timeout for both, `read`
        seconds more for the answer (a long poll's wait)."""
        self._check_socket()
        if body is None:
            content: bytes | AsyncIterator[bytes] | None = None
        elif isinstance(body, _Raw):
            content = body.data
        elif isinstance(body, AsyncIterator | bytes):
            content = body
        else:
            content = json.dumps(body).encode()
        headers = {"content-type": content_type} if content is not None else None
        send, answer = timeouts if timeouts is not None else (self.timeout, self.timeout + read)
        try:
            response = await self._http.request(
                method,
                path,
                params=params,
                body=content,
                headers=headers,
                timeout=send,
                read=answer,
                # Not a long poll, a stream, a release or a keep-alive: answered at once.
                short=timeouts is None and not read,
            )
        except TimeoutError:
            raise StartdUnavailable(
                f"the execute node at {self.where} did not answer in time"
            ) from None
        except OSError as exc:
            raise StartdUnavailable(
                f"no execute node answers at {self.where}: {said(exc)}"
            ) from None
        if response.status >= 400:
            raise _error(response.status, response.content)
        return response.content

    async def _json(self, method: str, path: str, body: object = None, **kw: Any) -> dict[str, Any]:
        doc = _decode(await self._request(method, path, body, **kw))
        if not isinstance(doc, dict):
            raise StartdProtocolError("the execute node's answer is not a JSON object")
        return doc


class _Raw:
    """A JSON body assembled as bytes (job ads keep their expression markers raw)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _raw(fields: dict[str, Any], ad: ClassAd | tuple[str, str], data: bytes | None = None) -> _Raw:
    """`fields` and the job ad (or a member named as given, holding a JSON object) as
    one JSON object; with `data` as "input_data" in base64, put in as it is: its
    alphabet needs no escaping in a JSON string, and an encoder would scan every byte of
    it (~50 KB an activation, for an executable alone)."""
    name, value = ("job_ad", ad_to_json(ad)) if isinstance(ad, ClassAd) else ad
    head = json.dumps(fields)[:-1]
    sep = ", " if fields else ""
    text = f'{head}{sep}"{name}": {value}'.encode()
    if data is None:
        return _Raw(text + b"}")
    return _Raw(b'%s, "input_data": "%s"}' % (text, base64.b64encode(data)))


def _digest(data: bytes) -> bytes:
    """What tells an input sandbox's tar from another."""
    return hashlib.blake2b(data, digest_size=20).digest()


def _decode(content: bytes) -> Any:
    try:
        return loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StartdProtocolError(
            f"the execute node sent something that is not JSON: {exc}"
        ) from None


def _error(status: int, content: bytes) -> StartdError:
    try:
        doc: object = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        doc = None
    return from_problem(status, doc)


async def _receive(answer: Streamed, most: int | None, lost: str) -> bytes:
    """The next part of a streamed answer (its whole rest: `most` None); a connection
    lost is the node's."""
    try:
        return await (answer.read() if most is None else answer.receive(most))
    except OSError as exc:
        raise StartdUnavailable(f"{lost}: {said(exc)}") from None


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    f, first = await asyncio.to_thread(_first_chunk, path)
    try:
        if first:
            yield first
        # A small file was read and closed in that one call off the loop.
        while f is not None and (chunk := await asyncio.to_thread(f.read, _CHUNK)):
            yield chunk
    finally:
        if f is not None:
            await asyncio.to_thread(f.close)


def _first_chunk(path: Path) -> tuple[BinaryIO | None, bytes]:
    """The file's first chunk, and the file still open for the rest (None: no rest)."""
    f = open(path, "rb")  # noqa: SIM115 (closed here or by `_chunks`)
    try:
        first = f.read(_CHUNK)
    except BaseException:
        f.close()
        raise
    if len(first) < _CHUNK:
        f.close()
        return None, first
    return f, first
