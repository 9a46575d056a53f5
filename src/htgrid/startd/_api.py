"""The execute node's API: JSON over HTTP on its Unix socket, for the schedd's shadows.

    GET    /v1/health                     pid, name, DaemonStartTime, claims
    GET    /v1/slots                      the slot ads, as advertised
    POST   /v1/claims                     claim a dynamic slot: {claim_id, job_ad, schedd, lease}
    POST   /v1/alive                      renew the leases of claims: {claims: [id...],
                                          every?} (`every`: the schedd's ALIVE_INTERVAL);
                                          answers {unknown: [id...]}, the claims not here
    GET    /v1/claims/{id}?wait=&version= the claim's status, once past `version` (long poll)
    POST   /v1/watch                      the ends of many claims, in one long poll:
                                          {watch, seq, claims: {id: version}, wait}
                                          (`_watch`)
    POST   /v1/claims/{id}/activate       run a job on the claim: {job_ad, input_data?, after?,
                                          watch?} (`after`: the job whose end is recorded;
                                          a claim ENDED for it is reused for this one;
                                          `watch`: the poll of that token follows it;
                                          `input_data`: a small input sandbox's tar, in
                                          base64, or as ACTIVATION_TAR: that JSON, then
                                          the tar itself). With `after`, in place of
                                          job_ad: job_ad_changes and job_ad_unset, its
                                          changes from that job's ad; of input_data:
                                          input_again (true), that job's input again
    PUT    /v1/claims/{id}/input          the input sandbox (a tar), when the job's files travel
    GET    /v1/claims/{id}/output         the output sandbox (a tar), once the job has ended
    POST   /v1/claims/{id}/vacate         stop the job: {reason: vacate | hold | remove}
    POST   /v1/claims/{id}/reuse          the job's end is recorded: ready for the next job
    DELETE /v1/claims/{id}                release the claim (its sandbox is removed)

On the Unix socket only the startd's own user (or root) may call it: the kernel names
the caller (SO_PEERCRED), and the socket itself is mode 0600 in a 0700 directory.

A node on its own (`htgrid startd`) serves the same API over TLS on NETWORK_INTERFACE
(`start_tls_server`), for the pool's schedds on other hosts. It presents a certificate
of its own, which the schedd pins: the node advertises it in its slot ads, which the
collector took only from the holder of the node's ADVERTISE_STARTD token. The caller
must present a certificate of the pool's CA (the CAs the node trusts, `htgrid trust
add`), which only the pool's own daemons hold: a user's token, or another pool's schedd,
claims nothing here. Every request about a claim renews its lease; the claim id, a
secret of the schedd's sent only over these connections, is the capability.
"""

from __future__ import annotations

import asyncio
import binascii
import functools
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ads_to_json
from htgrid.errors import HTGridError
from htgrid.net import BadRequest, ad_from_json
from htgrid.net.server import (
    MAX_PROXY_BYTES,
    PEER_CERT_KEY,
    PEER_KEY,
    ApiServer,
    PeerCertificate,
    PeerCertProtocol,
    PeerCredentials,
    PeerCredProtocol,
    ProblemResponse,
    api_config,
    loads_request,
    read_body,
    start,
    tcp_listener,
    unix_listener,
)
from htgrid.pool import DEFAULT_LIMITS, ApiLimits
from htgrid.startd._errors import (
    CallerRefused,
    StartdError,
    StartdProtocolError,
    status_of,
    to_problem,
)
from htgrid.startd._watch import ClaimWatches, PollCounts, ended_to_json
from htgrid.startd._wire import AdChanges, ClaimGrant, ClaimStatus, activation_json_length

__all__ = [
    "StartdBackend",
    "create_app",
    "pool_daemon_caller",
    "start_tls_server",
    "start_unix_server",
]

_log = logging.getLogger("htgrid.startd")
_MAX_WAIT = 600.0
#: An output sandbox this small goes in one read (one call off the event loop, not a
#: stat, an open, reads and a close each); a larger one is streamed.
_SMALL_FILE = 1 << 16


