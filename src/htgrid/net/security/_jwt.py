"""Compact JSON Web Tokens signed with HMAC-SHA256 (RFC 7515/7519), as IDTOKENS are.

    eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ . eyJpYXQiOjE3...In0 . 3q2-7w...
    {"alg":"HS256","kid":"POOL"}             {claims}             HMAC-SHA256(key, first.second)

Only HS256 exists here, so `alg` is checked against it before anything else: a token
saying `none`, or naming an algorithm the key was not made for, never reaches the MAC.
A token is taken apart as its clients read it (htgrid.client.take_apart: strict base64url
and JSON); the claims are only read here; `_tokens` decides whether to believe them, and
only after the signature verified.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from htgrid.client import (
    ALGORITHM,
    NotAToken,
    OtherAlgorithm,
    b64url,
    take_apart,
)
from htgrid.net.security._errors import ForgedToken, MalformedToken

__all__ = ["SignedToken", "encode", "parse"]


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
    try:
        header, claims, signing_input, signature = take_apart(token)
    except OtherAlgorithm as exc:
        raise ForgedToken(str(exc)) from None
    except NotAToken as exc:
        raise MalformedToken(str(exc)) from None
    return SignedToken(header, claims, signing_input, signature)
