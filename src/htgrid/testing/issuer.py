"""A token issuer on 127.0.0.1 for tests: OIDC discovery and a JWK set over HTTPS, with a
certificate of its own test CA, and SciTokens / WLCG tokens minted with its keys (what
a VO's token service is to an HTCondor-CE).

    with TestIssuer(tmp_path / "issuer") as issuer:
        token = issuer.mint("pilot", aud="ce.test:9619")
        issuer.ca                  # the CA file a daemon trusts it with
        issuer.rotate()            # a new key; the old one no longer published
        issuer.mode = "bad-keys"   # ...or "wrong-issuer", "hang", "down"

`requests` lists the paths asked for, so a test sees when keys were (not) fetched.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from htgrid.net.security import PoolCA, server_ssl_context

__all__ = ["WLCG_COMPUTE", "TestIssuer", "issuers", "new_key", "public_jwk"]

WLCG_COMPUTE = "compute.create compute.read compute.modify compute.cancel"
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def new_key(alg: str) -> PrivateKey:
    if alg.startswith("ES"):
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key: PrivateKey, kid: str, alg: str) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class TestIssuer:
    """An OIDC issuer of signed JWTs on 127.0.0.1, over HTTPS (its own test CA)."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, directory: Path, *, alg: str = "RS256") -> None:
        self.alg = alg
        ca = PoolCA(directory / "ca")
        self.ca = ca.ensure().cert  # what a daemon trusts the issuer's HTTPS with
        self._context = server_ssl_context(ca.issue("issuer", hosts=["127.0.0.1"]))
        self.mode = "ok"
        self.requests: list[str] = []
        self.keys: dict[str, PrivateKey] = {}
        self.kid = self.rotate()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = self._context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._release = threading.Event()  # lets a hanging answer go

    def __enter__(self) -> TestIssuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def rotate(self) -> str:
        """A new signing key, published alone from now on; its kid."""
        kid = f"key-{uuid.uuid4().hex[:8]}"
        self.keys = {kid: new_key(self.alg)}
        self.kid = kid
        return kid

    def jwks(self) -> dict[str, Any]:
        return {"keys": [public_jwk(k, kid, self.alg) for kid, k in self.keys.items()]}

    def mint(
        self,
        subject: str,
        *,
        aud: str | list[str],
        scope: str = WLCG_COMPUTE,
        lifetime: float = 600,
        now: float | None = None,
        key: PrivateKey | None = None,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        """A WLCG token of this issuer (signed with its current key unless told)."""
        at = int(time.time() if now is None else now)
        body = {
            "iss": self.url,
            "sub": subject,
            "aud": aud,
            "scope": scope,
            "iat": at,
            "nbf": at,
            "exp": at + int(lifetime),
            "jti": str(uuid.uuid4()),
            "wlcg.ver": "1.0",
            **claims,
        }
        signing = key if key is not None else self.keys[self.kid]
        headers = {"kid": kid or self.kid, "typ": "JWT"}
        return jwt.encode(body, signing, algorithm=self.alg, headers=headers)

    def _answer(self, path: str) -> tuple[int, bytes] | None:
        if self.mode == "hang":
            self._release.wait(30)
            return None
        if path == "/.well-known/openid-configuration":
            iss = self.url if self.mode != "wrong-issuer" else "https://elsewhere.test"
            return 200, json.dumps({"issuer": iss, "jwks_uri": f"{self.url}/jwks"}).encode()
        if path == "/jwks":
            if self.mode == "bad-keys":
                return 200, b'{"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB", "kid": "x"}]}'
            return 200, json.dumps(self.jwks()).encode()
        return 404, b"{}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.requests.append(self.path)
                if issuer.mode == "down":
                    self.connection.close()  # as a dead server: no answer at all
                    return
                answer = issuer._answer(self.path)
                if answer is None:
                    return
                status, body = answer
                with suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def issuers(directory: Path, alg: str = "RS256") -> Iterator[TestIssuer]:
    """A running TestIssuer, stopped after (for a fixture)."""
    with TestIssuer(directory, alg=alg) as issuer:
        yield issuer
