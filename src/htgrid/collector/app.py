"""The collector's HTTP API: a Starlette (ASGI) app over an `AdStore`.

    GET  /v1/health                        {"status": "ok", "version": ..., "ads": {...}}
    GET  /v1/ads?type=Machine&constraint=..&projection=Name,Memory&limit=N
                                           a JSON array of ads (HTCondor's JSON form)
    GET  /v1/ads?type=Machine&since=EPOCH:VERSION
                                           the same ads for a client that keeps those it
                                           decoded: {"epoch", "version", "ads"}, the ads
                                           stored since in full, the others by version
                                           (`AdStore.query_changes`; `since=` for all)
    POST /v1/updates/UPDATE_STARTD_AD      a JSON array of ads -> {"accepted": n, "results": [...]}
    POST /v1/changes/UPDATE_STARTD_AD      {"epoch": E, "ads": [ad...], "refresh": [[V, ad]...]}:
                                           the ads that changed whole, the others' volatile
                                           attributes for the ad stored at version V
                                           (`AdStore.refresh`) -> {"epoch", "accepted",
                                           "results": [..., each with its "version"]}
    POST /v1/invalidations/INVALIDATE_STARTD_ADS
                                           one query ad -> {"invalidated": n}
    GET  /v1/ccb/registrations/{ccbid}?heartbeat=S
                                           an execute node's registration with the broker
                                           (CCB): a stream of requests, one JSON line each
    POST /v1/ccb/requests                  {ccbid, connect_id, return_address}: have that
                                           node connect to the return address (202)

Errors are problem documents (`_problems`). Given the pool's `SecurityConfig`, the app
checks every request's bearer token (`htgrid.net.security.TokenAuthMiddleware`; the
daemon serves it over TLS): reading needs READ, i.e. any valid token of the pool, and
an update or invalidation needs the level HTCondor's collector asks of that command
(ADVERTISE_STARTD for UPDATE_STARTD_AD, ADVERTISE_SCHEDD for schedd and submitter ads,
NEGOTIATOR for the negotiator's, DAEMON for the rest): the pool's daemon token or an
administrator's has them all, a plain user's token none. A token that grants
ADVERTISE_STARTD but not DAEMON is an execute node's (`-identity node7@<trust domain>`):
it may advertise and invalidate the ads of that node only, whose Machine is `node7` and
whose Name is `node7` or `slotN[_M]@node7` (`node_of`), or of hosts named under it
(Machine `i-0abc.big.annex` for the token of `big.annex@<trust domain>`: an annex's one
token serves all its instances), and with no AnnexName but its own annex's (`big`: jobs
aimed at an annex match its slots by it, and any user may get a token for an annex of
theirs); any other ad refuses the whole
request (403, naming the ad and the token). A refusal is logged (the token's id and
subject, never its text). Without a config the app checks nothing:
only for tests talking to it in-process.

The broker (HTCondor's CCB, see `htgrid.collector._ccb`): a node registers under its own
name only (ADVERTISE_STARTD; a node's token for its node, or a host named under it, as
for its ads), a new registration replacing the one before (the node restarted); the ads
of a node's token may carry no CCBID but such a name. A request (ADVERTISE_SCHEDD: a schedd of the pool) goes
to the registration of the CCBID it names and to no other; at most a few hundred wait
for a node at a time.

The store is used from one worker thread at a time: its work (evaluating constraints
over 10,000 ads, encoding them) stays off the event loop and needs no lock.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from json import JSONDecodeError
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from htgrid import __version__
from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.client import shown
from htgrid.collector._broker import Broker, ccb_register, ccb_request, node_of, under
from htgrid.collector._ccb import ccb_contact
from htgrid.collector._errors import InvalidAd, InvalidQuery, ProtocolError
from htgrid.collector._problems import to_problem
from htgrid.collector._store import AdStore, UpdateResult
from htgrid.collector._types import AdType, Command, parse_command
from htgrid.collector._wire import decode_ads, decode_changes
from htgrid.errors import HTGridError
from htgrid.net.cedar import REMOTE_VERSION
from htgrid.net.security import (
    PRINCIPAL_KEY,
    AuditLog,
    AuthError,
    Gatekeeper,
    GatekeeperConfig,
    InsufficientScope,
    Principal,
    SecurityConfig,
    TokenAuthMiddleware,
    problem_response,
)
from htgrid.net.server import ProblemResponse, certificate_caller, read_body
from htgrid.pool import DEFAULT_LIMITS, ApiLimits

__all__ = ["create_app", "node_of"]

_log = logging.getLogger("htgrid.collector")

T = TypeVar("T")

_CCB_REGISTRATIONS: Final = "/v1/ccb/registrations/"
# An annex's token names its annex: NAME.annex (htgrid.annex's annex_identity).
_ANNEX: Final = ".annex"
_CCB_REQUESTS: Final = "/v1/ccb/requests"

# What each ad type's UPDATE_* / INVALIDATE_* asks of the caller (HTCondor's collector).
_ADVERTISE: Final[Mapping[AdType, str]] = {
    AdType.STARTD: "ADVERTISE_STARTD",
    AdType.SCHEDD: "ADVERTISE_SCHEDD",
    AdType.SUBMITTER: "ADVERTISE_SCHEDD",
    AdType.MASTER: "ADVERTISE_MASTER",
    AdType.NEGOTIATOR: "NEGOTIATOR",
}


def required_authz(scope: Mapping[str, Any]) -> str:
    """The authorization a request needs: READ to read, an ADVERTISE level to change ads,
    ADVERTISE_STARTD to register with the broker and ADVERTISE_SCHEDD to ask it."""
    path = str(scope.get("path", ""))
    if path.startswith(_CCB_REGISTRATIONS):
        return "ADVERTISE_STARTD"
    if path == _CCB_REQUESTS:
        return "ADVERTISE_SCHEDD"
    if scope.get("method", "GET") in {"GET", "HEAD", "OPTIONS"}:
        return "READ"
    _, _, word = path.rpartition("/")
    try:
        command = parse_command(word)
    except HTGridError:
        return "DAEMON"  # the route answers what is wrong, to a caller who may advertise
    return _ADVERTISE.get(command.ad_type, "DAEMON")


def _node_caller(request: Request, ad_type: AdType) -> tuple[Principal, str] | None:
    principal = request.scope.get("state", {}).get(PRINCIPAL_KEY)
    if ad_type is not AdType.STARTD or not isinstance(principal, Principal):
        return None
    node = node_of(principal)
    return None if node is None else (principal, node)


def _check_own(principal: Principal, node: str, ad: ClassAd) -> None:
    """InsufficientScope unless `ad` is the ad of `node` (Machine, and Name's host)."""
    machine, name = ad.get("Machine"), ad.get("Name")
    if (
        isinstance(machine, str)
        and under(machine, node)
        and (not isinstance(name, str) or name.rpartition("@")[2].casefold() == machine.casefold())
    ):
        _check_own_annex(principal, node, ad)
        _check_own_ccbid(principal, node, ad)
        return
    raise InsufficientScope(
        f"token {principal.token_id} of {principal.subject} may advertise the slots of "
        f"node {node!r} only (and hosts named under it), not Name {name!r} with Machine "
        f"{machine!r} (NETWORK_HOSTNAME "
        f"names the node; its token's identity must be {node}@<trust domain>)"
    )


def _check_own_annex(principal: Principal, node: str, ad: ClassAd) -> None:
    """InsufficientScope when the ad names an annex (AnnexName, which jobs aimed at an
    annex match) other than the token's own (`NAME` of `NAME.annex`): any pool user may
    get an annex token for an annex of theirs, and must not draw another's jobs."""
    if "AnnexName" not in ad:
        return
    annex = ad.get("AnnexName")
    own = node[: -len(_ANNEX)] if node.casefold().endswith(_ANNEX) else None
    if own is not None and isinstance(annex, str) and annex.casefold() == own.casefold():
        return
    mine = f"its own annex's ({own!r})" if own is not None else "none (not an annex's token)"
    raise InsufficientScope(
        f"token {principal.token_id} of {principal.subject} may advertise slots of "
        f"{mine} AnnexName, not {shown(str(ad.lookup('AnnexName')), 80)}"
    )


def _check_own_ccbid(principal: Principal, node: str, ad: ClassAd) -> None:
    """InsufficientScope when the ad's MyAddress names another node's broker registration
    (schedds would send that node's requests for this one)."""
    address = ad.get("MyAddress")
    contact = ccb_contact(address) if isinstance(address, str) else None
    if contact is not None and not under(contact.ccbid, node):
        raise InsufficientScope(
            f"token {principal.token_id} of {principal.subject} may advertise node "
            f"{node!r} at its own broker registration (CCBID ...#{node}, or a host named "
            f"under it), not at {contact.ccbid!r}"
        )


def _own_query(principal: Principal, node: str, query: ClassAd) -> None:
    """Narrow a node's invalidation to its own ads: a Name on the node or a host under
    it, or its Requirements and `TARGET.Machine` being such a host."""
    name = query.get("Name")
    if isinstance(name, str):
        # The slot's Machine is its Name's host: an annex's instance is a host under the
        # node its token names (slot1_1@i-0abc.big.annex), not the node itself.
        host = name.rpartition("@")[2]
        _check_own(principal, node, ClassAd({"Machine": host, "Name": name}))
        return
    suffix = "." + node
    own = (
        f"(TARGET.Machine =?= {quote(node)} || "
        f"substr(TARGET.Machine, {-len(suffix)}) =?= {quote(suffix)})"
    )
    if "Requirements" in query:
        own = f"({query.lookup('Requirements')}) && {own}"
    query["Requirements"] = ExprTree(own)


class _Collector:
    """The app's state: the store, the one-thread limiter, and the collector's own ad."""

    def __init__(self, store: AdStore, name: str, address: str, interval: float) -> None:
        self.store = store
        self.limiter = anyio.CapacityLimiter(1)
        self.name = name
        self.address = address
        self.interval = max(1, round(interval))
        self.started = int(store.now())
        self.sequence = 0

    async def run(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn, limiter=self.limiter)

    def refresh_own_ad(self) -> None:
        """Store the collector's ad about itself (what `condor_status -collector` shows)."""
        self.sequence += 1
        ad = ClassAd()
        ad["MyType"] = AdType.COLLECTOR.value
        ad["Name"] = self.name
        ad["Machine"] = socket.gethostname()
        ad["MyAddress"] = self.address
        ad["CondorVersion"] = REMOTE_VERSION
        ad["DaemonStartTime"] = self.started
        ad["UpdateSequenceNumber"] = self.sequence
        ad["UpdateInterval"] = self.interval  # so it expires if housekeeping stops
        ad["TotalAds"] = len(self.store)
        self.store.update("UPDATE_COLLECTOR_AD", ad)


def _problem(error: HTGridError, status: int | None = None) -> JSONResponse:
    doc = to_problem(error)
    if status is not None:
        doc["status"] = status
    return ProblemResponse(doc, status_code=doc["status"])


def _limit(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        limit = int(text)
    except ValueError:
        raise InvalidQuery(f"limit must be a whole number, not {text!r}") from None
    if limit < 0:
        raise InvalidQuery("limit must not be negative")
    return limit


async def _health(request: Request) -> Response:
    state: _Collector = request.app.state.collector
    counts = await state.run(state.store.counts)
    return JSONResponse({"status": "ok", "version": __version__, "ads": counts})


def _since(text: str) -> tuple[str, int] | None:
    if not text:
        return None
    epoch, _, version = text.rpartition(":")
    try:
        return epoch, int(version)
    except ValueError:
        raise InvalidQuery(
            f"since must be EPOCH:VERSION of an earlier answer, not {text!r}"
        ) from None


async def _ads(request: Request) -> Response:
    state: _Collector = request.app.state.collector
    params = request.query_params
    ad_type = params.get("type") or None
    constraint = params.get("constraint") or None
    projection = [n.strip() for n in (params.get("projection") or "").split(",") if n.strip()]
    if "since" in params:
        since = _since(params["since"])
        text = await state.run(
            lambda: state.store.query_changes(ad_type, constraint, projection or None, since)
        )
        return Response(text, media_type="application/json")
    limit = _limit(params.get("limit"))
    text = await state.run(
        lambda: state.store.query_json(ad_type, constraint, projection or None, limit)
    )
    return Response(text, media_type="application/json")


async def _body(request: Request) -> bytes:
    body = await read_body(request, request.app.state.limits)
    if not body.strip():
        raise ProtocolError("the request has no body; send a JSON array of ads")
    return body


async def _update_request(request: Request) -> tuple[Command, bytes, tuple[Principal, str] | None]:
    """An update's command, body, and the node whose token sent it (if one did)."""
    command = parse_command(request.path_params["command"])
    if command.invalidate:
        raise ProtocolError(f"{command.name} removes ads; POST it to /v1/invalidations")
    body = await _body(request)
    return command, body, _node_caller(request, command.ad_type)


async def _updates(request: Request) -> Response:
    state: _Collector = request.app.state.collector
    command, body, node = await _update_request(request)

    def store_all() -> list[dict[str, Any]]:
        ads = decode_ads(body)
        if node is not None:  # before anything is stored: all of the node's, or none
            for ad in ads:
                _check_own(*node, ad)
        update = functools.partial(state.store.update, command, take=True)
        return [_stored(functools.partial(update, ad), ad) for ad in ads]

    results = await state.run(store_all)
    accepted = sum(1 for r in results if r["accepted"])
    return JSONResponse({"accepted": accepted, "results": results})


def _result(result: UpdateResult) -> dict[str, Any]:
    reason = result.reason or None
    return {
        "accepted": result.accepted,
        "name": result.name,
        "reason": reason,
        **({"version": result.version} if result.accepted else {}),
    }


async def _changes(request: Request) -> Response:
    """A daemon's changed ads whole and its other ads refreshed, in one request: what a
    node sends at each update once the collector took its ads (`AdStore.refresh`)."""
    state: _Collector = request.app.state.collector
    command, body, node = await _update_request(request)

    def store_all() -> tuple[str, list[dict[str, Any]]]:
        changes = decode_changes(body)
        if node is not None:  # before anything is stored: all of the node's, or none
            for ad in [*changes.ads, *(ad for _, ad in changes.refreshes)]:
                _check_own(*node, ad)
        store = state.store
        update = functools.partial(store.update, command, take=True)
        results = [_stored(functools.partial(update, ad), ad) for ad in changes.ads]
        for version, ad in changes.refreshes:
            refresh = functools.partial(store.refresh, command, ad, (changes.epoch, version))
            results.append(_stored(refresh, ad))
        return store.epoch, results

    epoch, results = await state.run(store_all)
    accepted = sum(1 for r in results if r["accepted"])
    return JSONResponse({"epoch": epoch, "accepted": accepted, "results": results})


def _stored(store: Callable[[], UpdateResult], ad: ClassAd) -> dict[str, Any]:
    """What became of one ad: as `store` stored it, or refused as an ad it cannot hold
    (each ad stands alone, as with condor_advertise -multiple)."""
    try:
        return _result(store())
    except InvalidAd as err:
        name = ad.get("Name")
        return _result(UpdateResult(False, name if isinstance(name, str) else "", str(err)))


async def _invalidations(request: Request) -> Response:
    state: _Collector = request.app.state.collector
    command = parse_command(request.path_params["command"])
    if not command.invalidate:
        raise ProtocolError(f"{command.name} stores ads; POST it to /v1/updates")
    body = await _body(request)
    node = _node_caller(request, command.ad_type)

    def remove() -> int:
        queries = decode_ads(body)
        if node is not None:  # a node removes its own ads only
            principal, name = node
            for query in queries:
                _own_query(principal, name, query)
        return sum(state.store.invalidate(command, query) for query in queries)

    return JSONResponse({"invalidated": await state.run(remove)})


def _handled(endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """`endpoint` with htgrid's errors turned into problem documents."""

    async def run(request: Request) -> Response:
        try:
            response: Response = await endpoint(request)
        except AuthError as error:
            where = f"{request.method} {request.url.path}"
            _log.warning("refused %s: %s: %s", where, type(error).__name__, error)
            return problem_response(error, request.app.state.realm)
        except HTGridError as error:
            return _problem(error)
        except (JSONDecodeError, UnicodeDecodeError) as error:
            return _problem(ProtocolError(f"the request body is not JSON: {error}"))
        return response

    return run


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    error = ProtocolError(f"no such resource: {request.method} {request.url.path}")
    return _problem(error, status)


def create_app(
    store: AdStore | None = None,
    *,
    name: str = "htgrid pool",
    address: str = "",
    housekeeping_interval: float = 60.0,
    security: SecurityConfig | None = None,
    limits: ApiLimits = DEFAULT_LIMITS,
) -> Starlette:
    """The collector app over `store`; expiry runs every `housekeeping_interval` seconds.

    Expired ads are also left out of every answer at once, so the interval only bounds
    how long they take memory. With `security`, callers need tokens of that pool.
    `limits` caps request bodies (MAX_API_REQUEST_MB).
    """
    state = _Collector(
        store if store is not None else AdStore(), name, address, housekeeping_interval
    )

    async def housekeeping() -> None:
        while True:
            await state.run(state.refresh_own_ad)
            gone = await state.run(state.store.expire)
            if gone:
                _log.info("expired %d ads not refreshed in time", gone)
            await anyio.sleep(housekeeping_interval)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(housekeeping)
            yield
            group.cancel_scope.cancel()

    routes = [
        Route("/v1/health", _handled(_health), methods=["GET"]),
        Route("/v1/ads", _handled(_ads), methods=["GET"]),
        Route("/v1/updates/{command}", _handled(_updates), methods=["POST"]),
        Route("/v1/changes/{command}", _handled(_changes), methods=["POST"]),
        Route("/v1/invalidations/{command}", _handled(_invalidations), methods=["POST"]),
        Route("/v1/ccb/registrations/{ccbid}", _handled(ccb_register), methods=["GET"]),
        Route(_CCB_REQUESTS, _handled(ccb_request), methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_found},
    )
    app.state.collector = state
    app.state.broker = Broker()
    app.state.limits = limits
    app.state.realm = security.trust_domain if security is not None else ""
    if security is not None:
        # As HTCondor-CE's collector: the pool's tokens and issuers' (SciTokens), mapped,
        # banned (DENY_*) and, with COLLECTOR_AUDIT_LOG, audited.
        settings = GatekeeperConfig.load(security.home, "COLLECTOR")
        gate = Gatekeeper(security, settings)
        app.add_middleware(
            TokenAuthMiddleware,
            verify=gate.verify,
            realm=security.trust_domain,
            required=required_authz,
            admit=gate.admit,
            # A grid user's certificate, where the server asks for one (`make_server`).
            connection=certificate_caller(gate),
            audit=(
                AuditLog(settings.audit_log, rotation=settings.audit_rotation)
                if settings.audit_log is not None
                else None
            ),
        )
    return app
