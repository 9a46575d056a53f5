"""Bearer tokens on the HTTP APIs: an ASGI middleware, and helpers for the routes.

    verifier = TokenVerifier(config)
    app = TokenAuthMiddleware(app, verifier.verify, realm=config.trust_domain)
    ...
    principal = require(request, "WRITE")      # in a route: the caller, or 403

The middleware takes `Authorization: Bearer <token>` (or, without one, the client's TLS
certificate, when given `connection`), verifies it and puts the caller's
`Principal` in the request's state (`request.state` under PRINCIPAL_KEY, and
`request.user`). By default GET, HEAD and OPTIONS need READ and other methods WRITE.
A refusal is logged (the token's id and subject, never its text) and answered as a
problem document, 401 with `WWW-Authenticate: Bearer realm="<trust domain>"` (RFC
6750), which tells a client which pool's token to present, or 403 for a token that
does not grant the authorization; never with a traceback.

`token_authenticator` is the same check as an `Authenticator` for
`htgrid.net.app.create_app`, for an app built without the middleware;
`auth_error_handler` answers an AuthError a route raises (from `require`) the same way.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Final

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from htgrid.net.security._audit import AuditEvent, AuditLog, claimed
from htgrid.net.security._authz import Principal
from htgrid.net.security._errors import AuthError, MalformedToken, MissingToken, SecurityError
from htgrid.queue import Identity

__all__ = [
    "PRINCIPAL_KEY",
    "TokenAuthMiddleware",
    "auth_error_handler",
    "authz_by_method",
    "bearer_token",
    "principal_of",
    "problem_response",
    "require",
    "token_authenticator",
    "token_identity",
]

PRINCIPAL_KEY: Final = "htgrid.principal"
_log = logging.getLogger("htgrid.net.security")
_SAFE: Final = {"GET", "HEAD", "OPTIONS"}
_QUOTED_UNSAFE: Final = re.compile(r'["\\]|[^\x20-\x7e]')  # what a quoted-string cannot hold

Verify = Callable[[str], Principal]
#: What the middleware calls: a pool's `TokenVerifier.verify`, or a `Gatekeeper`'s, which
#: may have to fetch an issuer's keys.
AsyncVerify = Callable[[str], Principal | Awaitable[Principal]]
Required = Callable[[Mapping[str, Any]], str | None]
#: After verifying: raise an AuthError to refuse the principal the level from the host.
Admit = Callable[[Principal, str | None, str], None]
#: Who a request without a bearer token is by its connection (its TLS client certificate),
#: or None.
Connection = Callable[[Mapping[str, Any]], Principal | None]


def authz_by_method(scope: Mapping[str, Any]) -> str | None:
    """READ for GET, HEAD and OPTIONS; WRITE for anything else."""
    return "READ" if scope.get("method", "GET") in _SAFE else "WRITE"


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The token of the one `Authorization: Bearer` header (MissingToken, MalformedToken)."""
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if not values:
        raise MissingToken("the request has no Authorization header: present a bearer token")
    if len(values) > 1:
        raise MalformedToken("the request has more than one Authorization header")
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise MalformedToken("the Authorization header must be 'Bearer <token>'")
    return token


def _client(scope: Mapping[str, Any]) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "an unknown client"


def _request(scope: Mapping[str, Any]) -> str:
    return f"{scope.get('method', 'WS')} {scope.get('path', '')}"


def _refused(where: str, exc: SecurityError) -> None:
    if isinstance(exc, AuthError):
        _log.warning("refused %s: %s: %s", where, type(exc).__name__, exc)
    else:
        _log.error("cannot check the token of %s: %s", where, exc)


def _accepted(where: str, principal: Principal) -> Principal:
    _log.debug(
        "%s: token %s of %s acts as %s",
        where,
        principal.token_id,
        principal.subject,
        principal.user,
    )
    return principal


def _authenticate(
    verify: Verify,
    headers: Iterable[tuple[bytes, bytes]],
    scope: Mapping[str, Any],
    need: str | None,
) -> Principal:
    where = f"{_request(scope)} from {_client(scope)}"
    try:
        principal = verify(bearer_token(headers))
        if need is not None:
            principal.require(need)
    except SecurityError as exc:
        _refused(where, exc)
        raise
    return _accepted(where, principal)


def _quoted(text: str) -> str:
    return _QUOTED_UNSAFE.sub("'", text)[:300]


def problem_response(error: SecurityError, realm: str) -> JSONResponse:
    """The problem document answering `error` (401/403 with WWW-Authenticate, or 500)."""
    status = error.status if isinstance(error, AuthError) else 500
    # A broken configuration is the administrator's to read in the log, not the caller's.
    cls = type(error) if status != 500 else SecurityError
    slug = re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()
    doc = {
        "type": f"urn:htgrid:problem:{slug}",
        "title": (cls.__doc__ or cls.__name__).strip().splitlines()[0],
        "status": status,
        "detail": str(error) if status != 500 else "the server cannot check tokens now",
        "error": cls.__name__,
    }
    headers = {}
    if isinstance(error, AuthError):
        challenge = f'Bearer realm="{_quoted(realm)}"'
        if error.bearer_error:  # RFC 6750: no error code when no token was sent
            challenge += (
                f', error="{error.bearer_error}", error_description="{_quoted(str(error))}"'
            )
        headers["WWW-Authenticate"] = challenge
    return JSONResponse(doc, status, headers, media_type="application/problem+json")


