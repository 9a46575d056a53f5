"""The errors of the security layer.

HTGridError
└── SecurityError                 (keys, certificates and tokens on this host)
    ├── CertificateError          (the pool CA or a certificate cannot be made or read)
    └── AuthError                 (a caller is refused: 401, or 403 for InsufficientScope)
        ├── MissingToken          (no bearer token came with the request)
        ├── MalformedToken        (not a JWT, or claims of the wrong type)
        ├── ForgedToken           (bad signature, alg=none or an algorithm not the key's)
        ├── UnknownKey            (the `kid` names no signing key of this pool)
        ├── UntrustedIssuer       (`iss` is another pool's)
        ├── UnmappedIdentity      (no line of the map file maps an issuer's token's iss,sub)
        ├── IssuerUnavailable     (the issuer's keys cannot be fetched, or are no keys)
        ├── WrongAudience         (`aud` names another service)
        ├── ExpiredToken          (past `exp`)
        ├── TokenNotYetValid      (`nbf` or `iat` in the future)
        ├── RevokedToken          (its `jti` is on the revocation list)
        ├── InsufficientScope     (valid, but not for this: 403)
        └── DeniedIdentity        (mapped to a name DENY_<level> bans: 403)

Messages name the token by its `jti` and subject, never by its text, so a refusal can
be logged and sent back as it is.
"""

from __future__ import annotations

from typing import ClassVar

from htgrid.errors import HTGridError

__all__ = [
    "AuthError",
    "CertificateError",
    "DeniedIdentity",
    "ExpiredToken",
    "ForgedToken",
    "InsufficientScope",
    "IssuerUnavailable",
    "MalformedToken",
    "MissingToken",
    "RevokedToken",
    "SecurityError",
    "TokenNotYetValid",
    "UnknownKey",
    "UnmappedIdentity",
    "UntrustedIssuer",
    "WrongAudience",
]


class SecurityError(HTGridError):
    """A security credential could not be made, read or accepted."""


class CertificateError(SecurityError):
    """The pool CA or a certificate could not be made or read."""


class AuthError(SecurityError):
    """The caller is not authenticated."""

    status: ClassVar[int] = 401
    # RFC 6750's error code for the WWW-Authenticate header.
    bearer_error: ClassVar[str] = "invalid_token"


class MissingToken(AuthError):
    """The request carries no bearer token."""

    bearer_error: ClassVar[str] = ""  # RFC 6750 3.1: a bare challenge


class MalformedToken(AuthError):
    """The bearer token is not a well-formed htgrid token."""


class ForgedToken(AuthError):
    """The token's signature does not verify."""


class UnknownKey(AuthError):
    """The token names a signing key this pool does not have."""


class UntrustedIssuer(AuthError):
    """The token was issued by another pool."""


class ExpiredToken(AuthError):
    """The token has expired."""


class TokenNotYetValid(AuthError):
    """The token is not valid yet."""


class RevokedToken(AuthError):
    """The token has been revoked."""


class InsufficientScope(AuthError):
    """The token does not grant this authorization."""

    status: ClassVar[int] = 403
    bearer_error: ClassVar[str] = "insufficient_scope"


class UnmappedIdentity(AuthError):
    """No line of the map file maps the token's issuer and subject to a local user."""


class IssuerUnavailable(AuthError):
    """The token's issuer's keys cannot be had (it is down, or serves no usable keys)."""


class WrongAudience(AuthError):
    """The token is meant for another service (its `aud`)."""


class DeniedIdentity(AuthError):
    """The caller's mapped name is banned from this authorization (DENY_<level>)."""

    status: ClassVar[int] = 403
    bearer_error: ClassVar[str] = "insufficient_scope"
