"""The gatekeeper: who a caller is, from the pool's tokens or an issuer's, and whether to let
it in, as HTCondor-CE decides.

    settings = GatekeeperConfig.load(home, daemon="SCHEDD")
    gate = Gatekeeper(SecurityConfig.load(home), settings)
    principal = await gate.verify(token)        # a Principal, or the AuthError why not
    gate.admit(principal, "WRITE", "127.0.0.1") # DeniedIdentity when DENY_WRITE bans it

A token of the pool's trust domain (HS256) is the pool's (`TokenVerifier`). Any other is
an issuer's (SciTokens, WLCG tokens), and the map file says whether this pool takes it:
its issuer must be one this pool names before anything else is done, so that a token of
any other is refused without its keys being fetched from the network (its `iss` is
anyone's to write): by SEC_SCITOKENS_ALLOWED_ISSUERS when set (`*`: any, as HTCondor),
else by the map file (an issuer a SCITOKENS line names: a line that can match any
issuer names none, and takes tokens only of issuers the knob lists). Then it is verified
(`_scitokens`), and its holder is the line's canonical name (`user@domain`; UID_DOMAIN
when the line names no domain); the local user its jobs run as is the name's part
before the `@`. A token no line maps is HTCondor's
`scitokens@unmapped`, with READ at most: it may look, not submit.

A client that presents no token but a certificate in the TLS handshake (one of a CA the
pool trusts, its own or `htgrid trust add`'s) is its DN's, by the map file's SSL lines
(GSI lines too, as HTCondor-CE's older map files write them): the line's user with a
user's rights, or HTCondor's `ssl@unmapped`, READ only (`certificate`).

DENY_<level> (READ, WRITE, NEGOTIATOR, ADMINISTRATOR, DAEMON) lists names refused that
level whatever their token grants, HTCondor's form: `user@domain/host`, `user@domain`
(any host) or `host` (any user), `*` matching anything. HTCondor-CE's defaults refuse
WRITE to `anonymous@*`, `*@unmapped` and `*@banned.htcondor.org`, so a map file bans a
subject by mapping it to `<name>@banned.htcondor.org`. ALLOW_<level>, when set, lists the
only names let in at that level (DENY_ wins over it); unset, the token's grants decide.
Both are read again when htgrid.conf changes: a ban takes effect without a restart.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid.client import ALGORITHM, TOKEN_ALGORITHMS, NotAToken, shown, take_apart
from htgrid.net.security._audit import Rotation, parse_rotation
from htgrid.net.security._authz import AUTHORIZATIONS, Principal, effective_authorizations
from htgrid.net.security._config import SecurityConfig
from htgrid.net.security._errors import DeniedIdentity, MalformedToken, UnmappedIdentity
from htgrid.net.security._issuers import IssuerKeys, IssuerSettings
from htgrid.net.security._mapfile import MapRule, WatchedMap, local_user
from htgrid.net.security._scitokens import IssuedTokenVerifier, authorizations_of
from htgrid.net.security._tokens import TokenVerifier
from htgrid.pool import CONFIG_NAME, ConfigFile, HomeLayout, PoolError

__all__ = ["DENY_LEVELS", "DenyList", "Gatekeeper", "GatekeeperConfig"]

_log = logging.getLogger("htgrid.net.security")

DENY_LEVELS: Final = ("READ", "WRITE", "NEGOTIATOR", "ADMINISTRATOR", "DAEMON")
SCITOKENS: Final = "SCITOKENS"
ALLOWED: Final = "SEC_SCITOKENS_ALLOWED_ISSUERS"
#: Who an issuer's verified token is when no SCITOKENS line maps it (HTCondor's name).
UNMAPPED: Final = "scitokens@unmapped"
#: The map file's methods of a client certificate: GSI lines are read as SSL ones.
SSL_METHODS: Final = ("SSL", "GSI")


def _path(home: Path, conf: ConfigFile, key: str, default: str = "") -> Path | None:
    """Knob `key`'s path (relative: to the pool's home), or None when unset and no default."""
    text = conf.values.get(key, ("", 0))[0].strip() or default
    return home / text if text else None


@dataclass(frozen=True, slots=True)
class DenyList:
    """DENY_<level>: the names refused each level, as HTCondor writes them; ALLOW_<level>:
    the only names let in at that level, where it is set."""

    entries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allow: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, conf: ConfigFile) -> DenyList:
        """The DENY_* and ALLOW_* knobs of `conf`."""
        return cls(
            {level: conf.names(f"DENY_{level}") for level in DENY_LEVELS},
            {level: conf.names(f"ALLOW_{level}") for level in DENY_LEVELS},
        )

    def denied(self, name: str, level: str, host: str) -> str | None:
        """The entry of DENY_`level` that refuses `name` coming from `host`, if any."""
        for entry in self.entries.get(level, ()):
            if _matches(entry, name, host):
                return entry
        return None

    def refusal(self, name: str, level: str, host: str) -> str | None:
        """Why `name` coming from `host` is refused `level` (DENY_ or ALLOW_), if it is."""
        entry = self.denied(name, level, host)
        if entry is not None:
            return f"DENY_{level} lists {entry}"
        allowed = self.allow.get(level, ())
        if allowed and not any(_matches(entry, name, host) for entry in allowed):
            return f"ALLOW_{level} ({', '.join(allowed)}) does not list it"
        return None


def _matches(entry: str, name: str, host: str) -> bool:
    user, slash, where = entry.partition("/")
    if not slash and "@" not in entry:
        user, where = "*", entry  # a bare entry names hosts
    return fnmatch.fnmatchcase(name, user) and fnmatch.fnmatchcase(host, where or "*")


class _WatchedLists:
    """DENY_* and ALLOW_* as htgrid.conf says now: a stat per request, a read after an
    edit (HTCondor reads them again on reconfig); a file that cannot be read keeps the
    lists last read."""

    def __init__(self, home: Path | None, first: DenyList) -> None:
        self.path = None if home is None else home / CONFIG_NAME
        self._value = first
        self._signature = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_ino, info.st_mtime_ns, info.st_size

    def get(self) -> DenyList:
        signature = self._stat()
        if self.path is None or signature == self._signature:
            return self._value
        self._signature = signature
        try:
            self._value = DenyList.of(ConfigFile.read(self.path.parent))
        except PoolError as err:
            _log.warning("DENY_*/ALLOW_* kept as they were: %s", err)
        return self._value


@dataclass(frozen=True, slots=True)
class GatekeeperConfig:
    """The gatekeeper's knobs (htgrid.conf), named as HTCondor-CE's."""

    mapfile: Path  # CERTIFICATE_MAPFILE
    audiences: tuple[str, ...]  # SCITOKENS_SERVER_AUDIENCE
    uid_domain: str  # UID_DOMAIN: the domain of a canonical name that names none
    deny: DenyList
    issuers: IssuerSettings  # whom to trust for issuers' HTTPS
    audit_log: Path | None  # <DAEMON>_AUDIT_LOG
    audit_rotation: Rotation = field(default_factory=Rotation)  # MAX_[NUM_]<DAEMON>_AUDIT_LOG
    # SEC_SCITOKENS_ALLOWED_ISSUERS: the only issuers whose keys are fetched ("*": any);
    # None (unset): those the map file's SCITOKENS lines name.
    allowed_issuers: tuple[str, ...] | None = None

    @classmethod
    def load(cls, home: Path, daemon: str = "SCHEDD") -> GatekeeperConfig:
        """The settings of `home`'s htgrid.conf for `daemon` (SCHEDD, COLLECTOR)."""
        conf = ConfigFile.read(home)
        audience = "SCITOKENS_SERVER_AUDIENCE"
        return cls(
            mapfile=_path(home, conf, "CERTIFICATE_MAPFILE") or home / "etc" / "mapfile",
            # HTCondor-CE's default: the address its clients reach it by.
            audiences=conf.names(audience if conf.has(audience) else "COLLECTOR_HOST"),
            uid_domain=conf.text("UID_DOMAIN"),
            deny=DenyList.of(conf),
            # The system's CAs and the pool's trusted ones (AUTH_SSL_CLIENT_CADIR).
            issuers=IssuerSettings(
                ca_dir=HomeLayout(home).trusted_ca_dir,
                cache_dir=_path(home, conf, "SEC_SCITOKENS_CACHE")
                or HomeLayout(home).run_dir / "cache",
            ),
            audit_log=_path(
                home, conf, f"{daemon}_AUDIT_LOG", "log/AuditLog" if daemon == "SCHEDD" else ""
            ),
            audit_rotation=_rotation(conf, daemon),
            allowed_issuers=conf.names(ALLOWED) if conf.has(ALLOWED) else None,
        )


