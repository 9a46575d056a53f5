"""`htgrid q -better-analyze` for jobs the negotiator matches: vanilla jobs, and grid
jobs whose GridResource waits for a `$$()` macro (grid matchmaking).

The job's Requirements go clause by clause against the slot and site ads of the pool's
collector (the negotiator's own analysis, `htgrid.negotiator.analyze`), with what the
last negotiation cycle said (LastRejMatchReason). A pool with no ads yet (or no
collector answering) gets the plain explanation and the clauses with the job's values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from htgrid.classad import ClassAd
from htgrid.cli._analyze import _ANALYZERS, Analyzer, _vanilla, _wrap, register_analyzer
from htgrid.cli._common import format_date
from htgrid.collector import CollectorClient, CollectorError
from htgrid.negotiator.analyze import better_analyze

__all__ = ["install"]


class _Machines:
    """The pool's Machine ads, fetched once per analysis (one health answer)."""

    def __init__(self) -> None:
        self._health: Mapping[str, Any] | None = None
        self._ads: list[ClassAd] | None = None
        self.error = ""

    def of(self, health: Mapping[str, Any]) -> list[ClassAd] | None:
        if self._health is not health:
            self._health = health
            pool = health.get("collector")
            if isinstance(pool, str) and pool:
                self._ads, self.error = _fetch(pool)
            else:
                # A pool without a collector (DAEMON_LIST without COLLECTOR) has no
                # machines to match against; asking whatever answers on the default
                # port would analyse against somebody else's pool.
                self._ads, self.error = None, "this pool runs no collector"
        return self._ads


def _fetch(pool: str) -> tuple[list[ClassAd] | None, str]:
    async def query() -> list[ClassAd]:
        async with CollectorClient(pool, timeout=10.0) as client:
            return await client.query("Machine")

    try:
        return asyncio.run(query()), ""
    except CollectorError as exc:
        return None, str(exc)


_MACHINES = _Machines()


def _last_cycle(ad: ClassAd) -> list[str]:
    reason = ad.get("LastRejMatchReason")
    if not isinstance(reason, str):
        return []
    return [f"The last negotiation cycle ({format_date(ad.get('LastRejMatchTime'))}): {reason}."]


def _matchmaking(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
    machines = _MACHINES.of(health)
    if not machines:
        lines = _vanilla(ad, health)
        if _MACHINES.error:
            lines.insert(0, f"(The pool's collector does not answer: {_MACHINES.error})")
        return lines
    jid = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
    return [*_last_cycle(ad), "", *better_analyze(ad, machines, job_id=jid).splitlines()]


def install() -> None:
    """Explain idle vanilla jobs, and grid jobs waiting for a match, against the pool."""
    grid_before: Analyzer | None = _ANALYZERS.get(9)

    def grid(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
        resource = ad.get("GridResource")
        if isinstance(resource, str) and "$$(" in resource:
            head = _wrap(
                f"Its GridResource ({resource}) is filled in by grid matchmaking: the "
                "negotiator matches it to a grid site's ad, then the grid manager submits it."
            )
            return [*head, *_matchmaking(ad, health)]
        return grid_before(ad, health) if grid_before is not None else []

    if _ANALYZERS.get(5) is not _matchmaking:
        register_analyzer(5, _matchmaking)
        register_analyzer(9, grid)
