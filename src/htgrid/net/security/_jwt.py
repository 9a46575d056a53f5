"""Compact JSON Web Tokens signed with HMAC-SHA256 (RFC 7515/7519), as IDTOKENS are.

    eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ . eyJpYXQiOjE3...In0 . 3q2-7w...
    {"alg":"HS256","kid":"POOL"}             {claims}             HMAC-SHA256(key, first.second)

Only HS256 exists here, so `alg` is checked against it before anything else: a token
saying `none`, or naming an algorithm the key was not made for, never reaches the MAC.
Decoding is strict where lenient parsers differ: base64url without padding and in its
one canonical form (so a signature cannot be altered in its spare bits), JSON objects
without duplicate names or NaN. The claims are only read here; `_tokens` decides whether
to believe them, and only after the signature verified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from htgrid.net.security._config import shown
from htgrid.net.security._errors import ForgedToken, MalformedToken

__all__ = ["ALGORITHM", "MAX_TOKEN_LENGTH", "SignedToken", "b64url", "encode", "parse"]

ALGORITHM: Final = "HS256"
# Real tokens are a few hundred bytes; a cap keeps a hostile header from costing much.
MAX_TOKEN_LENGTH: Final = 8192


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515, section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str, part: str) -> bytes:
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise MalformedToken(f"the token's {part} is not base64url") from None
    if b64url(raw) != text:  # padding, or spare bits set: not the canonical encoding
        raise MalformedToken(f"the token's {part} is not canonical base64url")
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
        raise MalformedToken(f"the token's {part} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedToken(f"the token's {part} is not a JSON object")
    return value


def _compact(obj: Mapping[str, Any]) -> bytes:
    # Sorted and without spaces: the form HTCondor's JWT library writes.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _mac(key: bytes, signing_input: bytes) -> bytes:
    return hmac.new(key, signing_input, hashlib.sha256).digest()


def encode(header: Mapping[str, Any], claims: Mapping[str, Any], key: bytes) -> str:
    """A signed compact JWT; `header` gets `alg` HS256."""
    head = b64url(_compact({**header, "alg": ALGORITHM}))
    body = b64url(_compact(claims))
    signing_input = f"{head}.{body}".encode("ascii")
    return f"{head}.{body}.{b64url(_mac(key, signing_input))}"


@dataclass(frozen=True, slots=True)
class SignedToken:
    """A token taken apart but not yet believed: `verify` it before using the claims."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes
    signature: bytes

    @property
    def key_id(self) -> str:
        """The `kid` header: the name of the signing key."""
        kid = self.header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise MalformedToken("the token does not name its signing key (no kid header)")
        return kid

    def verify(self, key: bytes) -> None:
        """Raise ForgedToken unless the signature is this key's (compared in constant time)."""
        if not hmac.compare_digest(_mac(key, self.signing_input), self.signature):
            raise ForgedToken("the token's signature does not match its signing key")


def parse(token: str) -> SignedToken:
    """Take a compact JWT apart, refusing any `alg` but HS256 (MalformedToken, ForgedToken)."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise MalformedToken(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
    if not token.isascii():
        raise MalformedToken("the token is not ASCII")
    parts = token.split(".")
    if len(parts) != 3:
        raise MalformedToken(f"a token has three dot-separated parts, this one has {len(parts)}")
    head, body, sig = parts
    header = _json_object(_unb64url(head, "header"), "header")
    alg = header.get("alg")
    if alg != ALGORITHM:
        # alg=none and RS256/ES256 confusion attacks end here, before any key is used.
        raise ForgedToken(
            f"the token's algorithm is {shown(alg)}; this pool signs with {ALGORITHM}"
        )
    if "crit" in header:
        raise MalformedToken("the token has critical header extensions this pool does not know")
    claims = _json_object(_unb64url(body, "payload"), "payload")
    signature = _unb64url(sig, "signature")
    return SignedToken(header, claims, f"{head}.{body}".encode("ascii"), signature)