class StartdBackend(Protocol):
    """What the routes call: the startd daemon."""

    def health(self) -> dict[str, Any]: ...

    def slot_ads(self) -> list[ClassAd]: ...

    def request_claim(
        self, claim_id: str, job_ad: ClassAd, schedd: str, lease: float
    ) -> ClaimGrant: ...

    async def claim_status(
        self, claim_id: str, wait: float, version: int, *, renew: bool = True
    ) -> ClaimStatus: ...

    async def activate(
        self,
        claim_id: str,
        job_ad: ClassAd | AdChanges,
        input_data: bytes | None = None,
        after: str | None = None,
        *,
        input_again: bool = False,
    ) -> ClaimStatus: ...

    async def receive_input(self, claim_id: str, request: Request) -> ClaimStatus: ...

    async def refresh_proxy(self, claim_id: str, data: bytes) -> ClaimStatus: ...

    def output(self, claim_id: str) -> bytes | Path: ...

    def vacate(self, claim_id: str, reason: str) -> ClaimStatus: ...

    async def reuse(self, claim_id: str) -> ClaimStatus: ...

    def alive(self, claim_ids: list[str], every: float | None = None) -> list[str]: ...

    async def release(self, claim_id: str) -> None: ...


def _local_caller(request: Request) -> None:
    """On the Unix socket: the node's own user, or root (CallerRefused otherwise)."""
    creds = request.scope.get("state", {}).get(PEER_KEY)
    if not isinstance(creds, PeerCredentials) or creds.uid not in (os.getuid(), 0):
        raise CallerRefused(f"only uid {os.getuid()} (or root) may use this execute node")


def pool_daemon_caller(request: Request) -> None:
    """Over TLS: a caller with a certificate of the pool's CA (a schedd of the pool);
    the handshake already refused one of another CA."""
    cert = request.scope.get("state", {}).get(PEER_CERT_KEY)
    if not isinstance(cert, PeerCertificate):
        raise CallerRefused(
            "only a schedd of this node's pool may use it: present a certificate of the "
            "pool's CA (a token does not do)"
        )


async def _body(request: Request, limits: ApiLimits) -> dict[str, Any]:
    try:
        doc = loads_request(await read_body(request, limits))
    except BadRequest as exc:
        raise StartdProtocolError(str(exc)) from None
    if not isinstance(doc, dict):
        raise StartdProtocolError("the request body must be a JSON object")
    return doc


async def _activation(request: Request, limits: ApiLimits) -> tuple[dict[str, Any], bytes | None]:
    """An activation's document and its input sandbox's tar, if one came: after the
    document (ACTIVATION_TAR), or in it in base64 (`input_data`)."""
    length = activation_json_length(request.headers.get("content-type", ""))
    if length is None:
        doc = await _body(request, limits)
        data = doc.get("input_data")
        if data is None:
            return doc, None
        try:
            # In C, as strict as b64decode's `validate`.
            return doc, binascii.a2b_base64(data, strict_mode=True)
        except (TypeError, ValueError):
            raise StartdProtocolError('"input_data" must be a tar in base64') from None
    body = await read_body(request, limits)
    if length > len(body):
        raise StartdProtocolError(f"the body is {len(body)} bytes: it holds no JSON of {length}")
    try:
        doc = loads_request(body[:length])
    except BadRequest as exc:
        raise StartdProtocolError(str(exc)) from None
    if not isinstance(doc, dict):
        raise StartdProtocolError("the activation's JSON must be an object")
    if "input_data" in doc:
        raise StartdProtocolError('the input sandbox comes after the JSON, not in "input_data"')
    return doc, body[length:]


def _job_ad(doc: dict[str, Any]) -> ClassAd:
    try:
        return ad_from_json(doc.get("job_ad"))
    except BadRequest as exc:
        raise StartdProtocolError(str(exc)) from None


