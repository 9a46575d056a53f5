"""A grid job's X.509 proxy (x509userproxy) as the grid manager watches it.

Every grid type's job with a proxy is checked before it submits and after each status
poll: a proxy that expired, or that cannot be read, holds the job (HoldReasonCode 4,
CorruptedCredential), which then cancels its remote part as a user's hold does. A proxy
the user renewed in place (a later expiration in the same file) keeps the job going: the
file is read again whenever it changes (its size, mtime or inode), never more.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.client.x509 import ProxyError, read_proxy

__all__ = ["ProxyState", "ProxyWatch", "proxy_path"]


def proxy_path(ad: ClassAd) -> str | None:
    """The job's proxy file (x509userproxy, taken relative to Iwd), if it has one."""
    proxy = ad.get("x509userproxy")
    if not isinstance(proxy, str) or not proxy:
        return None
    iwd = ad.get("Iwd")
    if not os.path.isabs(proxy) and isinstance(iwd, str):
        proxy = os.path.join(iwd, proxy)
    return proxy


@dataclass(frozen=True, slots=True)
class ProxyState:
    """What the proxy file said when last read: its expiration, or why it is unusable."""

    expiration: int | None
    problem: str | None = None

    def hold_reason(self, now: float) -> str | None:
        """Why the job must be held now, if it must."""
        if self.problem is not None:
            return self.problem
        if self.expiration is not None and self.expiration <= now:
            return f"The job's X.509 proxy expired at {_utc(self.expiration)}"
        return None


def _utc(when: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


class ProxyWatch:
    """One job's proxy file, read again only when it changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self.state = ProxyState(None)

    async def check(self) -> ProxyState:
        """The proxy's state now (the file read off the event loop if it changed)."""
        self.state = await asyncio.to_thread(self._check)
        return self.state

    def _check(self) -> ProxyState:
        try:
            st = os.stat(self.path)
        except OSError as err:
            self._stamp = None
            return ProxyState(
                None, f"Cannot read the job's X.509 proxy {self.path}: {err.strerror}"
            )
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return self.state
        self._stamp = stamp
        try:
            info = read_proxy(self.path)
        except ProxyError as err:
            return ProxyState(None, f"The job's X.509 proxy is unusable: {err}")
        return ProxyState(info.expiration)
