"""Security for htgrid's network APIs: IDTOKENS-style tokens and a pool CA for TLS.

- Tokens (`_tokens`, `_keys`, `_jwt`): JWTs signed HS256 with the pool's signing key in
  `$HTGRID_HOME/etc/passwords.d`, HTCondor's claims and key derivation, checked by
  `TokenVerifier` (signature, issuer, times, revocations) into a `Principal`.
- Who and what (`_authz`): HTCondor's authorization names, a map file from subjects to
  local users, `Principal.require`.
- Token files (`_tokenfiles`): where `htgrid token create` saves one. Reading them, the
  client's search for the token of a server's pool and `BearerAuth` are the client
  side's, shared with the GAHP servers: htgrid.client.
- TLS (`_ca`, `_rotate`): the pool CA, daemons' certificates and their rotation, SSL
  contexts.
- HTTP (`_asgi`): the server's middleware and `require`.
- The gatekeeper (`_gatekeeper`, `_scitokens`, `_issuers`, `_mapfile`, `_audit`): issuers'
  tokens (SciTokens, WLCG) verified against their keys fetched over HTTPS, the unified
  map file, DENY_* bans and the audit log, as HTCondor-CE takes remote submitters.
- A pool's material (`_material`): what `htgrid up` makes: key, CA, the daemons'
  server certificate and their token (`ensure_pool_security`).

See `_errors` for the error tree; every refusal is an `AuthError` with its HTTP status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.net.security._errors import (
    AuthError,
    CertificateError,
    DeniedIdentity,
    ExpiredToken,
    ForgedToken,
    InsufficientScope,
    IssuerUnavailable,
    MalformedToken,
    MissingToken,
    RevokedToken,
    SecurityError,
    TokenNotYetValid,
    UnknownKey,
    UnmappedIdentity,
    UntrustedIssuer,
    WrongAudience,
)

if TYPE_CHECKING:
    from htgrid.net.security._asgi import (
        PRINCIPAL_KEY,
        TokenAuthMiddleware,
        auth_error_handler,
        authz_by_method,
        bearer_token,
        principal_of,
        problem_response,
        require,
        token_authenticator,
        token_identity,
    )
    from htgrid.net.security._audit import AuditEvent, AuditGrant, AuditLog
    from htgrid.net.security._authz import (
        AUTHORIZATIONS,
        MapFile,
        Principal,
        format_scope,
        normalize_authz,
        parse_scope,
    )
    from htgrid.net.security._ca import (
        CertFiles,
        PoolCA,
        client_ssl_context,
        pinned_ssl_context,
        self_signed_cert,
        server_ssl_context,
    )
    from htgrid.net.security._config import (
        SecurityConfig,
        user_token_dir,
    )
    from htgrid.net.security._gatekeeper import (
        DenyList,
        Gatekeeper,
        GatekeeperConfig,
    )
    from htgrid.net.security._issuers import IssuerKeys, IssuerSettings
    from htgrid.net.security._keys import (
        POOL_KEY,
        SigningKeys,
    )
    from htgrid.net.security._material import (
        DAEMON_IDENTITY,
        DAEMON_TOKEN,
        SERVER_CERT,
        PoolSecurity,
        daemon_token,
        daemon_token_path,
        ensure_pool_security,
    )
    from htgrid.net.security._rotate import CertRotator, RotatingServer
    from htgrid.net.security._scitokens import IssuedClaims, IssuedTokenVerifier
    from htgrid.net.security._tokenfiles import (
        save_token,
        token_path,
    )
    from htgrid.net.security._tokens import (
        RevocationList,
        TokenClaims,
        TokenIssuer,
        TokenVerifier,
    )

#: Where each other name lives, loaded when first asked for: a command that imports the
#: client (and with it the errors above) does not load the server's middleware
#: (starlette), the CA's (cryptography) and the rest, ~200 ms of its start.
_LAZY: Final = {
    "PRINCIPAL_KEY": "_asgi",
    "TokenAuthMiddleware": "_asgi",
    "auth_error_handler": "_asgi",
    "authz_by_method": "_asgi",
    "bearer_token": "_asgi",
    "principal_of": "_asgi",
    "problem_response": "_asgi",
    "require": "_asgi",
    "token_authenticator": "_asgi",
    "token_identity": "_asgi",
    "AuditEvent": "_audit",
    "AuditGrant": "_audit",
    "AuditLog": "_audit",
    "AUTHORIZATIONS": "_authz",
    "MapFile": "_authz",
    "Principal": "_authz",
    "format_scope": "_authz",
    "normalize_authz": "_authz",
    "parse_scope": "_authz",
    "CertFiles": "_ca",
    "PoolCA": "_ca",
    "client_ssl_context": "_ca",
    "pinned_ssl_context": "_ca",
    "self_signed_cert": "_ca",
    "server_ssl_context": "_ca",
    "SecurityConfig": "_config",
    "user_token_dir": "_config",
    "DenyList": "_gatekeeper",
    "Gatekeeper": "_gatekeeper",
    "GatekeeperConfig": "_gatekeeper",
    "IssuerKeys": "_issuers",
    "IssuerSettings": "_issuers",
    "IssuedClaims": "_scitokens",
    "IssuedTokenVerifier": "_scitokens",
    "POOL_KEY": "_keys",
    "SigningKeys": "_keys",
    "DAEMON_IDENTITY": "_material",
    "DAEMON_TOKEN": "_material",
    "SERVER_CERT": "_material",
    "PoolSecurity": "_material",
    "daemon_token": "_material",
    "daemon_token_path": "_material",
    "ensure_pool_security": "_material",
    "CertRotator": "_rotate",
    "RotatingServer": "_rotate",
    "save_token": "_tokenfiles",
    "token_path": "_tokenfiles",
    "RevocationList": "_tokens",
    "TokenClaims": "_tokens",
    "TokenIssuer": "_tokens",
    "TokenVerifier": "_tokens",
}


__getattr__ = on_demand(__name__, _LAZY)


__all__ = [
    "AUTHORIZATIONS",
    "DAEMON_IDENTITY",
    "DAEMON_TOKEN",
    "POOL_KEY",
    "PRINCIPAL_KEY",
    "SERVER_CERT",
    "AuditEvent",
    "AuditGrant",
    "AuditLog",
    "AuthError",
    "CertFiles",
    "CertRotator",
    "CertificateError",
    "DeniedIdentity",
    "DenyList",
    "ExpiredToken",
    "ForgedToken",
    "Gatekeeper",
    "GatekeeperConfig",
    "InsufficientScope",
    "IssuedClaims",
    "IssuedTokenVerifier",
    "IssuerKeys",
    "IssuerSettings",
    "IssuerUnavailable",
    "MalformedToken",
    "MapFile",
    "MissingToken",
    "PoolCA",
    "PoolSecurity",
    "Principal",
    "RevocationList",
    "RevokedToken",
    "RotatingServer",
    "SecurityConfig",
    "SecurityError",
    "SigningKeys",
    "TokenAuthMiddleware",
    "TokenClaims",
    "TokenIssuer",
    "TokenNotYetValid",
    "TokenVerifier",
    "UnknownKey",
    "UnmappedIdentity",
    "UntrustedIssuer",
    "WrongAudience",
    "auth_error_handler",
    "authz_by_method",
    "bearer_token",
    "client_ssl_context",
    "daemon_token",
    "daemon_token_path",
    "ensure_pool_security",
    "format_scope",
    "normalize_authz",
    "parse_scope",
    "pinned_ssl_context",
    "principal_of",
    "problem_response",
    "require",
    "save_token",
    "self_signed_cert",
    "server_ssl_context",
    "token_authenticator",
    "token_identity",
    "token_path",
    "user_token_dir",
]