def _activated_ad(doc: dict[str, Any], after: str | None) -> ClassAd | AdChanges:
    """An activation's job ad: whole, or its changes from the claim's last job's."""
    changes = doc.get("job_ad_changes")
    if changes is None:
        return _job_ad(doc)
    if after is None:
        raise StartdProtocolError('"job_ad_changes" come with "after", the job they change')
    unset = doc.get("job_ad_unset", [])
    if not isinstance(unset, list) or not all(isinstance(name, str) for name in unset):
        raise StartdProtocolError('"job_ad_unset" must be a list of attribute names')
    try:
        changed = ad_from_json(changes, "the job ad's changes")
    except BadRequest as exc:
        raise StartdProtocolError(str(exc)) from None
    return AdChanges(changed, tuple(unset))


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (a GET's body is read at once, then this waits)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _token(value: object) -> str:
    if not isinstance(value, str) or len(value) < 16:
        raise StartdProtocolError('"watch" must be a string of 16 characters or more')
    return value


async def _unless_gone(request: Request, work: Awaitable[Any], polls: PollCounts) -> Any:
    """What `work` returns; None when the caller left first (a long poll whose caller
    left must not hold its connection for the wait)."""
    poll = asyncio.ensure_future(work)
    gone = asyncio.create_task(_disconnected(request))
    polls.opened()
    try:
        await asyncio.wait({poll, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        polls.open -= 1
        gone.cancel()
    if not poll.done():
        poll.cancel()
        return None
    return poll.result()


def _number(text: str | None, name: str, default: float) -> float:
    if text is None or text == "":
        return default
    try:
        return float(text)
    except ValueError:
        raise StartdProtocolError(f"{name} must be a number, not {text!r}") from None


def create_app(
    backend: StartdBackend,
    limits: ApiLimits = DEFAULT_LIMITS,
    caller: Callable[[Request], None] = _local_caller,
) -> Starlette:
    """The API over `backend`; `limits` caps JSON bodies (MAX_API_REQUEST_MB); `caller`
    refuses whom the listener it serves must not answer."""
    # The watch reads claims the schedd may have given up on (those activated with its
    # token): no renewal of their leases, which only its keep-alives and requests make.
    watches = ClaimWatches(functools.partial(backend.claim_status, renew=False))
    polls = PollCounts()

    async def health(request: Request) -> Response:
        counts = {"polls": polls.to_json(), "requests": polls.requests}
        return JSONResponse({"status": "ok", **backend.health(), **counts})

    async def slots(request: Request) -> Response:
        return Response(ads_to_json(backend.slot_ads()), media_type="application/json")

    async def claim(request: Request) -> Response:
        doc = await _body(request, limits)
        claim_id, schedd, lease = doc.get("claim_id"), doc.get("schedd"), doc.get("lease")
        if not isinstance(claim_id, str) or len(claim_id) < 16:
            raise StartdProtocolError('"claim_id" must be a string of 16 characters or more')
        if not isinstance(lease, int | float) or isinstance(lease, bool) or lease <= 0:
            raise StartdProtocolError('"lease" must be a positive number of seconds')
        grant = backend.request_claim(claim_id, _job_ad(doc), str(schedd or "?"), float(lease))
        return JSONResponse(grant.to_json(), status_code=201)

    async def alive(request: Request) -> Response:
        doc = await _body(request, limits)
        claims = doc.get("claims")
        if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
            raise StartdProtocolError('"claims" must be a list of claim ids')
        every = doc.get("every")  # the schedd's ALIVE_INTERVAL (an older one sends none)
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int | float) or not every > 0
        ):
            raise StartdProtocolError('"every" must be a number of seconds above 0')
        return JSONResponse({"unknown": backend.alive(claims, every)})

    async def status(request: Request) -> Response:
        params = request.query_params
        wait = min(_MAX_WAIT, max(0.0, _number(params.get("wait"), "wait", 0.0)))
        version = int(_number(params.get("version"), "version", -1))
        claim_id = request.path_params["claim_id"]
        found = await _unless_gone(request, backend.claim_status(claim_id, wait, version), polls)
        if found is None:
            return Response(status_code=499)
        polls.claim += 1
        return JSONResponse(found.to_json())

    async def watch(request: Request) -> Response:
        doc = await _body(request, limits)
        token, claims = _token(doc.get("watch")), doc.get("claims")
        if not isinstance(claims, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in claims.values()
        ):
            raise StartdProtocolError('"claims" must map claim ids to their versions')
        wait = doc.get("wait", 0.0)
        if not isinstance(wait, int | float) or isinstance(wait, bool):
            raise StartdProtocolError('"wait" must be a number of seconds')
        wait = min(_MAX_WAIT, max(0.0, float(wait)))
        seq = doc.get("seq")
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
            raise StartdProtocolError('"seq" must be a whole number')
        ended = await _unless_gone(request, watches.poll(token, claims, wait, seq), polls)
        if ended is None:
            return Response(status_code=499)
        polls.watch += 1
        return JSONResponse(ended_to_json(ended))

    async def activate(request: Request) -> Response:
        doc, data = await _activation(request, limits)
        after = doc.get("after")
        if after is not None and not isinstance(after, str):
            raise StartdProtocolError('"after" must be the job id ("cluster.proc") of the last job')
        token = None if doc.get("watch") is None else _token(doc.get("watch"))
        claim_id = request.path_params["claim_id"]
        again = doc.get("input_again", False)
        if again is not False and (again is not True or data is not None or after is None):
            raise StartdProtocolError(
                '"input_again" is true, with "after" (the job whose input it names) and no '
                "input sandbox"
            )
        job = _activated_ad(doc, after)
        found = await backend.activate(claim_id, job, data, after, input_again=again)
        if token is not None:
            watches.activated(token, claim_id, found.version)
        return JSONResponse(found.to_json())

    async def send_input(request: Request) -> Response:
        found = await backend.receive_input(request.path_params["claim_id"], request)
        return JSONResponse(found.to_json())

    async def put_proxy(request: Request) -> Response:
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_PROXY_BYTES:
                raise StartdProtocolError(f"a proxy is at most {MAX_PROXY_BYTES} bytes")
        if not data:
            raise StartdProtocolError("the body must be the proxy file, not empty")
        found = await backend.refresh_proxy(request.path_params["claim_id"], bytes(data))
        return JSONResponse(found.to_json())

    async def output(request: Request) -> Response:
        path = backend.output(request.path_params["claim_id"])
        if isinstance(path, bytes):
            return Response(path, media_type="application/x-tar")
        small = await asyncio.to_thread(_small_file, path)
        if small is not None:
            return Response(small, media_type="application/x-tar")
        return FileResponse(path, media_type="application/x-tar")

    async def vacate(request: Request) -> Response:
        doc = await _body(request, limits)
        reason = doc.get("reason", "vacate")
        if reason not in ("vacate", "hold", "remove"):
            raise StartdProtocolError('"reason" must be vacate, hold or remove')
        found = backend.vacate(request.path_params["claim_id"], str(reason))
        return JSONResponse(found.to_json(), status_code=202)

    async def reuse(request: Request) -> Response:
        found = await backend.reuse(request.path_params["claim_id"])
        return JSONResponse(found.to_json())

    async def release(request: Request) -> Response:
        await backend.release(request.path_params["claim_id"])
        return JSONResponse({"released": True})

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
        async def serve(request: Request) -> Response:
            polls.requests += 1
            try:
                caller(request)
                return await handler(request)
            except HTGridError as exc:
                return _problem(exc)
            except Exception as exc:
                _log.exception("%s %s failed", request.method, request.url.path)
                return _problem(StartdError(f"internal error in the execute node: {exc!r}"))

        return serve

    claim_path = "/v1/claims/{claim_id}"
    routes = [
        Route("/v1/health", guarded(health), methods=["GET"]),
        Route("/v1/slots", guarded(slots), methods=["GET"]),
        Route("/v1/claims", guarded(claim), methods=["POST"]),
        Route("/v1/alive", guarded(alive), methods=["POST"]),
        Route("/v1/watch", guarded(watch), methods=["POST"]),
        Route(claim_path, guarded(status), methods=["GET"]),
        Route(claim_path, guarded(release), methods=["DELETE"]),
        Route(f"{claim_path}/activate", guarded(activate), methods=["POST"]),
        Route(f"{claim_path}/input", guarded(send_input), methods=["PUT"]),
        Route(f"{claim_path}/output", guarded(output), methods=["GET"]),
        Route(f"{claim_path}/proxy", guarded(put_proxy), methods=["PUT"]),
        Route(f"{claim_path}/vacate", guarded(vacate), methods=["POST"]),
        Route(f"{claim_path}/reuse", guarded(reuse), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _small_file(path: Path) -> bytes | None:
    """The file's bytes when it is at most `_SMALL_FILE` long, else None."""
    with open(path, "rb") as f:
        data = f.read(_SMALL_FILE + 1)
    return data if len(data) <= _SMALL_FILE else None


def _problem(error: HTGridError) -> JSONResponse:
    return ProblemResponse(to_problem(error), status_code=status_of(error))


async def start_unix_server(
    app: Starlette, path: Path, limits: ApiLimits = DEFAULT_LIMITS
) -> tuple[ApiServer, asyncio.Task[None]]:
    """uvicorn serving `app` on a 0600 Unix socket at `path` (a dead startd's replaced: we
    hold the lock), in a task, once it listens (slow clients cut off as `limits` says)."""
    config = api_config(app, limits, protocol=PeerCredProtocol, grace=2)
    server = ApiServer(config, signals=False)  # the daemon handles SIGTERM and SIGINT
    serving = await start(server, unix_listener(path), "the execute node's API", StartdError)
    return server, serving


async def start_tls_server(
    app: Starlette, host: str, tls: ssl.SSLContext, limits: ApiLimits = DEFAULT_LIMITS
) -> tuple[ApiServer, asyncio.Task[None], int]:
    """uvicorn serving `app` over TLS on `host` (an ephemeral port), in a task, once it
    listens; the port."""
    config = api_config(app, limits, protocol=PeerCertProtocol, tls=tls, grace=2)
    server = ApiServer(config, signals=False)
    sock = tcp_listener(host)
    try:
        sock.bind((host, 0))
    except OSError as exc:
        sock.close()
        raise StartdError(f"NETWORK_INTERFACE {host}: cannot listen: {exc.strerror}") from None
    port = int(sock.getsockname()[1])
    serving = await start(server, sock, "the execute node's TLS API", StartdError)
    return server, serving, port
