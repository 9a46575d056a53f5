"""Where a pool is: its collector's address as condor_status's `-pool` takes it."""

from __future__ import annotations

from typing import Final

from htgrid.errors import UsageError

__all__ = ["DEFAULT_PORT", "pool_url"]

#: The collector's port when a pool is named without one (HTCondor's).
DEFAULT_PORT: Final = 9618


def pool_url(pool: str) -> str:
    """The base URL of a pool given as `host[:port]`: `https://host:port` (an https URL
    is taken as it is). UsageError for anything else: collectors speak https only."""
    pool = pool.strip()
    if pool.startswith("https://"):
        return pool.rstrip("/")
    if pool.startswith("http://"):
        raise UsageError(f"the collector speaks https only, not {pool!r}")
    host, sep, port = pool.rpartition(":")
    if not sep or "]" in port:  # no port, or a bare IPv6 address
        host, port = pool, str(DEFAULT_PORT)
    if not host or not port.isdigit():
        raise UsageError(f"not a pool address (host[:port]): {pool!r}")
    return f"https://{host}:{port}"
