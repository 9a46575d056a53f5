"""The ends of the schedd's claims on one node of another host, over one long poll.

A shadow waits for its job's end on the node; with a long poll per claim, a node of ten
slots held ten polls of the schedd's, each an HTTPS request made again at every change
of its claim (a third of the schedd's work for short jobs). Here the shadows of one
node's claims share one poll (`StartdClient.watch`): it names the claims they wait on,
and the node answers it once one or more have ended, with all of those. A job activated
with the feed's token joins the poll waiting already, on the node; a shadow that waits
on a claim otherwise (one it reconnected to, or after a poll failed) has the feed ask
anew, the node then answering the older poll at once: an older poll on a connection cut
meanwhile may never be answered. A node that has no such poll (an older htgrid: the
request is not understood) has its claims polled one by one, as before (`supported`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Final

from htgrid.startd import (
    ClaimStatus,
    StartdClient,
    StartdError,
    StartdProtocolError,
    StartdUnavailable,
)

__all__ = ["ClaimFeed"]

#: How long a poll waits: the node's keep-alives are the link's, so it only waits for news.
LONG_POLL: Final = 300.0


class ClaimFeed:
    """One node's long poll for the ends of the schedd's claims there."""

    def __init__(self, client: StartdClient, *, wait: float = LONG_POLL) -> None:
        self.client = client
        self.token = secrets.token_urlsafe(24)  # sent only where the claim ids go
        self._wait = wait
        self._waiters: dict[str, tuple[int, asyncio.Future[ClaimStatus | None]]] = {}
        self._kicked = False  # ask anew: a claim the poll waiting may not follow
        self._wake: asyncio.Future[None] | None = None  # what `_run` waits on: one a turn
        self._seq = 0  # the polls', in the order they are made
        self._task: asyncio.Task[None] | None = None  # the one that polls for the waiters
        self._tasks: set[asyncio.Task[None]] = set()  # and those letting their polls go
        self.supported = True  # False: the node does not understand the poll

    async def ended(self, claim_id: str, version: int, *, activated: bool) -> ClaimStatus:
        """The claim once it is over (ENDED or RELEASED; the node's error when it is
        gone), `version` being the one known of it; `activated`: with this feed's token,
        since the claim's status was last heard."""
        future: asyncio.Future[ClaimStatus | None] = asyncio.get_running_loop().create_future()
        self.expect(claim_id, version, future, activated=activated)
        try:
            status = await future
        finally:
            self.forget(claim_id, future)
        assert status is not None  # only the caller's own wake-up leaves it None
        return status

    def expect(
        self,
        claim_id: str,
        version: int,
        future: asyncio.Future[ClaimStatus | None],
        *,
        activated: bool,
    ) -> None:
        """Have `future` set to the claim once it is over (as `ended`), unless done
        before (its caller may wake it with None for reasons of its own): no task of
        the caller's a wait, the poll's answer setting it. `forget` it after."""
        self._waiters[claim_id] = (version, future)
        if not activated:
            self._kick()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"claims of {self.client.where}")
            self._tasks.add(self._task)
            self._task.add_done_callback(self._tasks.discard)

    def forget(self, claim_id: str, future: asyncio.Future[ClaimStatus | None]) -> None:
        """`future` (`expect`'s) waits no more."""
        if self._waiters.get(claim_id, (0, None))[1] is future:
            del self._waiters[claim_id]
            if not self._waiters:
                self._kick()  # no one waits: the poll ends

    def _kick(self) -> None:
        self._kicked = True
        self._nudge()

    def _nudge(self, _: object = None) -> None:
        """Wake `_run` (a poll done, or a kick)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        polls: dict[asyncio.Task[dict[str, ClaimStatus | StartdError]], set[str]] = {}
        try:
            while self._waiters:
                if not polls or self._kicked:
                    self._kicked = False
                    named = {claim_id: v for claim_id, (v, _) in self._waiters.items()}
                    self._seq += 1
                    poll = asyncio.create_task(
                        self.client.watch(self.token, named, wait=self._wait, seq=self._seq)
                    )
                    poll.add_done_callback(self._nudge)
                    polls[poll] = set(named)
                # One future a turn, set by a poll's end or a kick: no task of its own.
                if not self._kicked and not any(poll.done() for poll in polls):
                    self._wake = asyncio.get_running_loop().create_future()
                    try:
                        await self._wake
                    finally:
                        self._wake = None
                for poll in [poll for poll in polls if poll.done()]:
                    self._deliver(poll, polls.pop(poll))
        finally:
            # A claim waited on from now on starts a task of its own: this one only lets
            # its polls go, which may take a while (one whose connection is being made
            # through a broker, say), and would not poll for a claim that came meanwhile.
            if self._task is asyncio.current_task():
                self._task = None
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)

    def _deliver(
        self, poll: asyncio.Task[dict[str, ClaimStatus | StartdError]], named: set[str]
    ) -> None:
        ended: dict[str, ClaimStatus | Exception]
        try:
            ended = dict(poll.result())
        except StartdProtocolError as exc:
            # An older node: its shadows fall back to a poll per claim, and retry.
            self.supported = False
            gone = StartdUnavailable(f"{self.client.where} has no node-wide poll: {exc}")
            ended = dict.fromkeys(named, gone)
        except Exception as exc:  # each waiter it named sees it, as its own poll's
            ended = dict.fromkeys(named, exc)
        for claim_id, result in ended.items():
            waiter = self._waiters.pop(claim_id, None)
            if waiter is None or waiter[1].done():
                continue
            if isinstance(result, ClaimStatus):
                waiter[1].set_result(result)
            else:
                waiter[1].set_exception(result)
