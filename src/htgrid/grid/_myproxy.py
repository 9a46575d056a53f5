"""A grid job's X.509 proxy renewed from MyProxy before it expires (HTCondor's grid
manager did so until 9.12, through myproxy-get-delegation).

A job with MyProxyHost is renewed when its proxy has MyProxyRefreshThreshold seconds or
less left (default 4 hours): a new proxy of MyProxyNewProxyLifetime minutes (default 12
hours) is got from the server (`htgrid.client.myproxy`) with the password the schedd
kept (`htgrid.pool._myproxy`), for the user the job's Owner names and the credential
MyProxyCredentialName names, and written over the job's x509userproxy as its owner
(0600). Each grid type then delegates the renewed file again as it does when a user
renews it (ARC delegation, HTCondor-C's refresh, BLAH_JOB_REFRESH_PROXY). A refusal (a
wrong password, no such credential) holds the job; a server that cannot be reached is
tried again, and the proxy's own expiry holds the job in the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid._files import write_atomic
from htgrid._privsep import Account, as_owner
from htgrid.classad import ClassAd
from htgrid.client.myproxy import MyProxyError, MyProxyServer, get_delegation
from htgrid.client.x509 import ProxyError, read_proxy
from htgrid.grid._values import as_int, as_str
from htgrid.pool import read_myproxy_password
from htgrid.queue import JobId

__all__ = ["MyProxyRenewer", "MyProxySettings", "NoMyProxyPassword"]

log = logging.getLogger("htgrid.grid")

#: HTCondor's defaults: renew with 4 hours left, for 12 hours.
DEFAULT_THRESHOLD: Final = 4 * 3600
DEFAULT_LIFETIME_MINUTES: Final = 12 * 60
#: At least this long between two tries for one job (HTCondor's 30 s).
RETRY_AFTER: Final = 30.0


class NoMyProxyPassword(MyProxyError):
    """The job names a MyProxy server but was submitted without its password."""


@dataclass(frozen=True, slots=True)
class MyProxySettings:
    """A job's MyProxy attributes, read from its ad."""

    server: MyProxyServer
    credential_name: str | None
    #: Renew when the proxy has this many seconds left, or fewer.
    threshold: int
    #: The new proxy's lifetime, seconds.
    lifetime: int

    @classmethod
    def of(cls, ad: ClassAd) -> MyProxySettings | None:
        """The job's settings; None without MyProxyHost; MyProxyError if one is bad."""
        host = as_str(ad.get("MyProxyHost"))
        if not host:
            return None
        server = MyProxyServer.parse(host, as_str(ad.get("MyProxyServerDN")))
        threshold = _positive(ad, "MyProxyRefreshThreshold", DEFAULT_THRESHOLD)
        minutes = _positive(ad, "MyProxyNewProxyLifetime", DEFAULT_LIFETIME_MINUTES)
        name = as_str(ad.get("MyProxyCredentialName")) or None
        return cls(server, name, threshold, minutes * 60)

    def due(self, expiration: int, now: float) -> bool:
        return expiration - now <= self.threshold


def _positive(ad: ClassAd, name: str, default: int) -> int:
    if name not in ad:
        return default
    value = as_int(ad.eval(name))
    if value is None or value <= 0:
        raise MyProxyError(f"{name} = {ad.get(name)} is not a positive whole number")
    return value


class MyProxyRenewer:
    """Renews jobs' proxies; one renewal of a proxy file at a time (jobs may share one)."""

    def __init__(
        self,
        spool: Path,
        owner_of: Callable[[JobId], Account | None],
        *,
        ca_dir: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        """`spool`: the queue's directory, where the schedd keeps the passwords;
        `owner_of(job)`: the account whose rights the job's files are written with."""
        self._spool = spool
        self._owner_of = owner_of
        self._ca_dir = ca_dir
        self._timeout = timeout
        self._locks: dict[str, asyncio.Lock] = {}

    async def renew(
        self, job_id: JobId, ad: ClassAd, settings: MyProxySettings, path: str, now: float
    ) -> int:
        """Renew the proxy file `path` of job `job_id`; its new expiration. MyProxyRefused
        when the server says no, MyProxyError when it cannot be asked, NoMyProxyPassword."""
        lock = self._locks.setdefault(path, asyncio.Lock())
        async with lock:
            return await asyncio.to_thread(self._renew, job_id, ad, settings, path, now)

    def _renew(
        self, job_id: JobId, ad: ClassAd, settings: MyProxySettings, path: str, now: float
    ) -> int:
        password = read_myproxy_password(self._spool, job_id.cluster, job_id.proc)
        if password is None:
            raise NoMyProxyPassword(
                f"job {job_id} names MyProxy server {settings.server} but was submitted "
                "without its password (htgrid submit -p)"
            )
        owner = as_str(ad.get("Owner")) or ""
        with as_owner(self._owner_of(job_id)):
            current = _expiration(path)
            if current is not None and not settings.due(current, now):
                return current  # another job with the same file renewed it meanwhile
            # The proxy still valid is presented, as myproxy-get-delegation presented it.
            valid = current is not None and current > time.time() + 60
            pem = get_delegation(
                settings.server,
                owner,
                password,
                lifetime=settings.lifetime,
                credential_name=settings.credential_name,
                client_proxy=path if valid else None,
                ca_dir=self._ca_dir,
                timeout=self._timeout,
            )
            try:
                write_atomic(Path(path), pem, sync=True, mode=0o600)
            except OSError as err:
                raise MyProxyError(
                    f"cannot write the renewed proxy to {path}: {err.strerror or err}"
                ) from None
        return read_proxy(path, data=pem).expiration


def _expiration(path: str) -> int | None:
    try:
        return read_proxy(path).expiration
    except ProxyError:
        return None
