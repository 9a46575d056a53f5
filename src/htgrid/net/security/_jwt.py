"""The pool's compact JSON Web Tokens, signed and verified by PyJWT (HS256, as IDTOKENS are).

    eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ . eyJpYXQiOjE3...In0 . 3q2-7w...
    {"alg":"HS256","kid":"POOL"}             {claims}             HMAC-SHA256(key, first.second)

Only HS256 exists in a pool, so `alg` is checked against it before anything else: a token
saying `none`, or naming an algorithm the key was not made for, never reaches the MAC.
A token is first taken apart as its clients read it (htgrid.client.take_apart: strict
base64url and JSON, where lenient parsers differ), then its signature is PyJWT's to
check; the claims are only read here: `_tokens` decides whether to believe them, and
only after the signature verified.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import jwt

from htgrid.client import (
    ALGORITHM,
    NotAToken,
    OtherAlgorithm,
    take_apart,
)
from htgrid.net.security._errors import ForgedToken, MalformedToken

__all__ = ["SignedToken", "encode", "parse"]

# HS256 alone; a key shorter than the hash is refused rather than warned about.
_JWS: Final = jwt.PyJWS(algorithms=[ALGORITHM], options={"enforce_minimum_key_length": True})


def _compact(obj: Mapping[str, Any]) -> bytes:
    # Sorted and without spaces: the form HTCondor's JWT library writes.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode(header: Mapping[str, Any], claims: Mapping[str, Any], key: bytes) -> str:
    """A signed compact JWT; `header` gets `alg` HS256 (and no `typ`, as HTCondor's)."""
    headers = {**header, "alg": ALGORITHM, "typ": None}
    return _JWS.encode(_compact(claims), key, algorithm=ALGORITHM, headers=headers)


@dataclass(frozen=True, slots=True)
class SignedToken:
    """A token taken apart but not yet believed: `verify` it before using the claims."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    token: str = field(repr=False)

    @property
    def key_id(self) -> str:
        """The `kid` header: the name of the signing key."""
        kid = self.header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise MalformedToken("the token does not name its signing key (no kid header)")
        return kid

    def verify(self, key: bytes) -> None:
        """Raise ForgedToken unless the signature is this key's (PyJWT compares in
        constant time)."""
        try:
            _JWS.decode(self.token, key, algorithms=[ALGORITHM])
        except jwt.InvalidSignatureError:
            raise ForgedToken("the token's signature does not match its signing key") from None
        except jwt.PyJWTError as exc:
            raise MalformedToken(f"the token cannot be verified: {exc}") from None


def parse(token: str) -> SignedToken:
    """Take a compact JWT apart, refusing any `alg` but HS256 (MalformedToken, ForgedToken)."""
    try:
        header, claims, _, _ = take_apart(token)
    except OtherAlgorithm as exc:
        raise ForgedToken(str(exc)) from None
    except NotAToken as exc:
        raise MalformedToken(str(exc)) from None
    return SignedToken(header, claims, token)
