"""The web view's routes, mounted in the schedd's API app under /web.

Who is looking is the API's business, not this module's: the routes are built with the
same authenticator the API's routes have (`peercred_identity` on the Unix socket,
`token_identity` behind `TokenAuthMiddleware` over TLS), and call it for every page and
every live update. A browser cannot set an Authorization header on a link, so over TLS
`CookieBearer` (outside the middleware) turns the `htgrid_web` cookie that /web/login
sets into the bearer token the middleware checks; the token is verified, mapped, banned
and audited exactly as an API request's. A refused page goes to the sign-in form.

The pages are read-only (no form changes a job), their answers carry a strict
Content-Security-Policy (scripts and styles from /web/static only), and every value
from an ad is escaped (`_html`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources as package_files
from typing import Any, Final
from urllib.parse import parse_qs, quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from htgrid.classad import quote as ad_string
from htgrid.errors import HTGridError
from htgrid.queue import Identity, JobId, JobNotFound
from htgrid.router import RouterConfig, explain_routes
from htgrid.web import _data, _pages
from htgrid.web._annex import annex_page
from htgrid.web._html import Html, el, join
from htgrid.web._svg import bar_chart, step_chart

__all__ = [
    "COOKIE",
    "EXEMPT",
    "SECURITY_HEADERS",
    "Authenticator",
    "CookieBearer",
    "web_routes",
]

_log = logging.getLogger("htgrid.web")

Authenticator = Callable[[Request], Identity]
COOKIE: Final = "htgrid_web"
#: The paths the token middleware lets through: the sign-in form and the static files.
EXEMPT: Final = frozenset(
    {"/web/login", "/web/logout", "/web/static/web.css", "/web/static/web.js"}
)
SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it browsers send `Origin: null` with a form, which
    # `_same_origin` could not tell from a cross-site post.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC: Final = {"web.css": "text/css; charset=utf-8", "web.js": "text/javascript; charset=utf-8"}
_LIST_LIMIT: Final = 500
_HISTORY_LIMIT: Final = 2000  # the finished jobs the charts count
_CHART_LIMIT: Final = 10_000  # the queued jobs the charts read (a page every 2 s)
_ROUTE_EXPLAINED: Final = 20  # idle jobs a routes page explains


def _html(body: Html, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=dict(SECURITY_HEADERS))


def _live(request: Request) -> bool:
    return request.query_params.get("live") == "1"


Page = Callable[[Request, Identity, _data.Sources], Awaitable[tuple[str, Html, Html | None]]]


def web_routes(
    sources: _data.Sources, authenticate: Authenticator, *, realm: str | None = None
) -> list[BaseRoute]:
    """The web view under /web, each page naming its caller with `authenticate`.
    `realm`: the pool's trust domain, when callers sign in with its tokens (TLS)."""

    def page(path: str, render: Page) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            try:
                identity = authenticate(request)
            except HTGridError as exc:  # a caller with no name this API takes
                return _html(_pages.message_page("Not signed in", str(exc)), 403)
            try:
                title, content, tools = await render(request, identity, sources)
            except JobNotFound as exc:
                content, title, tools = el("p", {"class": "problem"}, str(exc)), "Not found", None
                if _live(request):
                    return _html(content, 404)
                return _html(_pages.frame(title, identity, path, content, live=False), 404)
            except HTGridError as exc:
                title, content, tools = (
                    "Cannot show this",
                    el("p", {"class": "problem"}, str(exc)),
                    None,
                )
            if _live(request):
                return _html(content)
            return _html(
                _pages.frame(title, identity, path, content, tools=tools, logout=realm is not None)
            )

        return serve

    routes: list[BaseRoute] = [
        Route("/", page("/web/", _queue)),
        Route("/jobs/{job_id}", page("", _job)),
        Route("/pool", page("/web/pool", _pool)),
        Route("/grid", page("/web/grid", _grid)),
        Route("/routes", page("/web/routes", _routes)),
        Route("/annexes", page("/web/annexes", _annexes)),
        Route("/static/{name}", _static),
    ]
    if realm is not None:
        routes += [
            Route("/login", _login_form(realm), methods=["GET"]),
            Route("/login", _login, methods=["POST"]),
            Route("/logout", _logout, methods=["POST"]),
        ]
    return [Mount("/web", routes=routes), Route("/", _to_web)]


