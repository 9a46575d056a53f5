"""A user's annex commands: create, add, extend, shutdown, status, with the pool's side
(the annex's token, the pool's CA for the instances, the annex ads in the collector).

The annex's token is minted with the pool's signing key where this process may read it
(the owner of a personal pool, its administrator); an ordinary user asks the schedd
(`ScheddClient.annex_token`), which mints the annex's token only (its identity, for
ADVERTISE_STARTD, for the lease) and answers the pool's CA and trust domain with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import ipaddress
import json
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from htgrid.annex._ads import ANNEX_TYPE, annex_ad, by_annex
from htgrid.annex._aws import MIN_LEASE, REPLACE_BATCH, AwsAnnexes, check_lease_left
from htgrid.annex._boot import boot_script
from htgrid.annex._errors import AnnexError, AnnexNotFound, AnnexUsageError
from htgrid.annex._replace import Lost, lost
from htgrid.annex._spec import AnnexSpec, Cloud, CloudAnnex, annex_identity
from htgrid.classad import ClassAd, quote
from htgrid.collector import AdType, CollectorClient, CollectorError, command_for
from htgrid.net import ScheddClient
from htgrid.net.security import (
    POOL_KEY,
    RevocationList,
    SecurityConfig,
    TokenIssuer,
    ensure_pool_security,
)

__all__ = ["Annexes", "Created", "start_expression"]

# The settings `add` boots instances with when the schedd minted the token (the pool's
# CA and trust domain, which this process cannot read from the pool's home).
_POOL_KEYS = ("trust_domain", "ca")

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


def _spec_of(settings: Mapping[str, Any], count: int, slots: int) -> AnnexSpec:
    """An annex's spec from its saved launch settings, for `count` or `slots` more."""
    known = {f for f in AnnexSpec.__dataclass_fields__ if f in settings}
    fields = {f: settings[f] for f in known}
    for listed in ("instance_types", "image_ids", "security_groups", "owners"):
        fields[listed] = tuple(fields.get(listed, ()))
    fields["tags"] = tuple(tuple(t) for t in fields.get("tags", ()))
    return AnnexSpec(**{**fields, "count": count, "slots": slots, "lifetime": None})


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
class _Grant:
    """An annex token and what the instances need beside it."""

    token: str
    jti: str
    trust_domain: str
    ca: str


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
                 clock: Callable[[], float] | None = None,
                 schedd: Callable[[], ScheddClient] | None = None) -> None:  # fmt: skip
        """`schedd`: the client of the schedd that mints the annex's tokens (by default,
        when this process cannot read the pool's signing key: this pool's)."""
        self.cloud = cloud
        self.home = home
        self.pool = pool
        self.clock = clock or cloud.clock
        self._schedd_factory = schedd
        self._schedd: ScheddClient | None = None

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

    def signs(self) -> bool:
        """Whether this process mints the annex tokens with the pool's key (else the
        schedd does)."""
        if self._schedd_factory is not None:
            return False
        keys = self._security().password_dir
        key = keys / POOL_KEY
        if key.exists():
            return os.access(key, os.R_OK)
        return os.access(keys if keys.exists() else self.home, os.W_OK | os.X_OK)

    def schedd(self) -> ScheddClient:
        if self._schedd is None:
            factory = self._schedd_factory or (lambda: ScheddClient.local(self.home))
            self._schedd = factory()
        return self._schedd

    def _mint(self, name: str, now: float, lease_end: float) -> _Grant:
        """The annex's token: scoped to advertising its slots, ending with the lease."""
        from htgrid.client import StoredToken

        lifetime = lease_end - now
        if not self.signs():
            # The schedd records the annex for the master, which keeps its ad current:
            # this user may not write the pool's home.
            where = {"cloud": self.cloud.kind, "region": self.cloud.region, "group": self.cloud.scope}  # fmt: skip
            got = self.schedd().annex_token(name, expires=lease_end, record=where)
            return _Grant(got["token"], str(got["jti"]), got["trust_domain"], got["ca"])
        security = self._security()
        token = TokenIssuer(security, clock=self.clock).create(
            annex_identity(name, security.trust_domain),
            authz=["ADVERTISE_STARTD"],
            lifetime=max(1, int(lifetime)),
        )
        jti = StoredToken.read(token).claims.get("jti")
        return _Grant(token, str(jti), security.trust_domain, "")

    def _pool_identity(self, grant: Mapping[str, Any] | None) -> tuple[str, str]:
        """(trust domain, CA certificate) the instances trust: the schedd's answer's, or
        the pool's home's."""
        if grant is not None and all(grant.get(k) for k in _POOL_KEYS):
            return str(grant["trust_domain"]), str(grant["ca"])
        security = self._security()
        material = ensure_pool_security(security)
        return security.trust_domain, material.ca.cert.read_text()

    def _boot(self, spec: AnnexSpec, lease_end: float, pool: str,
              grant: Mapping[str, Any] | None = None) -> str:  # fmt: skip
        trust_domain, ca = self._pool_identity(grant)
        settings = {
            **self.cloud.boot_settings(spec.name),
            "annex": spec.name,
            "pool": pool,
            "trust_domain": trust_domain,
            "ca": ca,
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
        # The token first: a refusal (the schedd's) leaves nothing made in the cloud.
        minted = self._mint(spec.name, now, lease_end) if spec.join else None
        # From here on the lease function ends whatever is made.
        self.cloud.start_lease(spec.name, spec.owners[0], lease_end)
        self.cloud.put(spec.name, "lease", str(int(lease_end)))
        tokens: list[str] = []
        grant: dict[str, str] = {}
        if minted is not None:
            self.cloud.put(spec.name, "token", minted.token, secure=True, expires=lease_end)
            tokens.append(minted.jti)
            if minted.ca:
                grant = {"trust_domain": minted.trust_domain, "ca": minted.ca}
        self._save(spec, pool, spec.count + spec.slots, tokens, grant)
        warnings = self._remember(spec.name)
        if spec.join and not self.pool:
            warnings += _unreachable(pool)
        ids = tuple(self._request(spec, lease_end, pool, grant))
        return Created(spec.name, lease_end, ids, warnings)

    def _remember(self, name: str) -> tuple[str, ...]:
        """Record the annex for the master, which keeps the ads of the annexes recorded
        in the pool's home current (a warning if this user may not write there)."""
        from htgrid.annex.keep import Record, remember

        record = Record(name, self.cloud.region, self.pool or "", self.cloud.kind, self.cloud.scope)
        if not self.signs():
            return ()  # the schedd recorded it with the annex's token
        try:
            remember(self.home, record)
        except PermissionError:
            return (
                f"the pool's master will not refresh annex {name}'s ad (its home is not "
                "yours to write): `htgrid annex status` shows the annex",
            )
        return ()

    def _save(self, spec: AnnexSpec, pool: str, requested: int, tokens: list[str],
              grant: Mapping[str, str] | None = None) -> None:  # fmt: skip
        settings = asdict(spec)
        settings.update(owner=spec.owners[0], pool=pool, requested=requested, tokens=tokens)
        settings.update(grant or {})
        for gone in ("count", "slots", "lifetime", "expiry", "user_data"):
            settings.pop(gone, None)
        self.cloud.put(spec.name, "config", json.dumps(settings, sort_keys=True))

    def _request(self, spec: AnnexSpec, lease_end: float, pool: str,
                 grant: Mapping[str, Any] | None = None) -> list[str]:  # fmt: skip
        if spec.join:
            user_data = self._boot(spec, lease_end, pool, grant)
        else:
            user_data = spec.user_data or ""
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
        spec = _spec_of(settings, count, slots)
        requested = int(settings.get("requested", 0)) + count + slots
        grant = {k: str(settings[k]) for k in _POOL_KEYS if settings.get(k)}
        tokens = list(settings.get("tokens", []))
        self._save(spec, str(settings.get("pool", "")), requested, tokens, grant)
        return Created(
            name, lease_end, tuple(self._request(spec, lease_end, str(settings["pool"]), grant))
        )

    def extend(self, name: str, *, lifetime: float | None = None,
               expiry: float | None = None) -> float:  # fmt: skip
        """A new lease end (now + lifetime, or expiry): a token that lasts as long, the
        cloud's rule, then the instances' copies."""
        now = self.clock()
        old = self._lease(name)
        if old <= now:
            raise AnnexUsageError(f"annex {name}'s lease has ended: it is being shut down")
        new = expiry if expiry is not None else now + (lifetime or 0)
        if new <= now:
            raise AnnexUsageError("the new lease end is in the past")
        settings = self._settings(name)
        # The token first: a refusal (the schedd's) leaves the lease as it was.
        minted = self._mint(name, now, new) if settings.get("join", True) else None
        self.cloud.move_lease(name, new)
        self.cloud.put(name, "lease", str(int(new)))
        if minted is not None:
            self.cloud.put(name, "token", minted.token, secure=True, expires=new)
            settings["tokens"] = [*settings.get("tokens", []), minted.jti]
            self.cloud.put(name, "config", json.dumps(settings, sort_keys=True))
        return new

    def shutdown(self, name: str) -> dict[str, Any]:
        """End the annex now: requests cancelled, instances terminated, token revoked."""
        settings = self._settings(name) if self.cloud.lease_of(name) is not None else {}
        done = self.cloud.end(name)
        if not settings and not done["terminated"] and not done["cancelled"]:
            raise AnnexNotFound(f"no annex {name!r} in {self.cloud.region}")
        if settings.get("join", True) and not self.signs():
            self.schedd().annex_revoke(name)
        else:
            revoked = RevocationList(self._security().revocation_file)
            for jti in settings.get("tokens", []):
                revoked.add(str(jti), f"annex {name} shut down")
        self._invalidate(name)
        from htgrid.annex.keep import forget

        forget(self.home, name)
        return done

    def describe(self, name: str | None = None) -> list[CloudAnnex]:
        return self.cloud.describe(name)

    def restore(self, annexes: Sequence[CloudAnnex]) -> list[CloudAnnex]:
        """Replace what the cloud ended of `annexes` before their leases (`_replace`);
        the annexes with what was replaced counted."""
        if not isinstance(self.cloud, AwsAnnexes):
            return list(annexes)
        now = self.clock()
        out = []
        for annex in annexes:
            done: set[str] = set()
            if annex.lease_end - now >= MIN_LEASE:
                for part in lost(annex, REPLACE_BATCH):
                    try:
                        self._replace(annex, part)
                    except (AnnexError, ValueError) as exc:
                        _log.warning("annex %s: cannot replace %s: %s", annex.name, part, exc)
                        break
                    done.update(part.replaces)
            out.append(replace(annex, replaced=annex.replaced | done) if done else annex)
        return out

    def _replace(self, annex: CloudAnnex, part: Lost) -> None:
        settings = dict(annex.settings)
        if part.count:
            settings["spot_price"] = None
        spec = _spec_of(settings, part.count, part.slots)
        grant = {k: str(settings[k]) for k in _POOL_KEYS if settings.get(k)}
        pool = str(settings.get("pool", ""))
        user_data = self._boot(spec, annex.lease_end, pool, grant) if spec.join else ""
        assert isinstance(self.cloud, AwsAnnexes)
        ids = self.cloud.request(spec, user_data, annex.lease_end, part.replaces)
        _log.info("annex %s: %s replaced by %s", annex.name, " ".join(part.replaces), ids)

    # ---- ads ------------------------------------------------------------------------

    def ads(self, name: str | None = None, *, publish: bool = True) -> list[ClassAd]:
        """The annex ads, from one refresh of the cloud and the pool (and published)."""
        annexes = self.restore(self.describe(name))
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
        annexes = self.restore([a for a in self.describe() if a.name in names])
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
