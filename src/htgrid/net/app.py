"""The job queue's HTTP API: a Starlette (ASGI) app over a `QueueBackend`.

Every route is under `/v1`, takes and returns JSON, and reports errors as problem
documents (`_problems`). The caller's identity comes from the `authenticate` function the
app is built with (on the Unix socket: the kernel's peer credentials; over TLS: the
bearer token `TokenAuthMiddleware` checked), never from the request. The routes are
listed once, in `ROUTES`, which makes both the router and `/v1/openapi.json`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from htgrid import __version__
from htgrid.classad import ClassAd
from htgrid.classad.adjson import ads_to_json
from htgrid.errors import HTGridError
from htgrid.net._backend import QueueBackend
from htgrid.net._errors import BadRequest, status_of
from htgrid.net._guard import ProblemResponse
from htgrid.net._limits import read_body, read_lines
from htgrid.net._openapi import openapi_document
from htgrid.net._peer import Authenticator
from htgrid.net._problems import to_problem
from htgrid.net._sandbox_routes import (
    get_output,
    get_outputs,
    job_id_of,
    put_input,
    put_inputs,
    put_proxy,
    update_leases,
)
from htgrid.net._wire import (
    NDJSON,
    Jobs,
    SubmitStream,
    ad_from_json,
    background,
    is_stream,
    loads_request,
)
from htgrid.pool import DEFAULT_LIMITS, ApiLimits
from htgrid.queue import ID_MAX, Identity, JobAction, JobId

__all__ = ["ROUTES", "RouteSpec", "create_app", "published_document"]

_log = logging.getLogger("htgrid.net")

Handler = Callable[["_Call"], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route: method, path, what it does (for the OpenAPI document) and its handler."""

    method: str
    path: str
    name: str
    summary: str
    handler: Handler
    body: str | None = None  # the request body's schema name
    returns: str = "Jobs"  # the answer's schema name
    params: tuple[str, ...] = ()  # query parameters
    status: int = 200  # the status of a success


@dataclass(frozen=True, slots=True)
class _Call:
    request: Request
    backend: QueueBackend
    identity: Identity
    limits: ApiLimits = DEFAULT_LIMITS

    async def json(self) -> dict[str, Any]:
        body = loads_request(await read_body(self.request, self.limits))
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        return body

    def param(self, name: str) -> str | None:
        return self.request.query_params.get(name)


def _ids(ids: Sequence[JobId]) -> JSONResponse:
    return JSONResponse({"jobs": [str(i) for i in ids]})


async def _ads(ads: list[ClassAd]) -> Response:
    # printJson per ad, joined: no detour through Python objects. Done off the loop,
    # as 100,000 ads take a while.
    def render() -> str:
        return '{"jobs": ' + ads_to_json(ads) + "}"

    text = await asyncio.to_thread(render)
    return Response(text, media_type="application/json")


def _int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {value!r}") from None
    if number < 0:
        raise BadRequest(f"{name} must not be negative")
    if number > ID_MAX:
        raise BadRequest(f"{name} must be at most {ID_MAX}, not {value}")
    return number


def _selection(call: _Call) -> tuple[str | None, list[str] | None, int | None]:
    projection = call.param("projection")
    names = [n for n in (projection or "").split(",") if n.strip()]
    return call.param("constraint") or None, names or None, _int(call.param("limit"), "limit")


async def _health(call: _Call) -> Response:
    status = await call.backend.status()
    you = {"user": call.identity.name, "admin": call.identity.admin}
    return JSONResponse({"status": "ok", "version": __version__, "you": you, **status})


async def _reserve(call: _Call) -> Response:
    cluster = await call.backend.reserve_cluster(call.identity)
    return JSONResponse({"cluster": cluster}, status_code=201)


async def _submit(call: _Call) -> Response:
    cluster = _int(call.request.path_params["cluster"], "cluster")
    if not cluster:
        raise BadRequest("the cluster id must be a positive whole number")
    return await _queue_cluster(call, cluster)


