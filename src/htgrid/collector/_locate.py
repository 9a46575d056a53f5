"""Finding a schedd by name: its URL from the Scheduler ad in a pool's collector.

    url = locate_schedd("htgrid@pool-b", "127.0.0.1:9619")   # "https://127.0.0.1:40123"
    with ScheddClient.remote(url) as schedd: ...

As condor_q's `-name` and `-pool`: the pool defaults to this pool's collector
($HTGRID_COLLECTOR_HOST, else run/collector.address of $HTGRID_HOME), the name to the
pool's only (or first, by name) schedd. The collector is asked over TLS with this pool's
trusted CAs and the user's token of that pool (see `CollectorClient`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd, quote
from htgrid.collector._errors import CollectorError
from htgrid.collector.client import CollectorClient, default_pool
from htgrid.net import DaemonUnavailable

__all__ = [
    "ScheddLocation",
    "ScheddNotFound",
    "find_schedd",
    "find_schedd_async",
    "locate_schedd",
    "locate_schedd_async",
]

_PROJECTION: Final = ("Name", "HTGridURL", "MyAddress")


class ScheddNotFound(DaemonUnavailable):
    """The pool's collector names no such schedd, or none that can be reached over the
    network."""


@dataclass(frozen=True, slots=True)
class ScheddLocation:
    """A schedd found in a pool: its Name, URL, and the collector that named it."""

    name: str
    url: str  # https://host:port
    pool: str  # host:port of the collector

    @property
    def address(self) -> str:
        """host:port of the schedd's API."""
        return self.url.removeprefix("https://")


async def find_schedd_async(
    name: str | None, pool: str | None, *, home: str | os.PathLike[str] | None = None
) -> ScheddLocation:
    """`find_schedd` for a caller already in an event loop."""
    where = pool or default_pool(home)
    constraint = 'MyType == "Scheduler"' + (f" && Name == {quote(name)}" if name else "")
    try:
        async with CollectorClient(where, home=home, timeout=10.0) as collector:
            ads = await collector.query("Scheduler", constraint, list(_PROJECTION))
            others = (
                [] if ads or name is None else await collector.query("Scheduler", None, ["Name"])
            )
    except CollectorError as exc:
        wanted = f"the schedd {name!r}" if name else "a schedd"
        raise ScheddNotFound(f"cannot look up {wanted} in the pool at {where}: {exc}") from exc
    if not ads:
        if name is None:
            raise ScheddNotFound(f"the pool at {where} has no schedd (no Scheduler ad)")
        names = sorted(str(ad.get("Name")) for ad in others)
        has = f"it has: {', '.join(names)}" if names else "it has none"
        raise ScheddNotFound(f"no schedd named {name!r} in the pool at {where}; {has}")
    ad = min(ads, key=lambda a: str(a.get("Name", "")))
    return ScheddLocation(str(ad.get("Name")), _url_of(ad, where), where)


def _url_of(ad: ClassAd, where: str) -> str:
    url = ad.get("HTGridURL")
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ScheddNotFound(
            f"the schedd {ad.get('Name')!r} in the pool at {where} advertises no network "
            "address (HTGridURL): it answers on its local socket only"
        )
    return url.rstrip("/")


def find_schedd(
    name: str | None, pool: str | None, *, home: str | os.PathLike[str] | None = None
) -> ScheddLocation:
    """Schedd `name` (None: the only or first one) of the pool whose collector is at
    `pool` (host:port; None: this pool's); ScheddNotFound, saying what the pool has,
    otherwise."""
    import asyncio  # here: `htgrid q` and the like, run without -name, never need it

    return asyncio.run(find_schedd_async(name, pool, home=home))


async def locate_schedd_async(
    name: str | None, pool: str | None, *, home: str | os.PathLike[str] | None = None
) -> str:
    """`locate_schedd` for a caller already in an event loop."""
    return (await find_schedd_async(name, pool, home=home)).url


def locate_schedd(
    name: str | None, pool: str | None, *, home: str | os.PathLike[str] | None = None
) -> str:
    """The URL (`https://host:port`) of schedd `name` in the pool whose collector is at
    `pool` (see `find_schedd`)."""
    return find_schedd(name, pool, home=home).url
