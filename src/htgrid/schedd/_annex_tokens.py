"""Annex tokens for the pool's users: `htgrid annex create` by a user who cannot read the
pool's signing key asks the schedd for its annex's token.

The schedd decides everything a token says, the caller only names the annex and the
lifetime (its lease): the identity is the annex's (`NAME.annex@<trust domain>`, which the
collector lets advertise the machines named under `NAME.annex` and nothing else), the
authorization ADVERTISE_STARTD alone, the lifetime at most ANNEX_TOKEN_MAX_LIFETIME.
A caller asking for another identity or more authorizations is refused, saying so.

An annex's name is its owner's while its tokens live: the first user to get a token for
`NAME` holds it (a record in spool/annex-tokens/NAME.json, 0600: owner, expiry, token
ids), and another user asking for `NAME` is refused until those tokens have expired or
been revoked (`revoke`: the owner's `htgrid annex shutdown`). Each grant and revocation
is logged, and written in the audit log (SCHEDD_AUDIT_LOG: who, which annex, until when,
the token's id; never its text) before the caller is answered.

A grant may carry where the annex is (`record`: its cloud, region and, on Azure, resource
group): the schedd then records the annex for the master (spool/annexes/NAME.json, as
`htgrid annex create` does for the pool's owner; htgrid.annex.keep reads it), which keeps
its Annex ad current in this pool's collector while the cloud has it, with the master's
own cloud credentials. An ordinary user may not write the pool's home, and the master
refreshes only what is recorded there. The collector is always this pool's: a user
cannot send the master's refreshes (and its credentials) elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from htgrid._files import write_atomic
from htgrid.net import BadRequest
from htgrid.net.security import (
    AuditGrant,
    RevocationList,
    SecurityConfig,
    TokenIssuer,
    ensure_pool_security,
    normalize_authz,
)
from htgrid.pool import HomeLayout
from htgrid.queue import Identity, NotAuthorized

__all__ = ["ANNEX_AUTHZ", "AnnexTokens", "annex_token_identity"]

_log = logging.getLogger("htgrid.schedd.annex")

#: What an annex token may do: advertise (and so run) the annex's slots.
ANNEX_AUTHZ: Final = "ADVERTISE_STARTD"
# htgrid.annex's names: an EventBridge rule's (64 characters, "htgrid-annex-" first).
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,50}")
_REGION: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
_GROUP: Final = re.compile(r"[-\w.()]{1,90}")


def annex_token_identity(name: str, trust_domain: str) -> str:
    """The subject of annex `name`'s token (htgrid.annex's `annex_identity`)."""
    return f"{name}.annex@{trust_domain}"


@dataclass(frozen=True, slots=True)
class _Owned:
    owner: str
    expires: float
    tokens: tuple[str, ...]


class AnnexTokens:
    """Mints and revokes annex tokens for the pool in `home` (records under `spool`)."""

    def __init__(self, home: Path, spool: Path, *, max_lifetime: float,
                 clock: Callable[[], float] = time.time,
                 audit: Callable[[AuditGrant], None] | None = None) -> None:  # fmt: skip
        """`audit` writes a grant's or revocation's line in the audit log (blocking)."""
        self._audit = audit
        self._home = home
        self._dir = spool / "annex-tokens"
        self._max = max_lifetime
        self._clock = clock
        self._lock = asyncio.Lock()

    async def mint(self, identity: Identity, annex: object, lifetime: object = None,
                   authz: object = None, subject: object = None,
                   expires: object = None, record: object = None) -> dict[str, Any]:  # fmt: skip
        """The token of `annex` for `identity`, lasting `lifetime` s or until `expires`
        (the lease's end), with what a booting instance needs: the identity, expiry,
        token id, trust domain and the pool's CA certificate. With `record` (where the
        annex is), the annex recorded for the master."""
        name = _name(annex)
        _check_authz(name, authz)
        where = _where(record)
        async with self._lock:
            granted = await asyncio.to_thread(
                self._mint, identity, name, lifetime, expires, subject
            )
            if where is not None:
                await asyncio.to_thread(self._record, name, identity.name, where)
            return granted

    def _record(self, name: str, owner: str, where: dict[str, str]) -> None:
        """The master's record of the annex (htgrid.annex.keep's Record, with its owner
        and when it was made: the cloud may not have the annex yet, its lease being
        installed after its token)."""
        doc = {"name": name, "pool": "", **where, "owner": owner, "since": self._clock()}
        directory = HomeLayout(self._home).annex_dir
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / f"{name}.json", (json.dumps(doc) + "\n").encode(), sync=True)
        _log.info("annex %s of %s recorded for the master (%s)", name, owner, where)

    def _mint(self, identity: Identity, name: str, lifetime: object, expires: object,
              subject: object) -> dict[str, Any]:  # fmt: skip
        now = int(self._clock())
        seconds = self._lifetime(lifetime, expires, now)
        security = SecurityConfig.load(self._home)
        material = ensure_pool_security(security)
        wanted = annex_token_identity(name, security.trust_domain)
        if subject is not None and subject != wanted:
            raise NotAuthorized(
                f"an annex token's identity is its annex's ({wanted}), not {str(subject)[:120]!r}: "
                "ask the pool's administrator for a token of another identity"
            )
        owned = self._owned(name)
        if owned is not None and owned.owner != identity.name and owned.expires > now:
            raise NotAuthorized(
                f"annex {name} belongs to {owned.owner} until its token expires "
                f"({int(owned.expires - now)} s from now): choose another name"
            )
        token = TokenIssuer(security, clock=lambda: now).create(
            wanted, authz=[ANNEX_AUTHZ], lifetime=seconds
        )
        from htgrid.client import StoredToken

        claims = StoredToken.read(token).claims
        jti, expires = str(claims["jti"]), float(claims["exp"])
        mine = owned is not None and owned.owner == identity.name
        kept = owned.tokens if owned is not None and mine else ()
        until = max(expires, owned.expires) if owned is not None and mine else expires
        self._save(name, _Owned(identity.name, until, (*kept, jti)))
        if self._audit is not None:
            self._audit(
                AuditGrant("granted", "annex-token", name, identity.name, wanted, ANNEX_AUTHZ,
                           (jti,), expires)
            )  # fmt: skip
        _log.info(
            "annex token %s for %s: identity %s, %s, expires in %d s",
            jti, identity.name, wanted, ANNEX_AUTHZ, int(seconds),
        )  # fmt: skip
        return {
            "token": token,
            "identity": wanted,
            "authz": [ANNEX_AUTHZ],
            "expires": int(expires),
            "jti": jti,
            "trust_domain": security.trust_domain,
            "ca": material.ca.cert.read_text(),
        }

    async def revoke(self, identity: Identity, annex: object) -> int:
        """Revoke every token of `annex` (its owner's, or an administrator's call); how
        many. The name is free again."""
        name = _name(annex)
        async with self._lock:
            return await asyncio.to_thread(self._revoke, identity, name)

    def _revoke(self, identity: Identity, name: str) -> int:
        owned = self._owned(name)
        if owned is None:
            return 0
        if owned.owner != identity.name and not identity.admin:
            raise NotAuthorized(f"annex {name} is {owned.owner}'s, not {identity.name}'s")
        revoked = RevocationList(SecurityConfig.load(self._home).revocation_file)
        for jti in owned.tokens:
            revoked.add(jti, f"annex {name} of {owned.owner} shut down by {identity.name}")
        (self._dir / f"{name}.json").unlink(missing_ok=True)
        self._ended(name)
        if self._audit is not None:
            other = owned.owner if owned.owner != identity.name else ""
            self._audit(
                AuditGrant("revoked", "annex-token", name, identity.name,
                           token_ids=owned.tokens, owner=other)
            )  # fmt: skip
        _log.info("annex %s's %d tokens revoked by %s", name, len(owned.tokens), identity.name)
        return len(owned.tokens)

    def _ended(self, name: str) -> None:
        """The master's record of a shut-down annex loses its grace: the next refresh
        finds the annex gone, removes its ad and the record."""
        path = HomeLayout(self._home).annex_dir / f"{name}.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and doc.get("since"):
            write_atomic(path, (json.dumps({**doc, "since": 0}) + "\n").encode(), sync=True)

    def _lifetime(self, lifetime: object, expires: object, now: int) -> int:
        """Seconds from `now`: `lifetime`, or until `expires`."""
        if (expires is None) == (lifetime is None):
            raise BadRequest("lifetime (seconds) or expires (epoch seconds): one of them")
        given = expires if expires is not None else lifetime
        if (
            isinstance(given, bool)
            or not isinstance(given, int | float)
            or not math.isfinite(given)
        ):
            raise BadRequest("lifetime and expires are numbers of seconds")
        value = int(given) - now if expires is not None else int(given)
        if value <= 0:
            raise BadRequest(f"the annex token would expire {-value} s ago: the lease has ended")
        if value > self._max:
            raise NotAuthorized(
                f"an annex token lasts at most {int(self._max)} s (ANNEX_TOKEN_MAX_LIFETIME), "
                f"not {int(value)} s: a shorter lease, or `htgrid annex extend` later"
            )
        return value

    def _owned(self, name: str) -> _Owned | None:
        try:
            doc = json.loads((self._dir / f"{name}.json").read_text())
            return _Owned(str(doc["owner"]), float(doc["expires"]), tuple(map(str, doc["tokens"])))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            # A record that cannot be read holds the name for nobody; say so.
            _log.warning("annex %s's token record is unreadable (%s): ignored", name, exc)
            return None

    def _save(self, name: str, owned: _Owned) -> None:
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        doc = {"owner": owned.owner, "expires": owned.expires, "tokens": list(owned.tokens)}
        write_atomic(self._dir / f"{name}.json", json.dumps(doc).encode(), sync=True, mode=0o600)
        os.chmod(self._dir, 0o700)


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadRequest(
            f"annex: {str(value)[:80]!r} cannot name an annex (letters, digits and '-', "
            "starting with a letter or digit, at most 51 characters)"
        )
    return value


def _where(record: object) -> dict[str, str] | None:
    """Where an annex is, checked: cloud (ec2, azure), region, Azure's resource group."""
    if record is None:
        return None
    if not isinstance(record, dict):
        raise BadRequest("record: an object (cloud, region, group)")
    cloud, region, group = (record.get(k, "") for k in ("cloud", "region", "group"))
    if cloud not in ("ec2", "azure"):
        raise BadRequest(f"record.cloud: ec2 or azure, not {str(cloud)[:40]!r}")
    if not isinstance(region, str) or not _REGION.fullmatch(region):
        raise BadRequest(f"record.region: not a region: {str(region)[:40]!r}")
    if not isinstance(group, str) or (group and not _GROUP.fullmatch(group)):
        raise BadRequest(f"record.group: not a resource group: {str(group)[:40]!r}")
    return {"cloud": cloud, "region": region, "group": group}


def _check_authz(name: str, authz: object) -> None:
    if authz is None:
        return
    if not isinstance(authz, list) or not all(isinstance(a, str) for a in authz):
        raise BadRequest("authz: a list of authorization names")
    try:
        asked = {normalize_authz(a) for a in authz}
    except ValueError as exc:
        raise BadRequest(f"authz: {exc}") from None
    extra = sorted(asked - {ANNEX_AUTHZ})
    if extra:
        raise NotAuthorized(
            f"annex {name}'s token may only advertise its slots ({ANNEX_AUTHZ}), not "
            f"{', '.join(extra)}: ask the pool's administrator for a broader token "
            "(htgrid token create)"
        )