async def _submit_new(call: _Call) -> Response:
    # A reserve and a submit in one request: a client sending batch after batch (the
    # condor GAHP) saves a round trip and a request's work here for each.
    return await _queue_cluster(call, None)


async def _queue_cluster(call: _Call, cluster: int | None) -> Response:
    """The procs of the body queued in `cluster` (a new one when None)."""
    if is_stream(call.request.headers.get("content-type")):
        return await _queue_stream(call, cluster)
    body = await call.json()
    procs = body.get("procs")
    if not isinstance(procs, list) or not procs:
        raise BadRequest('"procs" must be a non-empty list of job ads')

    def parse() -> tuple[ClassAd, list[ClassAd]]:
        # Every ad checked before anything is queued: a refused request commits nothing.
        cluster_ad = ad_from_json(body.get("cluster_ad"), "the cluster ad")
        return cluster_ad, [ad_from_json(p, f"the ad of proc {i}") for i, p in enumerate(procs)]

    cluster_ad, proc_ads = await asyncio.to_thread(parse)
    if cluster is None:
        cluster = await call.backend.reserve_cluster(call.identity)
    ids = await call.backend.submit(call.identity, cluster, cluster_ad, proc_ads)
    return JSONResponse({"cluster": cluster, "jobs": [str(i) for i in ids]}, status_code=201)


async def _queue_stream(call: _Call, cluster: int | None) -> Response:
    """The procs of a streamed body (`_wire.SubmitStream`) queued in `cluster` (a new one
    when None), staged as they arrive; nothing is queued unless its end line comes."""
    lines = read_lines(call.request, call.limits)
    stream = SubmitStream()
    try:
        first = await anext(lines, None)
        cluster_ad = await asyncio.to_thread(stream.cluster_ad, first)
        if cluster is None:
            cluster = await call.backend.reserve_cluster(call.identity)

        async def batches() -> AsyncIterator[list[ClassAd]]:
            async for line in lines:
                procs = await asyncio.to_thread(stream.procs, line)
                if procs:
                    yield procs
            stream.finish()

        count = await call.backend.submit_stream(
            call.identity, cluster, cluster_ad, batches(), factory=True
        )
    except ClientDisconnect:
        raise BadRequest("the client went away before the end of its submit") from None
    return JSONResponse({"cluster": cluster, "procs": count}, status_code=201)


async def _query(call: _Call) -> Response:
    if is_stream(call.request.headers.get("accept")):
        return await _stream_ads(call.backend.query_pages(call.identity, *_selection(call)))
    return await _ads(await call.backend.query(call.identity, *_selection(call)))


async def _stream_ads(pages: AsyncIterator[list[ClassAd]]) -> Response:
    """NDJSON: a JSON array of ads a line, a page at a time as the queue gives them."""
    first = await anext(pages, None)  # a bad constraint is answered before the stream

    def line(ads: list[ClassAd]) -> bytes:
        # printJson breaks lines only between tokens: an ad is one line without them.
        return ("[" + ",".join(ad.printJson().replace("\n", "") for ad in ads) + "]\n").encode()

    async def body() -> AsyncIterator[bytes]:
        page = first
        while page is not None:
            yield await asyncio.to_thread(line, page)
            page = await anext(pages, None)

    return StreamingResponse(body(), media_type=NDJSON)


async def _summary(call: _Call) -> Response:
    batches, owners, factories = await call.backend.summary(
        call.identity,
        call.param("constraint") or None,
        batches=call.param("batches") not in ("false", "0"),
    )
    return JSONResponse(
        {
            "batches": [batch.to_json() for batch in batches],
            "owners": {o: {str(k): n for k, n in c.items()} for o, c in owners.items()},
            "factories": [factory.to_json() for factory in factories],
        }
    )


