"""A daemon's CEDAR security from its pool's: the same keys, map file, levels and bans.

The pool's tokens are verified as on the HTTPS side (`Gatekeeper`: signature, issuer,
times, revocations, the map file, DENY_*); an FS user is a local account with a user's
rights (READ, WRITE), or all of them for the pool's administrators (QUEUE_SUPER_USERS),
as a token without a scope.

Every command needs authentication, as every HTTPS request needs a token, unless the
pool lets anyone read: `SEC_READ_AUTHENTICATION = OPTIONAL` (HTCondor's knob) in
htgrid.conf, and a client that does not insist on authenticating reads (queries) as
`unauthenticated@unmapped`, with READ only; DENY_READ may still refuse it by that name.

SSL presents the daemons' certificate (the pool CA's `server.crt`, or
AUTH_SSL_SERVER_CERTFILE/KEYFILE) and takes client certificates of the pool CA (or of
AUTH_SSL_SERVER_CAFILE); a certificate's subject is who the map file's SSL lines
(CERTIFICATE_MAPFILE, as on the HTTPS side) say, with a user's rights, or an
administrator's; a subject no line maps is refused. A client with no certificate is
`unauthenticated@unmapped`, where the pool lets anyone read, and is refused otherwise (or
always, with AUTH_SSL_REQUIRE_CLIENT_CERTIFICATE = true).

A session lasts at most SEC_DEFAULT_SESSION_DURATION (3600 s), and the CEDAR side holds
at most NETWORK_MAX_PENDING_CONNECTS connections (80% of the process's descriptors).
"""

from __future__ import annotations

import os
import re
import resource
import ssl
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from htgrid.net.cedar._methods import CedarSecurity
from htgrid.net.cedar._policy import Level
from htgrid.net.security import (
    AUTHORIZATIONS,
    SERVER_CERT,
    AuditLog,
    CertFiles,
    CertificateError,
    ExpiredToken,
    Gatekeeper,
    GatekeeperConfig,
    PoolCA,
    Principal,
    RevokedToken,
    SecurityConfig,
    SigningKeys,
    UnmappedIdentity,
    server_ssl_context,
)
from htgrid.pool import ConfigFile

__all__ = ["pool_security"]

_USER_RIGHTS = frozenset({"ALLOW", "READ", "WRITE"})
_MIN_CONNECTIONS: Final = 20  # HTCondor's MIN_FILE_DESCRIPTOR_SAFETY_LIMIT
_USER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_ANONYMOUS: Final = Principal(
    user="unauthenticated",
    subject="unauthenticated@unmapped",
    issuer="",
    scopes=("READ",),
    authorizations=frozenset({"ALLOW", "READ"}),
    token_id="",
    key_id="",
    method="UNAUTHENTICATED",
    canonical="unauthenticated@unmapped",
)


class _TlsFiles:
    """The daemon's TLS context for SSL authentication, made again when its
    certificate, key or CA files change (the certificate rotates)."""

    def __init__(self, cert: Path, key: Path, cas: list[Path]) -> None:
        self.paths = (cert, key, *cas)
        self.cert, self.key, self.cas = cert, key, cas
        self._made: tuple[tuple[object, ...], ssl.SSLContext | None] | None = None

    def _signature(self) -> tuple[object, ...]:
        def one(path: Path) -> object:
            try:
                st = os.stat(path)
            except OSError:
                return None
            return (st.st_ino, st.st_size, st.st_mtime_ns)

        return tuple(one(p) for p in self.paths)

    def context(self) -> ssl.SSLContext | None:
        signature = self._signature()
        if self._made is None or self._made[0] != signature:
            context: ssl.SSLContext | None = None
            if None not in signature:
                try:
                    files = CertFiles(self.cert, self.key, datetime.now(UTC))
                    context = server_ssl_context(files, client_cas=self.cas)
                except CertificateError:
                    context = None
            self._made = (signature, context)
        return self._made[1]


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

    def named(user: str, subject: str, method: str, canonical: str) -> Principal:
        """A local user's principal: a user's rights, or all for an administrator."""
        rights = AUTHORIZATIONS if user in config.admin_users else _USER_RIGHTS
        return Principal(
            user=user,
            subject=subject,
            issuer=method,
            scopes=None,
            authorizations=frozenset(rights),
            token_id="",
            key_id="",
            method=method,
            canonical=canonical,
        )

    def local_user(user: str) -> Principal:
        return named(user, f"{user}@{domain}", "FS", f"{user}@{domain}")

    def still_valid(principal: Principal) -> None:
        if principal.token_id and principal.token_id in gate.pool.revoked:
            raise RevokedToken(f"token {principal.token_id} of {principal.subject} was revoked")
        if principal.expires is not None and clock() > principal.expires + config.leeway:
            raise ExpiredToken(f"token {principal.token_id} of {principal.subject} expired")

    conf = ConfigFile.read(home)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    # As HTCondor's daemons: 80% of the descriptors a process may open, unless said.
    usable = soft - soft // 5 if soft != resource.RLIM_INFINITY else 10_000
    max_connections = conf.integer("NETWORK_MAX_PENDING_CONNECTS", max(_MIN_CONNECTIONS, usable))
    level = Level.of(conf.text("SEC_READ_AUTHENTICATION", "REQUIRED"), Level.REQUIRED)
    need_cert = conf.flag("AUTH_SSL_REQUIRE_CLIENT_CERTIFICATE", False)

    def ssl_user(subject: str | None) -> Principal:
        if subject is None:
            if need_cert or level is Level.REQUIRED:
                raise UnmappedIdentity(
                    "SSL: the client presented no certificate, and this pool lets no one "
                    "in without one (SEC_READ_AUTHENTICATION, AUTH_SSL_REQUIRE_CLIENT_"
                    "CERTIFICATE)"
                )
            return _ANONYMOUS
        found = gate.mapfile.get().lookup(("SSL",), subject)
        if found is None:
            raise UnmappedIdentity(
                f"SSL: no SSL line of the map file {settings.mapfile} maps {subject!r}"
            )
        canonical = found[0]
        user = canonical.split("@", 1)[0]
        if not _USER.fullmatch(user):
            raise UnmappedIdentity(
                f"SSL: {subject!r} maps to {canonical!r} ({found[1].origin}), no local user"
            )
        return named(user, subject, "SSL", canonical if "@" in canonical else f"{user}@{domain}")

    ca = PoolCA(config.ca_dir)
    cas = [Path(p.strip()) for p in conf.text("AUTH_SSL_SERVER_CAFILE", "").split(",") if p]
    tls = _TlsFiles(
        Path(conf.text("AUTH_SSL_SERVER_CERTFILE", str(ca.directory / f"{SERVER_CERT}.crt"))),
        Path(conf.text("AUTH_SSL_SERVER_KEYFILE", str(ca.directory / f"{SERVER_CERT}.key"))),
        cas or [ca.cert_path],
    )
    return CedarSecurity(
        trust_domain=config.trust_domain,
        key_names=keys.names,
        jwt_key=keys.jwt_key,
        verify=gate.verify,
        admit=gate.admit,
        local_user=local_user,
        still_valid=still_valid,
        anonymous=_ANONYMOUS,
        read_authentication=level,
        audit=audit.record if audit is not None else None,
        tls=tls.context,
        ssl_user=ssl_user,
        session_duration=conf.integer("SEC_DEFAULT_SESSION_DURATION", 3600, zero=True),
        max_connections=max_connections,
    )
