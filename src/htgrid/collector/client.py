"""Talking to a collector: advertise, invalidate and query ads over its HTTP API.

    async with CollectorClient("127.0.0.1:9618") as pool:
        await pool.advertise("UPDATE_STARTD_AD", [site_ad])
        machines = await pool.query("Machine", "Memory >= 4096", ["Name", "Memory"])

The pool is given as condor_status's `-pool` takes it (`host[:port]`, port 9618 by
default) or, when omitted, from the environment variable HTGRID_COLLECTOR_HOST.
Failures raise the collector's errors (`CollectorUnavailable` when nothing answers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from htgrid.classad import ClassAd, ExprTree
from htgrid.collector._errors import CollectorUnavailable, ProtocolError
from htgrid.collector._problems import from_problem
from htgrid.collector._store import UpdateResult
from htgrid.collector._types import AdType, Command
from htgrid.collector._wire import decode_ads, encode_ad, fragments, join_ads
from htgrid.errors import UsageError

__all__ = ["DEFAULT_PORT", "CollectorClient", "default_pool", "pool_url"]

DEFAULT_PORT = 9618


def default_pool() -> str:
    """The pool tools talk to when not told: HTGRID_COLLECTOR_HOST, else the collector
    of the personal pool in $HTGRID_HOME (its run/collector.address, written while it
    runs), else this host's port 9618."""
    explicit = os.environ.get("HTGRID_COLLECTOR_HOST")
    if explicit:
        return explicit
    home = os.environ.get("HTGRID_HOME") or os.path.expanduser("~/.htgrid")
    try:
        with open(os.path.join(home, "run", "collector.address"), encoding="utf-8") as f:
            written = f.read().strip()
    except OSError:
        written = ""
    return written or f"127.0.0.1:{DEFAULT_PORT}"


def pool_url(pool: str) -> str:
    """The base URL of a pool given as `host[:port]` (or already as an http URL)."""
    pool = pool.strip()
    if pool.startswith(("http://", "https://")):
        return pool.rstrip("/")
    host, sep, port = pool.rpartition(":")
    if not sep or "]" in port:  # no port, or a bare IPv6 address
        host, port = pool, str(DEFAULT_PORT)
    if not host or not port.isdigit():
        raise UsageError(f"not a pool address (host[:port]): {pool!r}")
    return f"http://{host}:{port}"


def _command_name(command: Command | str) -> str:
    return command.name if isinstance(command, Command) else command.strip().upper()


class CollectorClient:
    """An HTTP client of one collector."""

    def __init__(
        self,
        pool: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.pool = pool or default_pool()
        self._client = httpx.AsyncClient(
            base_url=pool_url(self.pool), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> CollectorClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._client.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise CollectorUnavailable(f"no collector answers at {self.pool} ({exc})") from None
        except httpx.TimeoutException:
            raise CollectorUnavailable(f"the collector at {self.pool} timed out") from None
        except httpx.TransportError as exc:
            raise CollectorUnavailable(
                f"cannot talk to the collector at {self.pool}: {exc}"
            ) from None
        if response.status_code >= 400:
            try:
                doc: object = response.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                doc = None
            raise from_problem(response.status_code, doc)
        return response

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            value = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"the collector's answer is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ProtocolError("the collector's answer is not a JSON object")
        return value

    async def health(self) -> dict[str, Any]:
        """The collector's status: version and how many ads of each type it holds."""
        return self._json(await self._request("GET", "/v1/health"))

    async def advertise(self, command: Command | str, ads: Sequence[ClassAd]) -> list[UpdateResult]:
        """Send `ads` with an UPDATE_* command; what became of each."""
        body = join_ads(encode_ad(fragments(ad)) for ad in ads)
        response = await self._request(
            "POST",
            f"/v1/updates/{_command_name(command)}",
            content=body.encode("utf-8"),
            headers={"content-type": "application/json"},
        )
        results = self._json(response).get("results")
        if not isinstance(results, list) or len(results) != len(ads):
            raise ProtocolError("the collector's answer does not account for every ad")
        return [
            UpdateResult(
                bool(r.get("accepted")), str(r.get("name") or ""), str(r.get("reason") or "")
            )
            for r in results
            if isinstance(r, dict)
        ]

    async def invalidate(self, command: Command | str, query: ClassAd) -> int:
        """Remove the ads `query` names (by Name, or by its Requirements); how many."""
        response = await self._request(
            "POST",
            f"/v1/invalidations/{_command_name(command)}",
            content=encode_ad(fragments(query)).encode("utf-8"),
            headers={"content-type": "application/json"},
        )
        count = self._json(response).get("invalidated")
        if type(count) is not int:
            raise ProtocolError("the collector did not say how many ads it removed")
        return count

    async def query(
        self,
        ad_type: AdType | str | None = None,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """The ads of `ad_type` (a MyType; all when None) for which `constraint` holds."""
        params: dict[str, str] = {}
        if ad_type is not None:
            params["type"] = ad_type.value if isinstance(ad_type, AdType) else ad_type
        if constraint:
            ExprTree(constraint)  # a syntax error is the caller's: raise it here, with a caret
            params["constraint"] = constraint
        if projection:
            params["projection"] = ",".join(projection)
        if limit is not None:
            params["limit"] = str(limit)
        response = await self._request("GET", "/v1/ads", params=params)
        return decode_ads(response.content)
