"""Tokens of external issuers, SciTokens and WLCG tokens, checked as HTCondor-CE checks them.

    verifier = IssuedTokenVerifier(IssuerKeys(settings), audiences=["ce.example.org:9619"])
    claims = await verifier.verify(token)          # IssuedClaims, or the AuthError why not

In order: the structure and `alg` (a public-key algorithm only), `iss` (an https URL),
the issuer's key `kid` names (`_issuers`), the signature (PyJWT), the claims' types
(`sub`, `exp` and `iat` required), the times with `leeway` seconds of skew forgiven
(`exp`, `nbf`, `iat`), and the audience: `aud` must name one of SCITOKENS_SERVER_AUDIENCE,
or be `ANY` (SciTokens) or `https://wlcg.cern.ch/jwt/v1/any` (WLCG).

What a token may do here (`authorizations_of`), as HTCondor reads its scopes:
`condor:/READ`, `condor:/WRITE`... name levels; WLCG's `compute.read` gives READ, and
`compute.create`, `compute.modify` and `compute.cancel` together give WRITE. A token
with none of these may do nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import jwt

from htgrid.client import ISSUER_ALGORITHMS, NotAToken, OtherAlgorithm, shown, take_apart
from htgrid.net.security._authz import parse_scope
from htgrid.net.security._errors import ForgedToken, MalformedToken, WrongAudience
from htgrid.net.security._issuers import IssuerKeys, https_url
from htgrid.net.security._tokens import check_times, claim_number, claim_text

__all__ = [
    "ANY_AUDIENCE",
    "IssuedClaims",
    "IssuedTokenVerifier",
    "authorizations_of",
    "read_issued",
]

#: Audiences that name any service: SciTokens' and the WLCG profile's.
ANY_AUDIENCE: Final = frozenset({"ANY", "https://wlcg.cern.ch/jwt/v1/any"})
_WLCG_WRITE: Final = frozenset({"compute.create", "compute.modify", "compute.cancel"})
_UNCHECKED: Final = {
    # PyJWT checks the signature; the claims are checked here, with the injected clock.
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "verify_sub": False,
    "verify_jti": False,
}


def read_issued(token: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """An issuer's token's header and claims, read but not verified (MalformedToken,
    ForgedToken for an algorithm no issuer may use)."""
    try:
        header, claims, _, _ = take_apart(token, ISSUER_ALGORITHMS)
    except OtherAlgorithm as exc:
        raise ForgedToken(str(exc)) from None
    except NotAToken as exc:
        raise MalformedToken(str(exc)) from None
    return header, claims


def _audiences(claims: Mapping[str, Any]) -> tuple[str, ...]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return (aud,)
    if isinstance(aud, list) and aud and all(isinstance(a, str) for a in aud):
        return tuple(aud)
    raise MalformedToken("the token's aud claim is missing, or not a string or list of strings")


@dataclass(frozen=True, slots=True)
class IssuedClaims:
    """What an issuer's token says, believed once it verified."""

    issuer: str
    subject: str
    token_id: str | None
    key_id: str | None
    issued_at: float | None
    expires: float | None
    not_before: float | None
    audiences: tuple[str, ...]
    scopes: tuple[str, ...]  # the scope claim's words
    groups: tuple[str, ...]  # wlcg.groups

    @classmethod
    def of(cls, header: Mapping[str, Any], claims: Mapping[str, Any]) -> IssuedClaims:
        """The claims of a verified token (MalformedToken when one has the wrong type)."""
        kid = header.get("kid")
        groups = claims.get("wlcg.groups")
        expires = claim_number(claims, "exp")
        issued_at = claim_number(claims, "iat")
        if expires is None or issued_at is None:
            raise MalformedToken("an issuer's token must have exp and iat claims")
        return cls(
            issuer=claim_text(claims, "iss", required=True) or "",
            subject=claim_text(claims, "sub", required=True) or "",
            token_id=claim_text(claims, "jti", required=False),
            key_id=kid if isinstance(kid, str) else None,
            issued_at=issued_at,
            expires=expires,
            not_before=claim_number(claims, "nbf"),
            audiences=_audiences(claims),
            scopes=tuple((claim_text(claims, "scope", required=False) or "").split()),
            groups=tuple(g for g in groups if isinstance(g, str))
            if isinstance(groups, list)
            else (),
        )

    def describe(self) -> str:
        """`token <jti> of <sub> from <iss>`: how messages name it (never by its text)."""
        return (
            f"token {shown(self.token_id or '(no jti)', 60)} of {shown(self.subject, 80)} "
            f"from {shown(self.issuer, 120)}"
        )


def authorizations_of(scopes: Iterable[str]) -> tuple[str, ...]:
    """The HTCondor levels a token's scopes grant (`condor:/...`, WLCG's compute.*)."""
    words = tuple(scopes)
    levels = list(parse_scope(" ".join(words)))
    if "compute.read" in words:
        levels.append("READ")
    if set(words) >= _WLCG_WRITE:
        levels.append("WRITE")
    return tuple(dict.fromkeys(levels))


class IssuedTokenVerifier:
    """Checks issuers' tokens: signature against the issuer's keys, times, audience."""

    def __init__(
        self,
        keys: IssuerKeys,
        audiences: Sequence[str],
        *,
        leeway: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.audiences = tuple(audiences)  # SCITOKENS_SERVER_AUDIENCE
        self.leeway = leeway
        self._clock = clock

    async def verify(self, token: str) -> IssuedClaims:
        """The claims of `token`, or the AuthError saying why it is refused."""
        header, claims = read_issued(token)
        issuer = claim_text(claims, "iss", required=True) or ""
        if not https_url(issuer):
            raise MalformedToken(f"the token's issuer {shown(issuer, 120)} is not an https URL")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise MalformedToken("the token's kid header is not a string")
        key = await self.keys.key(issuer, kid)
        try:
            jwt.decode(token, key.key, algorithms=[str(header["alg"])], options=_UNCHECKED)  # type: ignore[arg-type]
        except jwt.InvalidSignatureError:
            raise ForgedToken(
                f"the token's signature is not that of issuer {shown(issuer, 120)}'s key "
                f"{shown(kid)}"
            ) from None
        except jwt.PyJWTError as exc:
            raise ForgedToken(
                f"the token cannot be verified with issuer {shown(issuer, 120)}'s key "
                f"{shown(kid)}: {exc}"
            ) from None
        verified = IssuedClaims.of(header, claims)
        check_times(verified.describe(), verified, self._clock(), self.leeway)
        self._check_audience(verified)
        return verified

    def _check_audience(self, claims: IssuedClaims) -> None:
        if ANY_AUDIENCE.intersection(claims.audiences):
            return
        if not set(claims.audiences).intersection(self.audiences):
            wanted = ", ".join(self.audiences) or "none (SCITOKENS_SERVER_AUDIENCE is unset)"
            raise WrongAudience(
                f"{claims.describe()} is meant for "
                f"{', '.join(shown(a, 80) for a in claims.audiences[:5])}, "
                f"not this service (its audiences: {wanted})"
            )
