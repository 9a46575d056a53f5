"""IDTOKENS: making the pool's tokens, and checking the ones callers present.

    issuer = TokenIssuer(config)
    token = issuer.create("alice@example.org", authz=["READ", "WRITE"], lifetime=3600)
    principal = TokenVerifier(config).verify(token)      # or an AuthError saying why not
    principal.user, principal.is_admin, principal.require("WRITE")

The claims are HTCondor's (condor_token_create's): `sub`, `iss` (the trust domain),
`iat`, `jti` (16 random bytes in hex), `scope` when authorizations are given and `exp`
when a lifetime is; the header names the key (`kid`). Verification, in order: the
structure and `alg` (HS256 only), the key `kid` names, the signature, the claims' types,
`iss`, the times (with `leeway` for clock skew), the revocation list and expression,
then the map file.
"""

from __future__ import annotations

import fcntl
import math
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.net.security._authz import (
    Principal,
    effective_authorizations,
    format_scope,
    normalize_authz,
    parse_scope,
)
from htgrid.net.security._config import SecurityConfig, Watched, shown
from htgrid.net.security._errors import (
    ExpiredToken,
    MalformedToken,
    RevokedToken,
    SecurityError,
    TokenNotYetValid,
    UntrustedIssuer,
)
from htgrid.net.security._jwt import SignedToken, encode, parse
from htgrid.net.security._keys import POOL_KEY, SigningKeys
from htgrid.net.security._mapfile import WatchedMap, local_user

__all__ = [
    "Clock",
    "RevocationList",
    "TokenClaims",
    "TokenIssuer",
    "TokenVerifier",
    "check_times",
    "claim_number",
    "claim_text",
]

