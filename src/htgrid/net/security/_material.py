"""A pool's security material, made (or renewed) by `htgrid up` before its daemons start.

    material = ensure_pool_security(SecurityConfig.load(home))
    material.ca.cert                    <home>/etc/ca/ca.crt       what other pools trust
    material.server                     <home>/etc/ca/server.crt   the daemons' TLS certificate
    material.daemon_token               <home>/etc/tokens.d/daemon condor@<trust domain>

Every step is idempotent: the signing key and the CA are kept; the server certificate is
issued again when missing, close to expiry or not the CA's; the daemon token is minted
again when missing, unreadable, close to expiry, or no longer accepted by the pool (its
key was replaced, the trust domain changed, it was revoked).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.client import read_token_file
from htgrid.net.security._ca import CertFiles, PoolCA
from htgrid.net.security._config import SecurityConfig
from htgrid.net.security._errors import AuthError
from htgrid.net.security._keys import POOL_KEY, SigningKeys
from htgrid.net.security._tokenfiles import save_token
from htgrid.net.security._tokens import Clock, TokenIssuer, TokenVerifier

__all__ = [
    "DAEMON_IDENTITY",
    "DAEMON_TOKEN",
    "SERVER_CERT",
    "PoolSecurity",
    "daemon_token",
    "daemon_token_path",
    "ensure_pool_security",
]

SERVER_CERT: Final = "server"  # <home>/etc/ca/server.crt and .key, for every daemon's TLS
DAEMON_TOKEN: Final = "daemon"  # <home>/etc/tokens.d/daemon
DAEMON_IDENTITY: Final = "condor"  # an administrator (QUEUE_SUPER_USERS' default)
_TOKEN_LIFETIME: Final = 365 * 86400
_TOKEN_RENEW: Final = 30 * 86400  # minted again by an `htgrid up` this close to expiry


@dataclass(frozen=True, slots=True)
class PoolSecurity:
    """Where a pool's security material is, as `ensure_pool_security` left it."""

    trust_domain: str
    ca: CertFiles
    server: CertFiles
    daemon_token: Path
    token_renewed: bool = False


def daemon_token_path(config: SecurityConfig) -> Path:
    """The file of the token the pool's daemons present to each other."""
    return config.system_token_dir / DAEMON_TOKEN


def daemon_token(config: SecurityConfig) -> str | None:
    """The daemon token's text, if the file holds one."""
    tokens, _ = read_token_file(daemon_token_path(config))
    return tokens[0].token if tokens else None


def _still_good(config: SecurityConfig, token: str | None, clock: Clock) -> bool:
    if token is None:
        return False
    try:
        principal = TokenVerifier(config, clock=clock).verify(token)
    except AuthError:
        return False
    if principal.expires is not None and principal.expires - clock() < _TOKEN_RENEW:
        return False
    return principal.is_admin


def ensure_pool_security(config: SecurityConfig, *, clock: Clock = time.time) -> PoolSecurity:
    """The signing key, the pool CA, the daemons' server certificate and the daemon
    token: each made when missing and renewed when it is about to lapse."""
    SigningKeys(config.password_dir).ensure(POOL_KEY)
    ca = PoolCA(config.ca_dir, clock=clock)
    ca_files = ca.ensure()
    server = ca.ensure_server_cert(SERVER_CERT)
    path = daemon_token_path(config)
    renewed = False
    if not _still_good(config, daemon_token(config), clock):
        token = TokenIssuer(config, clock=clock).create(
            f"{DAEMON_IDENTITY}@{config.trust_domain}", lifetime=_TOKEN_LIFETIME
        )
        save_token(path, token)
        renewed = True
    return PoolSecurity(config.trust_domain, ca_files, server, path, renewed)
