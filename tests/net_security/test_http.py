"""Tokens over HTTPS: a tiny Starlette app behind the middleware, served by uvicorn with
the pool CA's certificate, called with httpx as a remote pool's grid manager would."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import Message
from starlette.websockets import WebSocket

from htgrid.client import BearerAuth, find_token
from htgrid.net.security import (
    AuthError,
    InsufficientScope,
    PoolCA,
    Principal,
    SecurityConfig,
    SecurityError,
    TokenAuthMiddleware,
    TokenIssuer,
    TokenVerifier,
    auth_error_handler,
    client_ssl_context,
    principal_of,
    require,
    save_token,
    server_ssl_context,
    token_authenticator,
)

from ._support import b64, parts, sign

DOMAIN = "pool.test"


async def _whoami(request: Request) -> JSONResponse:
    who = principal_of(request)
    return JSONResponse({"user": who.user, "admin": who.is_admin, "same": request.user is who})


async def _admin(request: Request) -> JSONResponse:
    return JSONResponse({"user": require(request, "ADMINISTRATOR").user})


async def _health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def _ws(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(principal_of(websocket).user)
    await websocket.close()


def _app(verifier: TokenVerifier) -> TokenAuthMiddleware:
    app = Starlette(
        routes=[
            Route("/whoami", _whoami, methods=["GET", "POST"]),
            Route("/admin", _admin),
            Route("/health", _health),
            WebSocketRoute("/ws", _ws),
        ],
        exception_handlers={AuthError: auth_error_handler(DOMAIN)},
    )
    return TokenAuthMiddleware(app, verifier.verify, realm=DOMAIN, exempt={"/health"})


@dataclass(frozen=True)
class Served:
    url: str
    config: SecurityConfig
    issuer: TokenIssuer
    ca_file: Path

    def client(self, auth: httpx.Auth | None = None, ca: Path | None = None) -> httpx.Client:
        context = client_ssl_context([ca or self.ca_file])
        return httpx.Client(base_url=self.url, auth=auth, verify=context, timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = SecurityConfig(tmp_path_factory.mktemp("tls") / "pool", DOMAIN)
    cert = PoolCA(config.ca_dir).ensure_server_cert("schedd")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv_config = uvicorn.Config(_app(TokenVerifier(config)), lifespan="off", log_level="critical")
    uv_config.load()
    uv_config.ssl = server_ssl_context(cert)  # our context, whatever uvicorn would build
    server = uvicorn.Server(uv_config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    port = sock.getsockname()[1]
    yield Served(f"https://127.0.0.1:{port}", config, TokenIssuer(config), config.ca_dir / "ca.crt")
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _refused(
    served: Served, token: str, caplog: pytest.LogCaptureFixture, status: int = 401
) -> dict[str, Any]:
    caplog.clear()
    with (
        caplog.at_level(logging.WARNING, logger="htgrid.net.security"),
        served.client(BearerAuth(token) if token else None) as client,
    ):
        response = client.get("/whoami")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert f'realm="{DOMAIN}"' in response.headers["www-authenticate"]
    doc: dict[str, Any] = response.json()
    assert "Traceback" not in response.text
    logged = [r.getMessage() for r in caplog.records if r.name == "htgrid.net.security"]
    assert len(logged) == 1 and "refused GET /whoami from 127.0.0.1:" in logged[0]
    assert doc["error"] in logged[0]
    signature = token.rsplit(".", 1)[-1]
    assert not signature or signature not in logged[0] + response.text
    return doc


def test_a_valid_token_over_tls(served: Served) -> None:
    token = served.issuer.create("alice@example.org", lifetime=300)
    with served.client(BearerAuth(token)) as client:
        response = client.get("/whoami")
        assert response.json() == {"user": "alice", "admin": False, "same": True}
        assert client.post("/whoami").status_code == 200
        assert client.get("/admin").status_code == 403
        assert client.get("/health").json() == {"status": "ok"}


def test_no_token_tells_the_client_which_pool_to_ask(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    doc = _refused(served, "", caplog)
    assert doc["error"] == "MissingToken" and doc["status"] == 401
    assert doc["type"] == "urn:htgrid:problem:missing-token"
    with served.client() as client:  # RFC 6750: a bare challenge naming the realm
        assert client.get("/whoami").headers["www-authenticate"] == f'Bearer realm="{DOMAIN}"'


def test_forged(served: Served, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    impostor = TokenIssuer(SecurityConfig(tmp_path / "impostor", DOMAIN))
    doc = _refused(served, impostor.create("root"), caplog)
    assert doc["error"] == "ForgedToken"
    assert doc["detail"] == "the token's signature does not match its signing key"


def test_expired(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    issued_earlier = TokenIssuer(served.config, clock=lambda: 1_000_000_000.0)
    doc = _refused(served, issued_earlier.create("bob", lifetime=60), caplog)
    assert doc["error"] == "ExpiredToken" and "expired at 2001-09-09 01:47:40 UTC" in doc["detail"]


def test_revoked(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    token = served.issuer.create("bob")
    with served.client(BearerAuth(token)) as client:
        assert client.get("/whoami").status_code == 200
    TokenVerifier(served.config).revoked.add(parts(token)[1]["jti"], "test")
    doc = _refused(served, token, caplog)
    assert doc["error"] == "RevokedToken" and "has been revoked" in doc["detail"]


def test_wrong_issuer(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    other = TokenIssuer(SecurityConfig(served.config.home, "other.test"))
    doc = _refused(served, other.create("alice"), caplog)
    assert doc["error"] == "UntrustedIssuer" and "'other.test'" in doc["detail"]


def test_alg_none(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    _, claims, _ = parts(served.issuer.create("root"))
    head = b64(b'{"alg":"none","kid":"POOL"}')
    doc = _refused(served, f"{head}.{b64(str(claims).encode())}.", caplog)
    assert doc["error"] == "ForgedToken" and "'none'" in doc["detail"]


def test_tampered(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    token = served.issuer.create("bob", authz=["READ"])
    header, claims, sig = parts(token)
    promoted = sign(header, {**claims, "sub": "root"}, b"guess").rsplit(".", 1)[0]
    doc = _refused(served, f"{promoted}.{sig}", caplog)
    assert doc["error"] == "ForgedToken"


def test_insufficient_scope(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    reader = served.issuer.create("bob", authz=["READ"])
    with served.client(BearerAuth(reader)) as client:
        assert client.get("/whoami").status_code == 200
        response = client.post("/whoami")
    assert response.status_code == 403
    assert response.json()["error"] == "InsufficientScope"
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    admin = served.issuer.create("alice", authz=["ADMINISTRATOR"])
    with served.client(BearerAuth(admin)) as client:
        assert client.get("/admin").json() == {"user": "alice"}


def test_a_foreign_ca_is_not_trusted(served: Served, tmp_path: Path) -> None:
    foreign = PoolCA(tmp_path / "foreign")
    foreign.ensure()
    token = served.issuer.create("alice")
    with (
        served.client(BearerAuth(token), ca=foreign.cert_path) as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get("/whoami")


def test_the_client_picks_the_token_of_the_servers_pool(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = tmp_path / "tokens.d"
    other_pool = TokenIssuer(SecurityConfig(tmp_path / "other", "other.test"))
    save_token(tokens / "a_other", other_pool.create("alice"))  # first in name order
    ours = served.issuer.create("alice@example.org")
    save_token(tokens / "b_ours", ours)
    assert find_token(DOMAIN, dirs=[tokens], env={}) == ours
    assert find_token("elsewhere.test", dirs=[tokens], env={}) is None

    asked: list[str] = []

    def finder(issuer: str) -> str | None:
        asked.append(issuer)
        return find_token(issuer, dirs=[tokens], env={})

    auth = BearerAuth(find=finder)  # the issuer is learnt from the first 401
    with caplog.at_level(logging.WARNING), served.client(auth) as client:
        assert client.get("/whoami").json()["user"] == "alice"
        assert client.post("/whoami", json={"x": 1}).status_code == 200
    assert asked == [DOMAIN] and auth.issuer == DOMAIN


def test_environment_token_only_for_its_own_pool(served: Served, tmp_path: Path) -> None:
    ours = served.issuer.create("bob")
    theirs = TokenIssuer(SecurityConfig(tmp_path / "other", "other.test")).create("bob")
    assert find_token(DOMAIN, dirs=[], env={"HTGRID_TOKEN": ours}) == ours
    assert find_token(DOMAIN, dirs=[], env={"HTGRID_TOKEN": theirs}) is None
    expired = TokenIssuer(served.config, clock=lambda: 1e9).create("bob", lifetime=1)
    assert find_token(DOMAIN, dirs=[], env={"HTGRID_TOKEN": expired}) is None


def test_token_authenticator_for_the_queue_app(served: Served) -> None:
    authenticate = token_authenticator(TokenVerifier(served.config).verify)
    token = served.issuer.create("root")
    scope = {"type": "http", "method": "POST", "path": "/v1/jobs", "headers": []}
    request = Request({**scope, "headers": [(b"authorization", f"Bearer {token}".encode())]})
    identity = authenticate(request)
    assert (identity.name, identity.admin) == ("root", True)
    reader = served.issuer.create("bob", authz=["READ"])
    with pytest.raises(InsufficientScope):
        authenticate(
            Request({**scope, "headers": [(b"authorization", f"Bearer {reader}".encode())]})
        )


def _websocket(app: TokenAuthMiddleware, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    sent: list[Message] = []
    inbox: list[Message] = [{"type": "websocket.connect"}]

    async def receive() -> Message:
        return inbox.pop(0) if inbox else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "path": "/ws",
        "raw_path": b"/ws",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "scheme": "wss",
        "server": ("127.0.0.1", 443),
        "client": ("127.0.0.1", 50000),
        "subprotocols": [],
    }
    asyncio.run(app(scope, receive, send))
    return sent


def test_websockets_are_closed_without_a_good_token(served: Served) -> None:
    app = _app(TokenVerifier(served.config))
    token = served.issuer.create("carol")
    accepted = _websocket(app, [(b"authorization", f"Bearer {token}".encode())])
    assert [m["type"] for m in accepted] == [
        "websocket.accept",
        "websocket.send",
        "websocket.close",
    ]
    assert accepted[1]["text"] == "carol"
    refused = _websocket(app, [])
    assert refused == [{"type": "websocket.close", "code": 1008, "reason": "MissingToken"}]


def test_a_broken_server_configuration_answers_500_without_details(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(token: str) -> Principal:
        raise SecurityError("/etc/mapfile:3: bad regular expression: missing )")

    app = TokenAuthMiddleware(_app(TokenVerifier(served.config)), broken, realm=DOMAIN)
    with caplog.at_level(logging.ERROR, logger="htgrid.net.security"):
        sent = _http(app, [(b"authorization", b"Bearer x.y.z")])
    assert sent[0]["status"] == 500
    body = json.loads(sent[1]["body"])
    assert body["detail"] == "the server cannot check tokens now"
    assert body["error"] == "SecurityError"
    assert "mapfile" not in sent[1]["body"].decode()
    assert "bad regular expression" in caplog.text  # the administrator's log says why


def _http(app: TokenAuthMiddleware, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/whoami",
        "raw_path": b"/whoami",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "scheme": "https",
        "server": ("127.0.0.1", 443),
        "client": ("127.0.0.1", 50000),
    }
    asyncio.run(app(scope, receive, send))
    return sent