async def _history(call: _Call) -> Response:
    return await _ads(await call.backend.history(call.identity, *_selection(call)))


async def _get(call: _Call) -> Response:
    return await _ads([await call.backend.get(call.identity, job_id_of(call))])


async def _act(call: _Call) -> Response:
    body = await call.json()
    try:
        action = JobAction(body.get("action"))
    except ValueError:
        names = ", ".join(a.value for a in JobAction)
        raise BadRequest(f'"action" must be one of {names}') from None
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or "\0" in reason):
        raise BadRequest('"reason" must be a string without a NUL character')
    jobs = Jobs.from_json(body.get("jobs"))
    return _ids(await call.backend.act(call.identity, action, jobs, reason))


async def _edit(call: _Call) -> Response:
    body = await call.json()
    attrs = body.get("attrs")
    if (
        not isinstance(attrs, dict)
        or not attrs
        or not all(isinstance(v, str) for v in attrs.values())
    ):
        raise BadRequest('"attrs" must map attribute names to ClassAd expression text')
    jobs = Jobs.from_json(body.get("jobs"))
    later = background(call.request.headers.get("priority"))
    return _ids(await call.backend.edit(call.identity, jobs, attrs, later=later))


async def _quarantine(call: _Call) -> Response:
    entries = await call.backend.quarantined(call.identity)
    return JSONResponse(
        {
            "quarantined": [
                {
                    "id": e.id,
                    "time": e.time,
                    "source": e.source,
                    "job": e.job,
                    "owner": e.owner,
                    "reason": e.reason,
                }
                for e in entries
            ]
        }
    )


async def _annex_token(call: _Call) -> Response:
    granted = await call.backend.annex_token(call.identity, await call.json())
    return JSONResponse(granted, status_code=201)


async def _annex_revoke(call: _Call) -> Response:
    body = await call.json()
    revoked = await call.backend.annex_revoke(call.identity, body.get("annex"))
    return JSONResponse({"revoked": revoked})


async def _openapi(call: _Call) -> Response:
    return JSONResponse(published_document())