Clock = Callable[[], float]
_JTI: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def _when(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return f"{seconds:.0f} (seconds since 1970)"


def claim_number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedToken(f"the token's {name} claim is not a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise MalformedToken(f"the token's {name} claim is not a finite number")
    return number


def claim_text(claims: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    value = claims.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise MalformedToken(f"the token's {name} claim is missing or not a string")
    return value


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a token says of itself (believed only once its signature verified)."""

    key_id: str
    subject: str
    issuer: str
    token_id: str | None
    issued_at: float | None
    expires: float | None
    not_before: float | None
    scopes: tuple[str, ...] | None  # None: no scope claim, so no restriction

    @classmethod
    def of(cls, token: SignedToken) -> TokenClaims:
        """The claims of a parsed token (MalformedToken when one has the wrong type)."""
        claims = token.claims
        scope = claim_text(claims, "scope", required=False)
        return cls(
            key_id=token.key_id,
            subject=claim_text(claims, "sub", required=True) or "",
            issuer=claim_text(claims, "iss", required=True) or "",
            token_id=claim_text(claims, "jti", required=False),
            issued_at=claim_number(claims, "iat"),
            expires=claim_number(claims, "exp"),
            not_before=claim_number(claims, "nbf"),
            scopes=None if scope is None else parse_scope(scope),
        )

    def describe(self) -> str:
        """`token <jti> of <sub>`: how errors and logs name it (never by its text)."""
        return f"token {self.token_id or '(no jti)'} of {self.subject}"


def _read_revoked(path: Path) -> frozenset[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityError(f"{path}: cannot read the revocation list: {exc}") from None
    ids = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return frozenset(i for i in ids if i)


class RevocationList:
    """Revoked token ids in a text file, one a line (`# ...` comments allowed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._watched = Watched(path, _read_revoked, frozenset[str]())

    def __contains__(self, token_id: object) -> bool:
        return token_id in self._watched.get()

    def ids(self) -> frozenset[str]:
        """Every revoked id."""
        return self._watched.get()

    def add(self, token_id: str, note: str = "") -> bool:
        """Revoke `token_id`; False when it already was."""
        if not _JTI.fullmatch(token_id):
            raise SecurityError(f"{token_id!r} is not a token id (jti)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        comment = " ".join(note.split())
        with open(self.path, "a+", encoding="utf-8") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # two revokers must not interleave lines
            out.seek(0)
            if token_id in {line.split("#", 1)[0].strip() for line in out}:
                return False
            out.write(f"{token_id}  # {comment}\n" if comment else f"{token_id}\n")
        return True


class Times(Protocol):
    """A token's times, as its claims say (None: the claim is absent)."""

    @property
    def expires(self) -> float | None: ...
    @property
    def not_before(self) -> float | None: ...
    @property
    def issued_at(self) -> float | None: ...


def check_times(what: str, claims: Times, now: float, leeway: float) -> None:
    """ExpiredToken past `exp`, TokenNotYetValid before `nbf` or `iat`, `leeway` seconds
    of clock skew forgiven either way; `what` names the token in the message."""
    if claims.expires is not None and now > claims.expires + leeway:
        raise ExpiredToken(
            f"{what} expired at {_when(claims.expires)} ({int(now - claims.expires)} s ago)"
        )
    for name, at in (("valid from", claims.not_before), ("issued at", claims.issued_at)):
        if at is not None and now + leeway < at:
            raise TokenNotYetValid(
                f"{what} is {name} {_when(at)}, {int(at - now)} s from now "
                "(is one of the clocks wrong?)"
            )


class TokenIssuer:
    """Signs tokens with the pool's keys (condor_token_create's work)."""

    def __init__(
        self, config: SecurityConfig, *, clock: Clock = time.time, keys: SigningKeys | None = None
    ) -> None:
        self.config = config
        self.keys = keys if keys is not None else SigningKeys(config.password_dir)
        self._clock = clock

    def create(
        self,
        identity: str,
        *,
        authz: Sequence[str] = (),
        lifetime: float | None = None,
        key: str = POOL_KEY,
    ) -> str:
        """A token for `identity` (user@domain or user), limited to `authz` if given,
        valid `lifetime` seconds if given; the POOL key is created on first use."""
        if not identity or any(c.isspace() for c in identity):
            raise ValueError(f"the identity {identity!r} must be a non-empty word")
        if lifetime is not None and lifetime < 0:
            raise ValueError("the lifetime must not be negative")
        names = [normalize_authz(a) for a in authz]
        if key == POOL_KEY:
            self.keys.ensure(POOL_KEY)
        secret = self.keys.jwt_key(key)
        now = int(self._clock())
        claims: dict[str, Any] = {
            "sub": identity,
            "iss": self.config.trust_domain,
            "iat": now,
            "jti": secrets.token_hex(16),
        }
        if names:
            claims["scope"] = format_scope(dict.fromkeys(names))
        if lifetime is not None:
            claims["exp"] = now + int(lifetime)
        return encode({"kid": key}, claims, secret)


class TokenVerifier:
    """Checks bearer tokens against the pool's keys, trust domain and revocations."""

    def __init__(
        self,
        config: SecurityConfig,
        *,
        clock: Clock = time.time,
        keys: SigningKeys | None = None,
        mapfile: Path | None = None,
    ) -> None:
        """`mapfile` is CERTIFICATE_MAPFILE (the pool's etc/mapfile by default)."""
        self.config = config
        self.keys = keys if keys is not None else SigningKeys(config.password_dir)
        self.revoked = RevocationList(config.revocation_file)
        self._mapfile = WatchedMap(mapfile if mapfile is not None else config.mapfile)
        self._revocation_expr = ExprTree(config.revocation_expr) if config.revocation_expr else None
        self._clock = clock

    def verify(self, token: str) -> Principal:
        """The principal `token` stands for, or the AuthError saying why it is refused.

        Reads files only when they changed (a stat each), so it may run on the loop.
        """
        signed = parse(token)
        signed.verify(self.keys.jwt_key(signed.key_id))
        claims = TokenClaims.of(signed)
        if claims.issuer != self.config.trust_domain:
            raise UntrustedIssuer(
                f"{claims.describe()} was issued by {shown(claims.issuer, 80)}, "
                f"not this pool ({self.config.trust_domain!r})"
            )
        if claims.token_id is None:
            raise MalformedToken(f"{claims.describe()} has no jti, so it could not be revoked")
        self._check_times(claims)
        if claims.token_id in self.revoked or self._revoked_by_expr(signed.claims):
            raise RevokedToken(f"{claims.describe()} has been revoked")
        canonical = self._mapfile.get().token_name(claims.issuer, claims.subject)
        user = local_user(canonical)
        if user is None:
            raise MalformedToken(f"the token's subject {claims.subject!r} names no local user")
        return Principal(
            user=user,
            subject=claims.subject,
            issuer=claims.issuer,
            scopes=claims.scopes,
            authorizations=effective_authorizations(claims.scopes, user, self.config.admin_users),
            token_id=claims.token_id,
            key_id=claims.key_id,
            expires=claims.expires,
            canonical=canonical,
        )

    def _check_times(self, claims: TokenClaims) -> None:
        check_times(claims.describe(), claims, self._clock(), self.config.leeway)

    def _revoked_by_expr(self, claims: Mapping[str, Any]) -> bool:
        if self._revocation_expr is None:
            return False
        # As HTCondor: anything but a clear `false` (an error, undefined, an ad that
        # cannot be built) revokes.
        try:
            ad = ClassAd({k: v for k, v in claims.items() if isinstance(v, str | int | float)})
            return self._revocation_expr.eval(ad) is not False
        except (HTGridError, OverflowError, ValueError):
            return True
