"""A minimal OIDC issuer for the ARC CE's token auth: discovery and JWKS over HTTPS on
127.0.0.1 (the test host certificate of .ci/grid-pki.sh), and RS256 tokens it signs.

A-REX fetches `<issuer>/.well-known/openid-configuration` and the JWKS it names, then
checks a bearer token's signature with them (arc.conf's `authtokens`).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

__all__ = ["Issuer"]

_KID = "htgrid-test-key"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class Issuer:
    """An issuer at https://localhost:<port>, serving until `close`."""

    def __init__(self, port: int, cert: str, key: str) -> None:
        self.url = f"https://localhost:{port}"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self._key.public_key().public_numbers()
        jwks = {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": _KID,
                    "n": _int(numbers.n),
                    "e": _int(numbers.e),
                }
            ]
        }
        discovery = {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"],
        }
        documents = {"/.well-known/openid-configuration": discovery, "/jwks": jwks}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # A-REX sends the absolute URL in the request line.
                body = documents.get(urlparse(self.path).path)
                if body is None:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def token(self, audience: str, *, subject: str = "htgrid-test", life: int = 3600) -> str:
        """An RS256 JWT of this issuer, with WLCG's compute scopes."""
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": _KID}
        claims = {
            "iss": self.url,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": now + life,
            "jti": str(uuid.uuid4()),
            "wlcg.ver": "1.0",
            "scope": "compute.create compute.read compute.modify compute.cancel",
        }
        signing = ".".join(_b64(json.dumps(p).encode()) for p in (header, claims))
        signature = self._key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