_SELECT = ("constraint", "projection", "limit")

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("GET", "/v1/health", "health", "Whether the daemon answers, and as whom", _health,
              returns="Health"),
    RouteSpec("GET", "/v1/openapi.json", "openapi", "This API's OpenAPI description", _openapi,
              returns="OpenAPI"),
    RouteSpec("POST", "/v1/clusters", "reserve", "Reserve a new cluster id", _reserve,
              returns="Cluster", status=201),
    RouteSpec("POST", "/v1/clusters/{cluster}/jobs", "submit",
              "Queue every proc of a reserved cluster, in one transaction", _submit,
              body="Submit", returns="Submitted", status=201),
    RouteSpec("POST", "/v1/jobs", "submit_new",
              "Queue every proc in a new cluster, in one transaction (reserve and submit "
              "in one request)", _submit_new, body="Submit", returns="Submitted", status=201),
    RouteSpec("GET", "/v1/jobs", "query", "The queued jobs matching a constraint", _query,
              returns="Ads", params=_SELECT),
    RouteSpec("GET", "/v1/summary", "summary",
              "The matching jobs counted by batch and status, and everyone's by owner "
              "(condor_q's batch view and totals, without the ads)", _summary,
              returns="Summary", params=("constraint", "batches")),
    RouteSpec("GET", "/v1/jobs/{job_id}", "job", "One queued job's ad", _get, returns="Ads"),
    RouteSpec("POST", "/v1/jobs/act", "act", "Hold, release or remove jobs", _act,
              body="Act"),
    RouteSpec("POST", "/v1/jobs/edit", "edit",
              "Set job attributes (condor_qedit); with `Priority: u=7` (RFC 9218), as "
              "background work the daemon may put behind its running jobs for up to 0.5 s",
              _edit, body="Edit"),
    RouteSpec("GET", "/v1/history", "history", "Jobs that left the queue, newest first",
              _history, returns="Ads", params=_SELECT),
    RouteSpec("GET", "/v1/quarantine", "quarantine",
              "Rows the queue could not read when it opened, set aside (the caller's jobs; "
              "an administrator's: all)", _quarantine, returns="Quarantine"),
    RouteSpec("PUT", "/v1/jobs/{job_id}/input", "put_input",
              "Unpack a tar into the job's spool directory; a spooling job is then released",
              put_input, body="Tar"),
    RouteSpec("PUT", "/v1/jobs/input", "put_inputs",
              "Unpack one tar of several jobs' inputs (top-level directories named by job "
              "id) into their spool directories; the spooling ones are then released. "
              "Each job's outcome on its own", put_inputs, body="Tar", returns="Staged"),
    RouteSpec("PUT", "/v1/jobs/{job_id}/proxy", "put_proxy",
              "Replace a spooled job's X.509 proxy file (CONDOR_JOB_REFRESH_PROXY)",
              put_proxy, body="Proxy"),
    RouteSpec("GET", "/v1/jobs/{job_id}/output", "get_output",
              "The job's output sandbox as a tar", get_output, returns="Tar"),
    RouteSpec("POST", "/v1/jobs/output", "get_outputs",
              "Several jobs' output sandboxes in one tar: first jobs.json, each job's ad "
              "or the problem document of its refusal, then each answered job's files "
              "under its id (12.0/out.txt)", get_outputs, body="JobIds", returns="Tar"),
    RouteSpec("POST", "/v1/jobs/lease", "lease", "Renew the leases of jobs (JobLeaseExpiration)",
              update_leases, body="Leases"),
    RouteSpec("POST", "/v1/annex/tokens", "annex_token",
              "A token for the caller's annex: its identity the annex's, ADVERTISE_STARTD "
              "only, for the lease (at most ANNEX_TOKEN_MAX_LIFETIME); the annex's name "
              "is the caller's while its tokens live", _annex_token, body="AnnexTokenRequest",
              returns="AnnexToken", status=201),
    RouteSpec("POST", "/v1/annex/revocations", "annex_revoke",
              "Revoke every token of the caller's annex (its shutdown)", _annex_revoke,
              body="AnnexName", returns="Revoked"),
)  # fmt: skip


def published_document() -> dict[str, Any]:
    """The document of this version's routes: what /v1/openapi.json serves and
    docs/openapi.json publishes (`python -m htgrid.net._openapi` writes it)."""
    return openapi_document(ROUTES, __version__)


def create_app(
    backend: QueueBackend,
    authenticate: Authenticator,
    limits: ApiLimits = DEFAULT_LIMITS,
    *,
    extra: Sequence[BaseRoute] = (),
) -> Starlette:
    """The API over `backend`; `authenticate` names the caller of each request; `limits`
    caps JSON bodies (MAX_API_REQUEST_MB); `extra` routes beside /v1 (the web view)."""

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            try:
                identity = authenticate(request)
                return await handler(_Call(request, backend, identity, limits))
            except HTGridError as exc:
                return _problem(exc)
            except ValueError as exc:  # e.g. a hold code HTCondor does not define
                return _problem(BadRequest(str(exc)))
            except Exception as exc:
                _log.exception("%s %s failed", request.method, request.url.path)
                return _problem(HTGridError(f"internal error in the daemon: {exc!r}"))

        return serve

    # Literal paths first: /v1/jobs/act must not be read as the job id "act".
    ordered = sorted(ROUTES, key=lambda r: "{" in r.path)
    routes: list[BaseRoute] = [
        Route(r.path, endpoint(r.handler), methods=[r.method], name=r.name) for r in ordered
    ]
    return Starlette(routes=[*routes, *extra])


def _problem(error: HTGridError) -> Response:
    return ProblemResponse(to_problem(error), status_code=status_of(error))
