"""A user's annex commands: create, add, extend, shutdown, status, with the pool's side
(the annex's token, the pool's CA for the instances, the annex ads in the collector).

The token is minted with the pool's signing key, so these run where the pool's home
($HTGRID_HOME) is readable: the submit host of a personal pool, or its administrator.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import ipaddress
import json
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from htgrid.annex._ads import ANNEX_TYPE, annex_ad, by_annex
from htgrid.annex._aws import check_lease_left
from htgrid.annex._boot import boot_script
from htgrid.annex._errors import AnnexNotFound, AnnexUsageError
from htgrid.annex._spec import AnnexSpec, Cloud, CloudAnnex, annex_identity
from htgrid.classad import ClassAd, quote
from htgrid.collector import AdType, CollectorClient, CollectorError, command_for
from htgrid.net.security import (
    RevocationList,
    SecurityConfig,
    TokenIssuer,
    ensure_pool_security,
)

__all__ = ["Annexes", "Created", "start_expression"]

_log = logging.getLogger("htgrid.annex")


def start_expression(name: str, owners: Sequence[str]) -> str:
    """condor_annex's START: jobs aimed at this annex (TargetAnnexName), of its owners.

    `==`, not `=?=`: with no job to compare (the startd deciding whether its slot is in
    the Owner state) it is undefined, not false, so the slot stays Unclaimed; a job
    without TargetAnnexName makes it undefined too, which starts nothing."""
    start = "(MY.AnnexName == TARGET.TargetAnnexName)"
    if owners:
        # member(), not stringListMember(): undefined with no job, where the other is false.
        start += f" && member(TARGET.Owner, {{{', '.join(quote(o) for o in owners)}}})"
    return start


def _unreachable(pool: str) -> tuple[str, ...]:
    """A warning if the instances could never reach `pool` (this pool's own address)."""
    host = pool.rpartition(":")[0].strip("[]") if ":" in pool else pool
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        bad = host.lower() in ("localhost", "") or host.lower().endswith(".localhost")
    else:
        bad = ip.is_loopback or ip.is_unspecified or ip.is_link_local
    if not bad:
        return ()
    return (
        f"the instances join this pool's collector at {pool}, an address only this "
        "host reaches: they can never join. Give --pool HOST:PORT (an address the cloud "
        "reaches, with the collector listening there: COLLECTOR_HOST), or --no-join",
    )


@dataclass(frozen=True, slots=True)
class Created:
    """What `create` or `add` asked for: the annex, its lease end, the requests' ids."""

    name: str
    lease_end: float
    ids: tuple[str, ...]
    warnings: tuple[str, ...] = ()


class Annexes:
    """The annexes of one pool (`home`) in one cloud region."""

    def __init__(self, cloud: Cloud, home: Path, *, pool: str | None = None,
                 clock: Callable[[], float] | None = None) -> None:  # fmt: skip
        self.cloud = cloud
        self.home = home
        self.pool = pool
        self.clock = clock or cloud.clock

    @property
    def aws(self) -> Any:
        """The cloud (the name the AWS-only commands had)."""
        return self.cloud

    @aws.setter
    def aws(self, cloud: Cloud) -> None:
        self.cloud = cloud

    # ---- the pool's side ------------------------------------------------------------

    def _security(self) -> SecurityConfig:
        return SecurityConfig.load(self.home)

    def _collector_address(self) -> str:
        if self.pool:
            return self.pool
        from htgrid.collector import default_pool

        return default_pool(self.home)

    def _mint(self, name: str, lifetime: float) -> tuple[str, str]:
        """(token, its id): scoped to advertising the annex's slots, ending with the lease."""
        from htgrid.client import StoredToken

        security = self._security()
        token = TokenIssuer(security, clock=self.clock).create(
            annex_identity(name, security.trust_domain),
            authz=["ADVERTISE_STARTD"],
            lifetime=max(1, int(lifetime)),
        )
        jti = StoredToken.read(token).claims.get("jti")
        return token, str(jti)

    def _boot(self, spec: AnnexSpec, lease_end: float, pool: str) -> str:
        security = self._security()
        material = ensure_pool_security(security)
        settings = {
            **self.cloud.boot_settings(spec.name),
            "annex": spec.name,
            "pool": pool,
            "trust_domain": security.trust_domain,
            "ca": material.ca.cert.read_text(),
            "lease_end": int(lease_end),
            "idle": spec.idle,
            "start": start_expression(spec.name, spec.owners),
            "config": dict(spec.extra),
        }
        return boot_script(settings)

    # ---- commands -------------------------------------------------------------------

    def create(self, spec: AnnexSpec) -> Created:
        """Install the lease, then the token, then request the instances."""
        now = self.clock()
        if spec.user_data is not None and spec.join:
            raise AnnexUsageError("--user-data is for --no-join annexes (their own boot)")
        if not spec.owners:
            spec = replace(spec, owners=(getpass.getuser(),))
        self.cloud.check_setup()
        if self.cloud.lease_of(spec.name) is not None:
            raise AnnexUsageError(
                f"annex {spec.name} exists in {self.cloud.region}: `htgrid annex add` adds "
                "instances to it, `htgrid annex extend` lengthens its lease"
            )
        lease_end = spec.expiration(now)
        check_lease_left(lease_end, now)
        pool = self._collector_address() if spec.join else ""
        # From here on the lease function ends whatever is made.
        self.cloud.start_lease(spec.name, spec.owners[0], lease_end)
        self.cloud.put(spec.name, "lease", str(int(lease_end)))
        tokens: list[str] = []
        if spec.join:
            token, jti = self._mint(spec.name, lease_end - now)
            self.cloud.put(spec.name, "token", token, secure=True, expires=lease_end)
            tokens.append(jti)
        self._save(spec, pool, spec.count + spec.slots, tokens)
        # The master keeps the ads of the annexes recorded in the pool's home current.
        from htgrid.annex.keep import Record, remember

        record = Record(
            spec.name, self.cloud.region, self.pool or "", self.cloud.kind, self.cloud.scope
        )
        remember(self.home, record)
        warnings = () if not spec.join or self.pool else _unreachable(pool)
        ids = tuple(self._request(spec, lease_end, pool))
        return Created(spec.name, lease_end, ids, warnings)

    def _save(self, spec: AnnexSpec, pool: str, requested: int, tokens: list[str]) -> None:
        settings = asdict(spec)
        settings.update(owner=spec.owners[0], pool=pool, requested=requested, tokens=tokens)
        for gone in ("count", "slots", "lifetime", "expiry", "user_data"):
            settings.pop(gone, None)
        self.cloud.put(spec.name, "config", json.dumps(settings, sort_keys=True))

    def _request(self, spec: AnnexSpec, lease_end: float, pool: str) -> list[str]:
        user_data = self._boot(spec, lease_end, pool) if spec.join else (spec.user_data or "")
        return self.cloud.request(spec, user_data, lease_end)

    def _settings(self, name: str) -> dict[str, Any]:
        text = self.cloud.get(name, "config")
        if text is None:
            raise AnnexNotFound(f"no annex {name!r} in {self.cloud.region}")
        loaded = json.loads(text)
        return loaded if isinstance(loaded, dict) else {}

    def _lease(self, name: str) -> float:
        lease = self.cloud.lease_of(name)
        if lease is None:
            raise AnnexNotFound(f"no annex {name!r} in {self.cloud.region}")
        return lease

    def add(self, name: str, *, count: int = 0, slots: int = 0) -> Created:
        """More instances (or fleet capacity) under the annex's lease."""
        lease_end = self._lease(name)
        check_lease_left(lease_end, self.clock())
        settings = self._settings(name)
        known = {f for f in AnnexSpec.__dataclass_fields__ if f in settings}
        fields = {f: settings[f] for f in known}
        for listed in ("instance_types", "image_ids", "security_groups", "owners"):
            fields[listed] = tuple(fields.get(listed, ()))
        fields["tags"] = tuple(tuple(t) for t in fields.get("tags", ()))
        spec = AnnexSpec(**{**fields, "count": count, "slots": slots, "lifetime": None})
        requested = int(settings.get("requested", 0)) + count + slots
        self._save(spec, str(settings.get("pool", "")), requested, list(settings.get("tokens", [])))
        return Created(
            name, lease_end, tuple(self._request(spec, lease_end, str(settings["pool"])))
        )

    def extend(self, name: str, *, lifetime: float | None = None,
               expiry: float | None = None) -> float:  # fmt: skip
        """A new lease end (now + lifetime, or expiry): the cloud's rule first, then the
        instances' copy and a token that lasts as long."""
        now = self.clock()
        old = self._lease(name)
        if old <= now:
            raise AnnexUsageError(f"annex {name}'s lease has ended: it is being shut down")
        new = expiry if expiry is not None else now + (lifetime or 0)
        if new <= now:
            raise AnnexUsageError("the new lease end is in the past")
        settings = self._settings(name)
        self.cloud.move_lease(name, new)
        self.cloud.put(name, "lease", str(int(new)))
        if settings.get("join", True):
            token, jti = self._mint(name, new - now)
            self.cloud.put(name, "token", token, secure=True, expires=new)
            settings["tokens"] = [*settings.get("tokens", []), jti]
            self.cloud.put(name, "config", json.dumps(settings, sort_keys=True))
        return new

    def shutdown(self, name: str) -> dict[str, Any]:
        """End the annex now: requests cancelled, instances terminated, token revoked."""
        settings = self._settings(name) if self.cloud.lease_of(name) is not None else {}
        done = self.cloud.end(name)
        if not settings and not done["terminated"] and not done["cancelled"]:
            raise AnnexNotFound(f"no annex {name!r} in {self.cloud.region}")
        revoked = RevocationList(self._security().revocation_file)
        for jti in settings.get("tokens", []):
            revoked.add(str(jti), f"annex {name} shut down")
        self._invalidate(name)
        from htgrid.annex.keep import forget

        forget(self.home, name)
        return done

    def describe(self, name: str | None = None) -> list[CloudAnnex]:
        return self.cloud.describe(name)

    # ---- ads ------------------------------------------------------------------------

    def ads(self, name: str | None = None, *, publish: bool = True) -> list[ClassAd]:
        """The annex ads, from one refresh of the cloud and the pool (and published)."""
        annexes = self.describe(name)
        now = self.clock()
        slots = self._slots(name)
        ads = [
            annex_ad(a, slots.get(a.name, []), self.cloud.region, now, self.cloud.kind)
            for a in annexes
        ]
        if publish and ads:
            try:
                self._run(self._advertise(ads))
            except CollectorError as exc:
                _log.warning("cannot publish the annex ads: %s", exc)
        return ads

    def keep(self, names: Collection[str]) -> list[str]:
        """Refresh and publish the ads of `names` (one describe of the region, however
        many instances); those the cloud no longer has get their ads invalidated, and
        are returned."""
        annexes = [a for a in self.describe() if a.name in names]
        now = self.clock()
        slots = self._slots(None)
        ads = [
            annex_ad(a, slots.get(a.name, []), self.cloud.region, now, self.cloud.kind)
            for a in annexes
        ]
        if ads:
            self._run(self._advertise(ads))
        gone = sorted(set(names) - {a.name for a in annexes})
        for name in gone:
            self._invalidate(name)
        return gone

    def _slots(self, name: str | None) -> dict[str, list[ClassAd]]:
        constraint = "IsAnnex =?= true"
        if name is not None:
            constraint = f"AnnexName =?= {quote(name)}"

        async def query(c: CollectorClient) -> list[ClassAd]:
            return await c.query(AdType.STARTD, constraint)

        try:
            return by_annex(self._run(self._with_collector(query)))
        except CollectorError:
            return {}

    async def _with_collector(self, fn: Any) -> Any:
        async with CollectorClient(
            self._collector_address(), home=self.home, daemon=True, timeout=10.0
        ) as c:
            return await fn(c)

    async def _advertise(self, ads: list[ClassAd]) -> None:
        async def send(c: CollectorClient) -> None:
            await c.advertise(command_for(AdType.GENERIC), ads)

        await self._with_collector(send)

    def _invalidate(self, name: str) -> None:
        query = ClassAd({"MyType": "Query", "TargetType": ANNEX_TYPE, "Name": name})

        async def remove(c: CollectorClient) -> int:
            return await c.invalidate(command_for(AdType.GENERIC, invalidate=True), query)

        with contextlib.suppress(CollectorError):  # no pool: the ad lapses in its lifetime
            self._run(self._with_collector(remove))

    @staticmethod
    def _run(coro: Any) -> Any:
        return asyncio.run(coro)
