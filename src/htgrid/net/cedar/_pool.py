"""A daemon's CEDAR security from its pool's: the same keys, map file, levels and bans.

The pool's tokens are verified as on the HTTPS side (`Gatekeeper`: signature, issuer,
times, revocations, the map file, DENY_*); an FS user is a local account with a user's
rights (READ, WRITE), or all of them for the pool's administrators (QUEUE_SUPER_USERS),
as a token without a scope.

Every command needs authentication, as every HTTPS request needs a token, unless the
pool lets anyone read: `SEC_READ_AUTHENTICATION = OPTIONAL` (HTCondor's knob) in
htgrid.conf, and a client that does not insist on authenticating reads (queries) as
`unauthenticated@unmapped`, with READ only; DENY_READ may still refuse it by that name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from htgrid.net.cedar._methods import CedarSecurity
from htgrid.net.cedar._policy import Level
from htgrid.net.security import (
    AUTHORIZATIONS,
    AuditLog,
    ExpiredToken,
    Gatekeeper,
    GatekeeperConfig,
    Principal,
    RevokedToken,
    SecurityConfig,
    SigningKeys,
)
from htgrid.pool import ConfigFile

__all__ = ["pool_security"]

_USER_RIGHTS = frozenset({"ALLOW", "READ", "WRITE"})


def pool_security(
    home: Path,
    daemon: str,
    *,
    clock: Callable[[], float] = time.time,
    audit: AuditLog | None = None,
) -> CedarSecurity:
    """The CEDAR security of `daemon` (SCHEDD, COLLECTOR) of the pool in `home`; its
    decisions go to `audit` (the daemon's HTTPS side's, so that one writer keeps it)."""
    config = SecurityConfig.load(home)
    settings = GatekeeperConfig.load(home, daemon)
    gate = Gatekeeper(config, settings, clock=clock)
    keys = SigningKeys(config.password_dir)
    domain = settings.uid_domain or config.trust_domain

    def local_user(user: str) -> Principal:
        rights = AUTHORIZATIONS if user in config.admin_users else _USER_RIGHTS
        return Principal(
            user=user,
            subject=f"{user}@{domain}",
            issuer="FS",
            scopes=None,
            authorizations=frozenset(rights),
            token_id="",
            key_id="",
            method="FS",
            canonical=f"{user}@{domain}",
        )

    def still_valid(principal: Principal) -> None:
        if principal.token_id and principal.token_id in gate.pool.revoked:
            raise RevokedToken(f"token {principal.token_id} of {principal.subject} was revoked")
        if principal.expires is not None and clock() > principal.expires + config.leeway:
            raise ExpiredToken(f"token {principal.token_id} of {principal.subject} expired")

    level = Level.of(
        ConfigFile.read(home).text("SEC_READ_AUTHENTICATION", "REQUIRED"), Level.REQUIRED
    )
    return CedarSecurity(
        trust_domain=config.trust_domain,
        key_names=keys.names,
        jwt_key=keys.jwt_key,
        verify=gate.verify,
        admit=gate.admit,
        local_user=local_user,
        still_valid=still_valid,
        anonymous=Principal(
            user="unauthenticated",
            subject="unauthenticated@unmapped",
            issuer="",
            scopes=("READ",),
            authorizations=frozenset({"ALLOW", "READ"}),
            token_id="",
            key_id="",
            method="UNAUTHENTICATED",
            canonical="unauthenticated@unmapped",
        ),
        read_authentication=level,
        audit=audit.record if audit is not None else None,
    )
