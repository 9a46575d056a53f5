"""The keep-alives of the schedd's claims on execute nodes of other hosts.

HTCondor renews a claim's lease (the job's JobLeaseDuration while it runs) by a
keep-alive per claim. Here one message a node per ALIVE_INTERVAL renews all the claims
the schedd holds there (`POST /v1/alive`), however many jobs run on it: a `NodeLink` per
node, its task sending them while the node has claims of ours.

The link is also how the schedd knows a node stopped answering: no answer for two
intervals and the node is down (its jobs' shadows disconnect, 022); the first answer
after that and it is up again (they reconnect, 023). A node is never declared dead
here: only its claims' leases tell when a job surely runs there no more. The link
also carries the node's one long poll for the ends of those claims (`ClaimFeed`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from htgrid.schedd._feed import ClaimFeed
from htgrid.startd import StartdClient, StartdError

__all__ = ["NodeLeases", "NodeLink"]

_log = logging.getLogger("htgrid.schedd.shadow")

_MISSED: Final = 2  # intervals without an answer before a node is taken as cut off


class NodeLink:
    """What the schedd knows of one node: its claims of ours, and whether it answers."""

    def __init__(self, client: StartdClient, where: str, monotonic: Callable[[], float]) -> None:
        self.client = client
        self.where = where
        self.claims: set[str] = set()
        self.feed = ClaimFeed(client)
        self.up = asyncio.Event()  # set while the node answers
        self.down = asyncio.Event()  # set while it does not
        self.up.set()
        self.heard = monotonic()  # the last answer
        # The shadows' waits to cut short once the node is taken as down (`silent`).
        self.waiting: set[asyncio.Future[Any]] = set()
        self.task: asyncio.Task[None] | None = None

    def answered(self, now: float) -> None:
        self.heard = now
        if self.down.is_set():
            _log.info("the execute node %s answers again", self.where)
            self.down.clear()
            self.up.set()

    def silent(self, now: float, limit: float, why: object) -> None:
        if self.up.is_set() and now - self.heard > limit:
            _log.warning(
                "the execute node %s has not answered for %.0f s (%s): its jobs are disconnected",
                self.where,
                now - self.heard,
                why,
            )
            self.up.clear()
            self.down.set()
            for waiting in self.waiting:
                if not waiting.done():
                    waiting.set_result(None)


class NodeLeases:
    """The links of one schedd to its nodes of other hosts, keyed by address."""

    def __init__(self, interval: float, *, monotonic: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._monotonic = monotonic
        self._links: dict[str, NodeLink] = {}

    def hold(self, client: StartdClient, where: str, claim_id: str) -> NodeLink:
        """Keep `claim_id` alive on the node at `where` from now on; the node's link."""
        link = self._links.get(where)
        if link is None or link.client is not client:
            link = self._links[where] = NodeLink(client, where, self._monotonic)
        link.claims.add(claim_id)
        if link.task is None or link.task.done():
            link.task = asyncio.create_task(self._keep(link), name=f"keep-alive {where}")
        return link

    def drop(self, link: NodeLink, claim_id: str) -> None:
        """`claim_id` is over (or left to the node's lease): no more keep-alives for it."""
        link.claims.discard(claim_id)

    async def close(self) -> None:
        tasks = [link.task for link in self._links.values() if link.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(link.feed.close() for link in self._links.values()))
        self._links.clear()

    async def _keep(self, link: NodeLink) -> None:
        """One keep-alive an interval for all the node's claims, while it has any."""
        while link.claims:
            sent = self._monotonic()
            try:
                unknown = await link.client.alive(
                    sorted(link.claims), timeout=self.interval, every=self.interval
                )
            except StartdError as exc:
                link.silent(self._monotonic(), _MISSED * self.interval, exc)
            else:
                link.answered(self._monotonic())
                if unknown:
                    # The shadows of those claims learn it from the node, as they ask.
                    _log.info("%s has %d claim(s) of ours no more", link.where, len(unknown))
            await asyncio.sleep(max(0.0, self.interval - (self._monotonic() - sent)))
        if self._links.get(link.where) is link:
            del self._links[link.where]
