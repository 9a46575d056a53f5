"""Hand-made tokens (the client reads claims; only a server checks signatures)."""

from __future__ import annotations

import base64
import json
from typing import Any


def _b64(obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwt(issuer: str, subject: str = "alice", *, exp: float | None = None, **head: Any) -> str:
    claims: dict[str, Any] = {"iss": issuer, "sub": subject}
    if exp is not None:
        claims["exp"] = exp
    return ".".join([_b64({"alg": "HS256", "kid": "POOL", **head}), _b64(claims), _b64(b"sig")])