def _rotation(conf: ConfigFile, daemon: str) -> Rotation:
    size, count = f"MAX_{daemon}_AUDIT_LOG", f"MAX_NUM_{daemon}_AUDIT_LOG"
    keep = conf.integer(count, 90, zero=True)
    try:
        return parse_rotation(conf.text(size, "1d"), keep)
    except ValueError as exc:
        raise PoolError(f"{conf.path}:{conf.values[size][1]}: {size} {exc}") from None


class Gatekeeper:
    """Verifies the pool's tokens and issuers' tokens, maps them, and applies DENY_*."""

    def __init__(
        self,
        config: SecurityConfig,
        settings: GatekeeperConfig,
        *,
        clock: Callable[[], float] = time.time,
        keys: IssuerKeys | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.pool = TokenVerifier(config, clock=clock, mapfile=settings.mapfile)
        self.mapfile = WatchedMap(settings.mapfile)
        self.keys = keys if keys is not None else IssuerKeys(settings.issuers, clock=clock)
        self.issued = IssuedTokenVerifier(
            self.keys, settings.audiences, leeway=config.leeway, clock=clock
        )
        self.access = _WatchedLists(config.home, settings.deny)

    async def verify(self, token: str) -> Principal:
        """The principal `token` stands for, or the AuthError saying why it is refused."""
        try:
            header, claims, _, _ = take_apart(token, TOKEN_ALGORITHMS)
        except NotAToken:
            return self.pool.verify(token)  # refused there, in the pool's words
        issuer = claims.get("iss")
        if header.get("alg") == ALGORITHM or issuer == self.config.trust_domain:
            return self.pool.verify(token)
        return await self._verify_issued(token, claims)

    async def _verify_issued(self, token: str, claims: Mapping[str, Any]) -> Principal:
        issuer, subject = claims.get("iss"), claims.get("sub")
        if not isinstance(issuer, str) or not isinstance(subject, str) or not subject:
            raise MalformedToken("an issuer's token must have string iss and sub claims")
        name = f"{issuer},{subject}"
        mapfile = self.mapfile.get()
        found = mapfile.lookup((SCITOKENS,), name)
        # Nothing is fetched from an issuer this pool does not name: a token is
        # anyone's to make, and its `iss` any URL.
        self._check_issuer(issuer, mapfile.scitokens_issuers(), found, name)
        user, canonical = "scitokens", UNMAPPED
        if found is not None:
            canonical, rule = found
            mapped = local_user(canonical)
            if mapped is None:
                raise UnmappedIdentity(
                    f"{rule.origin} maps {shown(name, 160)} to {canonical!r}, which names no "
                    "local user"
                )
            user = mapped
        verified = await self.issued.verify(token)
        levels = authorizations_of(verified.scopes)
        granted = effective_authorizations(levels, user, self.config.admin_users)
        if found is None:
            # HTCondor's scitokens@unmapped: no local account, so READ at most (and
            # DENY_WRITE refuses *@unmapped in HTCondor-CE's defaults).
            granted = granted & {"READ"}
        full = canonical if "@" in canonical else f"{canonical}@{self.settings.uid_domain}"
        return Principal(
            user=user,
            subject=verified.subject,
            issuer=verified.issuer,
            scopes=levels,
            authorizations=granted,
            token_id=verified.token_id or "",
            key_id=verified.key_id or "",
            expires=verified.expires,
            method=SCITOKENS,
            canonical=full,
        )

    def _check_issuer(
        self,
        issuer: str,
        named: frozenset[str],
        found: tuple[str, MapRule] | None,
        name: str,
    ) -> None:
        """UnmappedIdentity unless `issuer`'s keys may be fetched: one that
        SEC_SCITOKENS_ALLOWED_ISSUERS lists when it is set, else one that a SCITOKENS line
        names (a line that matches any issuer, `/^https:\\/\\/.*,/`, names none)."""
        allowed = self.settings.allowed_issuers
        if allowed is not None:
            if "*" in allowed or issuer in allowed:
                return
            raise UnmappedIdentity(
                f"{ALLOWED} ({', '.join(allowed) or 'empty'}) does not list the issuer "
                f"{shown(issuer, 160)}: this pool does not take its tokens"
            )
        if issuer in named:
            return
        if found is not None:
            raise UnmappedIdentity(
                f"{found[1].origin} maps {shown(name, 160)} but names no one issuer, and "
                f"{ALLOWED} is unset: list there the issuers whose keys may be fetched"
            )
        raise UnmappedIdentity(
            f"no SCITOKENS line of the map file {self.settings.mapfile} maps "
            f"{shown(name, 160)}: this pool does not take that issuer's tokens"
        )

    def certificate(self, dn: str, issuer_dn: str = "") -> Principal:
        """The principal of a TLS client certificate (verified in the handshake against
        the pool's trusted CAs) whose subject is `dn`: its SSL (or GSI) line's user, with
        a user's rights (an administrator's for QUEUE_SUPER_USERS), or, unmapped,
        HTCondor's ssl@unmapped with READ."""
        found = self.mapfile.get().lookup(SSL_METHODS, dn)
        if found is None:
            return Principal(
                user="ssl",
                subject=dn,
                issuer=issuer_dn,
                scopes=None,
                authorizations=frozenset({"READ"}),
                token_id="",
                key_id="",
                method="SSL",
                canonical="ssl@unmapped",
            )
        canonical, rule = found
        user = local_user(canonical)
        if user is None:
            raise UnmappedIdentity(
                f"{rule.origin} maps the certificate {shown(dn, 160)} to {canonical!r}, "
                "which names no local user"
            )
        return Principal(
            user=user,
            subject=dn,
            issuer=issuer_dn,
            scopes=None,
            authorizations=effective_authorizations(None, user, self.config.admin_users),
            token_id="",
            key_id="",
            method="SSL",
            canonical=canonical if "@" in canonical else f"{canonical}@{self.settings.uid_domain}",
        )

    def admit(self, principal: Principal, level: str | None, host: str) -> None:
        """DeniedIdentity when DENY_`level` (or ALLOW_`level`, as htgrid.conf says now)
        refuses the principal's name from `host`."""
        if level is None or level not in AUTHORIZATIONS:
            return
        why = self.access.get().refusal(principal.name, level, host)
        if why is not None:
            raise DeniedIdentity(
                f"{principal.name} ({principal.method} {shown(principal.issuer, 120)},"
                f"{shown(principal.subject, 80)}) is refused {level}: {why}"
            )
