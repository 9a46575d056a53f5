"""Compact JSON Web Tokens taken apart, not verified: what a client reads of its tokens.

    eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ . eyJpYXQiOjE3...In0 . 3q2-7w...
    {"alg":"HS256","kid":"POOL"}             {claims}             HMAC-SHA256(key, first.second)

A client picks a token by its claims (`iss`, `exp`) and a server verifies it
(htgrid.net.security), both from the same reading: only HS256 exists in a pool, and
an issuer's tokens (SciTokens, WLCG tokens) are signed with a public-key algorithm
(ISSUER_ALGORITHMS), so `alg` is checked first; decoding is strict where lenient parsers differ (base64url
without padding and in its one canonical form, JSON objects without duplicate names or
NaN). Nothing here is to be believed before the server checked the signature.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from htgrid.errors import HTGridError

__all__ = [
    "ALGORITHM",
    "ISSUER_ALGORITHMS",
    "MAX_TOKEN_LENGTH",
    "TOKEN_ALGORITHMS",
    "NotAToken",
    "OtherAlgorithm",
    "b64url",
    "shown",
    "take_apart",
]

ALGORITHM: Final = "HS256"
#: What an issuer of SciTokens or WLCG tokens signs with (RFC 7518, RFC 8037): public keys
#: only, so that no issuer's published key can be taken for an HMAC secret.
ISSUER_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
#: What a token a client holds may be signed with: the pool's, or an issuer's.
TOKEN_ALGORITHMS: Final = ISSUER_ALGORITHMS | {ALGORITHM}
# Real tokens are a few hundred bytes; a cap keeps a hostile header from costing much.
MAX_TOKEN_LENGTH: Final = 8192

Parts = tuple[dict[str, Any], dict[str, Any], bytes, bytes]


class NotAToken(HTGridError, ValueError):
    """The text is not a compact JWT of this pool's kind."""


class OtherAlgorithm(NotAToken):
    """A JWT that names another algorithm than HS256 (`none` included)."""


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)`, cut short: how messages quote what a caller sent (it may be anything)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515, section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str, part: str) -> bytes:
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise NotAToken(f"the token's {part} is not base64url") from None
    if b64url(raw) != text:  # padding, or spare bits set: not the canonical encoding
        raise NotAToken(f"the token's {part} is not canonical base64url")
    return raw


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate member {shown(key)}")
        obj[key] = value
    return obj


def _json_object(raw: bytes, part: str) -> dict[str, Any]:
    try:
        value = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_unique_object,
            parse_constant=_reject_constant,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotAToken(f"the token's {part} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise NotAToken(f"the token's {part} is not a JSON object")
    return value


def take_apart(token: str, algorithms: frozenset[str] = frozenset({ALGORITHM})) -> Parts:
    """A compact JWT's header, claims, signing input and signature, read but not verified:
    NotAToken when it is not one, OtherAlgorithm when its `alg` is not one of
    `algorithms` (the pool's HS256 unless told)."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise NotAToken(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
    if not token.isascii():
        raise NotAToken("the token is not ASCII")
    parts = token.split(".")
    if len(parts) != 3:
        raise NotAToken(f"a token has three dot-separated parts, this one has {len(parts)}")
    head, body, sig = parts
    header = _json_object(_unb64url(head, "header"), "header")
    alg = header.get("alg")
    if alg not in algorithms:
        # alg=none and RS256/ES256 confusion attacks end here, before any key is used.
        also = ", an issuer's tokens with " + ", ".join(sorted(ISSUER_ALGORITHMS))
        raise OtherAlgorithm(
            f"the token's algorithm is {shown(alg)}; this pool signs with {ALGORITHM}"
            + (also if algorithms != {ALGORITHM} else "")
        )
    if "crit" in header:
        raise NotAToken("the token has critical header extensions this pool does not know")
    claims = _json_object(_unb64url(body, "payload"), "payload")
    return header, claims, f"{head}.{body}".encode("ascii"), _unb64url(sig, "signature")