class TokenAuthMiddleware:
    """Authenticates every HTTP and WebSocket request by its bearer token."""

    def __init__(
        self,
        app: ASGIApp,
        verify: AsyncVerify,
        *,
        realm: str,
        required: Required = authz_by_method,
        exempt: Collection[str] = (),
        admit: Admit | None = None,
        audit: AuditLog | None = None,
        connection: Connection | None = None,
    ) -> None:
        """`verify` may be async (a Gatekeeper's); `admit` applies DENY_* after it;
        `audit` records every refusal and every accepted request that is not READ;
        `connection` names a caller without a token by its client certificate."""
        self.app = app
        self.verify: AsyncVerify = verify
        self.realm = realm  # the trust domain, so clients know which token to present
        self.required = required
        self.exempt = frozenset(exempt)  # paths answered without a token
        self.admit = admit
        self.audit = audit
        self.connection = connection

    async def _authenticate(self, scope: Scope, need: str | None) -> Principal:
        where = f"{_request(scope)} from {_client(scope)}"
        try:
            principal = await self._principal(scope)
            if need is not None:
                principal.require(need)
            if self.admit is not None:
                client = scope.get("client")
                self.admit(principal, need, client[0] if client else "")
        except SecurityError as exc:
            _refused(where, exc)
            raise
        return _accepted(where, principal)

    async def _principal(self, scope: Scope) -> Principal:
        try:
            token = bearer_token(scope["headers"])
        except MissingToken:
            by_cert = self.connection(scope) if self.connection is not None else None
            if by_cert is None:
                raise
            return by_cert
        # A pool token costs a stat per file (TokenVerifier.verify), fine on the loop;
        # an issuer's may await its keys, fetched without blocking the loop.
        found = self.verify(token)
        return await found if inspect.isawaitable(found) else found

    async def _record(self, event: AuditEvent) -> None:
        if self.audit is not None:
            await asyncio.to_thread(self.audit.record, event)  # a file write: off the loop

    async def _refusal(self, scope: Scope, exc: SecurityError) -> None:
        try:
            token = claimed(bearer_token(scope["headers"]))
        except AuthError:
            token = None
        status = exc.status if isinstance(exc, AuthError) else 500
        reason = f"{type(exc).__name__}: {exc}"
        await self._record(
            AuditEvent(False, _request(scope), _client(scope), status, None, token, reason)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"} or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        need = self.required(scope)
        try:
            principal = await self._authenticate(scope, need)
        except SecurityError as exc:
            await self._refusal(scope, exc)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": type(exc).__name__})
            else:
                await problem_response(exc, self.realm)(scope, receive, send)
            return
        state = {**scope.get("state", {}), PRINCIPAL_KEY: principal}
        inner = {**scope, "state": state, "user": principal}
        if self.audit is None or need in (None, "READ", "ALLOW"):
            await self.app(inner, receive, send)
            return
        recorded = False

        async def audited(status: int | None) -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                event = AuditEvent(True, _request(scope), _client(scope), status, principal)
                await self._record(event)

        async def sending(message: Any) -> None:
            # On disk before the caller sees the answer: a client reading the audit log
            # after its request has returned finds the request there.
            if message["type"] == "http.response.start":
                await audited(message["status"])
            await send(message)

        try:
            await self.app(inner, receive, sending)
        finally:
            await audited(None)  # the app failed before it answered


def principal_of(conn: HTTPConnection | Mapping[str, Any]) -> Principal:
    """The caller the middleware authenticated (MissingToken when there is none)."""
    scope = conn.scope if isinstance(conn, HTTPConnection) else conn
    principal = scope.get("state", {}).get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise MissingToken("the request was not authenticated with a token")
    return principal


def require(conn: HTTPConnection | Mapping[str, Any], authz: str) -> Principal:
    """The caller, if its token grants `authz` (InsufficientScope, 403, otherwise)."""
    return principal_of(conn).require(authz)


def token_identity(request: Request) -> Identity:
    """The queue's identity of a caller the middleware authenticated (an Authenticator)."""
    return principal_of(request).identity()


def token_authenticator(
    verify: Verify, *, required: Required = authz_by_method
) -> Callable[[Request], Identity]:
    """An Authenticator checking the request's bearer token itself (raising AuthError)."""

    def authenticate(request: Request) -> Identity:
        principal = _authenticate(
            verify, request.headers.raw, request.scope, required(request.scope)
        )
        return principal.identity()

    return authenticate


def auth_error_handler(realm: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A Starlette exception handler for AuthError (and SecurityError) raised in routes."""

    async def handle(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, SecurityError):
            raise exc
        where = f"{request.method} {request.url.path} from {_client(request.scope)}"
        _log.warning("refused %s: %s: %s", where, type(exc).__name__, exc)
        return problem_response(exc, realm)

    return handle
