"""Security for htgrid's network APIs: IDTOKENS-style tokens and a pool CA for TLS.

- Tokens (`_tokens`, `_keys`, `_jwt`): JWTs signed HS256 with the pool's signing key in
  `$HTGRID_HOME/etc/passwords.d`, HTCondor's claims and key derivation, checked by
  `TokenVerifier` (signature, issuer, times, revocations) into a `Principal`.
- Who and what (`_authz`): HTCondor's authorization names, a map file from subjects to
  local users, `Principal.require`.
- Token files (`_tokenfiles`): the client's search for the token of a server's pool.
- TLS (`_ca`): the pool CA, daemons' certificates and their rotation, SSL contexts.
- HTTP (`_asgi`, `_httpx`): the server's middleware and `require`, the client's
  `BearerAuth`.
- A pool's material (`_material`): what `htgrid up` makes: key, CA, the daemons'
  server certificate and their token (`ensure_pool_security`).

See `_errors` for the error tree; every refusal is an `AuthError` with its HTTP status.
"""

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
    server_ssl_context,
    trusted_ca_files,
)
from htgrid.net.security._config import SecurityConfig, user_token_dir
from htgrid.net.security._errors import (
    AuthError,
    CertificateError,
    ExpiredToken,
    ForgedToken,
    InsufficientScope,
    MalformedToken,
    MissingToken,
    RevokedToken,
    SecurityError,
    TokenNotYetValid,
    UnknownKey,
    UntrustedIssuer,
)
from htgrid.net.security._httpx import BearerAuth
from htgrid.net.security._keys import POOL_KEY, SigningKeys
from htgrid.net.security._material import (
    DAEMON_IDENTITY,
    DAEMON_TOKEN,
    SERVER_CERT,
    PoolSecurity,
    daemon_token,
    daemon_token_path,
    ensure_pool_security,
)
from htgrid.net.security._tokenfiles import (
    StoredToken,
    TokenFileProblem,
    find_token,
    read_token_file,
    save_token,
    scan_tokens,
    token_path,
)
from htgrid.net.security._tokens import (
    RevocationList,
    TokenClaims,
    TokenIssuer,
    TokenVerifier,
)

__all__ = [
    "AUTHORIZATIONS",
    "DAEMON_IDENTITY",
    "DAEMON_TOKEN",
    "POOL_KEY",
    "PRINCIPAL_KEY",
    "SERVER_CERT",
    "AuthError",
    "BearerAuth",
    "CertFiles",
    "CertificateError",
    "ExpiredToken",
    "ForgedToken",
    "InsufficientScope",
    "MalformedToken",
    "MapFile",
    "MissingToken",
    "PoolCA",
    "PoolSecurity",
    "Principal",
    "RevocationList",
    "RevokedToken",
    "SecurityConfig",
    "SecurityError",
    "SigningKeys",
    "StoredToken",
    "TokenAuthMiddleware",
    "TokenClaims",
    "TokenFileProblem",
    "TokenIssuer",
    "TokenNotYetValid",
    "TokenVerifier",
    "UnknownKey",
    "UntrustedIssuer",
    "auth_error_handler",
    "authz_by_method",
    "bearer_token",
    "client_ssl_context",
    "daemon_token",
    "daemon_token_path",
    "ensure_pool_security",
    "find_token",
    "format_scope",
    "normalize_authz",
    "parse_scope",
    "principal_of",
    "problem_response",
    "read_token_file",
    "require",
    "save_token",
    "scan_tokens",
    "server_ssl_context",
    "token_authenticator",
    "token_identity",
    "token_path",
    "trusted_ca_files",
    "user_token_dir",
]