async def _to_web(request: Request) -> Response:
    return RedirectResponse("/web/", status_code=303)


async def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC:
        return Response("not found", 404, media_type="text/plain")
    data = package_files.files("htgrid.web").joinpath("static", name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=300"}
    return Response(data, media_type=_STATIC[name], headers=headers)


# ---- signing in with a token (TLS) ------------------------------------------------------


def _same_origin(request: Request) -> bool:
    """A form posted from this site (its Origin header, which browsers send with POST,
    or their Sec-Fetch-Site)."""
    if request.headers.get("sec-fetch-site") == "same-origin":
        return True
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    return origin is not None and host is not None and origin.split("://", 1)[-1] == host


def _login_form(realm: str) -> Callable[[Request], Awaitable[Response]]:
    async def form(request: Request) -> Response:
        refused = request.query_params.get("refused")
        problem = f"The pool refused the token: {refused}." if refused else None
        response = _html(_pages.login_page(problem, realm), 401 if refused else 200)
        if refused:  # the refused token goes: the next page asks for another
            response.delete_cookie(COOKIE, path="/web")
        return response

    return form


async def _login(request: Request) -> Response:
    if not _same_origin(request):
        return _html(_pages.message_page("Refused", "Sign in from this site's own form."), 403)
    body = (await request.body())[:16384]
    token = (parse_qs(body.decode("latin-1")).get("token") or [""])[0].strip()
    response = RedirectResponse("/web/", status_code=303)
    if token and all(32 < ord(c) < 127 for c in token):
        # The token is not judged here: each page's request presents it to the API's
        # middleware, which takes or refuses it as it would an API call.
        response.set_cookie(
            COOKIE, token, path="/web", secure=True, httponly=True, samesite="strict"
        )
    return response


async def _logout(request: Request) -> Response:
    if not _same_origin(request):
        return _html(_pages.message_page("Refused", "Sign out from this site's own page."), 403)
    response = RedirectResponse("/web/login", status_code=303)
    response.delete_cookie(COOKIE, path="/web")
    return response


class CookieBearer:
    """Outside `TokenAuthMiddleware`: a /web request with the sign-in cookie and no
    Authorization header presents the cookie's token as its bearer token; a page the
    middleware refuses (401, 403) is answered by a redirect to the sign-in form."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/web") or path in EXEMPT:
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers", []))
        token = _cookie(headers, COOKIE)
        if token and not any(k == b"authorization" for k, _ in headers):
            headers.append((b"authorization", b"Bearer " + token.encode("latin-1")))
        inner = {**scope, "headers": headers}
        live = b"live=1" in scope.get("query_string", b"")
        redirected = False

        async def sending(message: Message) -> None:
            nonlocal redirected
            # A live update's 401 is passed on: the script loads the page again.
            start = message["type"] == "http.response.start"
            if start and message["status"] in (401, 403) and not live:
                redirected = True
                why = _problem_detail(message)
                await send(_redirect_start(f"/web/login?refused={quote(why)}"))
                await send({"type": "http.response.body", "body": b""})
                return
            if redirected:
                return  # the refusal's body: replaced by the redirect
            await send(message)

        await self.app(inner, receive, sending)


def _cookie(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    for key, value in headers:
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            k, _, v = part.strip().partition("=")
            if k == name and v:
                return v
    return None


def _problem_detail(message: Message) -> str:
    for key, value in message.get("headers", []):
        if key.lower() == b"www-authenticate":
            text = value.decode("latin-1")
            if 'error="' in text:  # RFC 6750's code: invalid_token, insufficient_scope
                return str(text.split('error="', 1)[1].split('"', 1)[0].replace("_", " "))
    return "no token, or one this pool does not take"


def _redirect_start(location: str) -> Message:
    return {
        "type": "http.response.start",
        "status": 303,
        "headers": [
            (b"location", location.encode("latin-1")),
            (b"content-length", b"0"),
            (b"cache-control", b"no-store"),
        ],
    }


# ---- the pages ----------------------------------------------------------------------------


def _window(request: Request) -> tuple[str, int]:
    name = request.query_params.get("window", "1h")
    return (name, _pages.WINDOWS[name]) if name in _pages.WINDOWS else ("1h", 3600)


_STATES: Final = {"idle": 1, "running": 2, "removed": 3, "completed": 4, "held": 5}


def _queue_tools(request: Request, identity: Identity) -> Html:
    q = request.query_params
    state = q.get("status", "")
    options = [el("option", {"value": ""}, "any")] + [
        el("option", {"value": s, "selected": s == state}, s) for s in _STATES
    ]
    windows = [
        el("option", {"value": w, "selected": w == _window(request)[0]}, w) for w in _pages.WINDOWS
    ]
    fields = [
        el("label", None, "Status ", el("select", {"name": "status"}, options)),
        el(
            "label",
            None,
            "Owner ",
            el("input", {"name": "owner", "value": q.get("owner", ""), "size": 10}),
        )
        if identity.admin
        else None,
        el(
            "label",
            None,
            "Constraint ",
            el(
                "input",
                {
                    "name": "constraint",
                    "size": 36,
                    "value": q.get("constraint", ""),
                    "placeholder": 'e.g. JobBatchName == "x"',
                },
            ),
        ),
        el("label", None, "Charts over ", el("select", {"name": "window"}, windows)),
        el("button", {"type": "submit"}, "Show"),
    ]
    return el("form", {"method": "get", "action": "/web/", "class": "filters"}, fields)


def _filter(request: Request, identity: Identity) -> str | None:
    q = request.query_params
    parts = []
    if q.get("status") in _STATES:
        parts.append(f"JobStatus == {_STATES[q['status']]}")
    owner = q.get("owner", "").strip()
    if owner and identity.admin:
        parts.append(f"Owner == {ad_string(owner)}")
    constraint = q.get("constraint", "").strip()
    if constraint:
        parts.append(f"({constraint})")
    return " && ".join(parts) or None


async def _queue(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    now = src.clock()
    name, span = _window(request)
    start = now - span
    wanted = _data.mine(identity, _filter(request, identity))
    everyone = _data.mine(identity)
    attrs = _data.LIST_ATTRS
    counts, queued, done, all_queued, recent = await asyncio.gather(
        _data.state_counts(src, identity),
        src.jobs.query(identity, wanted, attrs, _LIST_LIMIT + 1),
        src.jobs.history(identity, wanted, attrs, 50),
        src.jobs.query(identity, everyone, attrs, _CHART_LIMIT),
        src.jobs.history(
            identity,
            _data.mine(identity, f"EnteredCurrentStatus >= {int(start)}"),
            attrs,
            _HISTORY_LIMIT,
        ),
    )
    series = _data.state_series([*all_queued, *recent], start, now)
    charts = el(
        "div",
        {"class": "charts"},
        el(
            "figure",
            None,
            step_chart(
                "states",
                f"Your jobs by state, last {name}"
                if not identity.admin
                else f"Jobs by state, last {name}",
                series,
                start,
                now,
            ),
        ),
        el(
            "figure",
            None,
            bar_chart("sites", "Running jobs per site", _data.running_by_site(all_queued)),
        ),
    )
    content = join(
        [
            _pages.state_badges(counts),
            charts,
            el("p", {"class": "hint"}, f"The charts read the first {_CHART_LIMIT} queued jobs.")
            if len(all_queued) >= _CHART_LIMIT
            else None,
            el("h2", None, "In the queue"),
            _pages.queue_table(
                queued[:_LIST_LIMIT], now, key="queue", more=len(queued) > _LIST_LIMIT
            ),
            el("h2", None, "Recently left the queue"),
            _pages.queue_table(done, now, key="history", more=False),
        ]
    )
    return "Queue", content, _queue_tools(request, identity)


async def _job(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    text = request.path_params["job_id"]
    try:
        job_id = JobId.parse(text)
    except ValueError:
        raise JobNotFound(f"{text!r} is not a job id (cluster.proc)") from None
    ad, queued = await _data.find_job(src, identity, job_id)
    (events, problem), outputs = await asyncio.gather(
        _data.job_events(src, ad), _data.job_outputs(src, ad)
    )
    content = _pages.job_page(ad, queued, events, problem, outputs, src.clock())
    return f"Job {job_id}", content, None


async def _pool(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    slots, problem = await src.slots()
    table, counts = _pages.pool_page(slots, problem)
    chart = el("figure", None, bar_chart("slots", "Slots by state", counts)) if counts else None
    return "Pool", join([chart, table]), None


async def _grid(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    now = src.clock()
    name, span = _window(request)
    start = now - span
    grid_jobs = _data.mine(identity, "JobUniverse == 9")
    queued, recent, (grid_ads, _) = await asyncio.gather(
        src.jobs.query(identity, grid_jobs, _data.LIST_ATTRS, None),
        src.jobs.history(
            identity,
            _data.mine(identity, f"JobUniverse == 9 && EnteredCurrentStatus >= {int(start)}"),
            _data.LIST_ATTRS,
            _HISTORY_LIMIT,
        ),
        src.grid_ads(),
    )
    charts = el(
        "div",
        {"class": "charts"},
        el(
            "figure",
            None,
            bar_chart(
                "throughput",
                f"Jobs completed per hour, last {name}",
                _data.throughput(recent, start, now),
                " /h",
            ),
        ),
        el(
            "figure",
            None,
            bar_chart("running", "Running jobs per resource", _data.running_by_site(queued)),
        ),
    )
    note = el(
        "p",
        {"class": "hint"},
        "From the jobs' ads: a resource is down when the grid "
        "manager marked its jobs so (GridResourceUnavailableTime); its last status is "
        "the newest LastRemoteStatusUpdate of its jobs; its last poll, when the grid manager "
        "made it and how long it took, is from the resource's ad in the collector "
        "(GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL).",
    )
    found = _data.with_polls(_data.resources(queued), grid_ads)
    content = join([_pages.resources_table(found, now), charts, note])
    return "Grid resources", content, None


async def _annexes(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    ads, problem = await src.annex_ads()
    return "Annexes", annex_page(ads, problem, identity, src.clock()), None


async def _routes(
    request: Request, identity: Identity, src: _data.Sources
) -> tuple[str, Html, Html | None]:
    config = await asyncio.to_thread(RouterConfig.load, src.home)
    name = ad_string(config.name)
    routed_ads = await src.jobs.query(
        identity,
        _data.mine(identity, f"RoutedBy == {name} && RoutedFromJobId isnt undefined"),
        _data.LIST_ATTRS,
        None,
    )
    routed: dict[str, Counter[str]] = {}
    for ad in routed_ads:
        route = ad.get("RouteName")
        routed.setdefault(str(route), Counter())[_data.status_label(ad.get("JobStatus"))] += 1
    idle = await src.jobs.query(
        identity,
        _data.mine(
            identity,
            f"JobStatus == 1 && RoutedToJobId is undefined && "
            f"RoutedBy isnt {name} && JobUniverse != 9",
        ),
        None,
        _ROUTE_EXPLAINED,
    )

    def explain() -> list[tuple[Any, Any, Any]]:
        found = []
        for ad in idle:
            job = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
            verdicts, why_not = explain_routes(ad, config, source_id=job)
            found.append((ad, verdicts, why_not))
        return found

    unrouted = await asyncio.to_thread(explain) if config.routes else []
    return "CE routes", _pages.routes_page(config, routed, unrouted), None
