"""The schedd's one poll a node (`ClaimFeed`): the shadows of a node's claims share it,
a claim it may not follow has it ask anew, and a node without it (an older one) has
its claims polled one by one."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from htgrid.schedd._feed import ClaimFeed
from htgrid.startd import (
    ClaimNotFound,
    ClaimState,
    ClaimStatus,
    StartdClient,
    StartdError,
    StartdProtocolError,
    StartdUnavailable,
)


class _Node:
    """Answers each poll from the queue `answers` (an answer, or an error to raise); a
    poll cancelled ends once `let_go` is set (at once unless told otherwise)."""

    where = "127.0.0.9:9620"

    def __init__(self) -> None:
        self.polls: list[tuple[dict[str, int], int | None]] = []
        self.answers: asyncio.Queue[Any] = asyncio.Queue()
        self.let_go = asyncio.Event()
        self.let_go.set()

    async def watch(
        self, token: str, claims: dict[str, int], *, wait: float, seq: int | None = None
    ) -> dict[str, ClaimStatus | StartdError]:
        self.polls.append((dict(claims), seq))
        try:
            answer = await self.answers.get()
        except asyncio.CancelledError:
            await self.let_go.wait()
            raise
        if isinstance(answer, Exception):
            raise answer
        return cast(dict[str, ClaimStatus | StartdError], answer)


def _ended(claim_id: str) -> ClaimStatus:
    return ClaimStatus(claim_id, "slot1_1@node", ClaimState.ENDED, 5)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_the_ends_of_a_nodes_claims_come_over_one_poll() -> None:
    async def scenario() -> None:
        node = _Node()
        feed = ClaimFeed(cast(StartdClient, node))
        a = asyncio.create_task(feed.ended("claim-a", 3, activated=True))
        b = asyncio.create_task(feed.ended("claim-b", 4, activated=True))
        await _settle()
        assert node.polls == [({"claim-a": 3, "claim-b": 4}, 1)]  # one poll for both
        node.answers.put_nowait({"claim-a": _ended("claim-a"), "claim-b": ClaimNotFound("x")})
        assert (await a).state is ClaimState.ENDED
        with pytest.raises(ClaimNotFound):
            await b
        # A claim followed otherwise than from an activation with the token: ask anew.
        c = asyncio.create_task(feed.ended("claim-c", 1, activated=True))
        await _settle()
        d = asyncio.create_task(feed.ended("claim-d", 2, activated=False))
        await _settle()
        assert node.polls[1:] == [({"claim-c": 1}, 2), ({"claim-c": 1, "claim-d": 2}, 3)]
        node.answers.put_nowait({})  # the older poll, answered by the newer
        node.answers.put_nowait({"claim-c": _ended("claim-c"), "claim-d": _ended("claim-d")})
        assert {(await c).claim_id, (await d).claim_id} == {"claim-c", "claim-d"}
        await feed.close()

    asyncio.run(scenario())


def test_a_node_without_the_poll_has_its_claims_polled_one_by_one() -> None:
    async def scenario() -> None:
        node = _Node()
        feed = ClaimFeed(cast(StartdClient, node))
        waiting = asyncio.create_task(feed.ended("claim-a", 3, activated=True))
        await _settle()
        node.answers.put_nowait(StartdProtocolError("the execute node answered HTTP 404"))
        with pytest.raises(StartdUnavailable, match="no node-wide poll"):
            await waiting
        assert not feed.supported
        await feed.close()

    asyncio.run(scenario())


def test_a_claim_waited_on_while_the_last_poll_is_let_go_of_is_polled_for() -> None:
    # A job removed: its shadow stops waiting on the claim, the last waiter, and the feed
    # lets its poll go (a poll whose connection is being made through a broker takes a
    # while to); the node answers the vacate meanwhile and the shadow waits on the claim
    # again. That wait is polled for, or the removed job never leaves the queue.
    async def scenario() -> None:
        node = _Node()
        feed = ClaimFeed(cast(StartdClient, node))
        running = asyncio.create_task(feed.ended("claim-a", 3, activated=True))
        await _settle()
        node.let_go.clear()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await _settle()
        vacated = asyncio.create_task(feed.ended("claim-a", 4, activated=True))
        await _settle()
        assert node.polls == [({"claim-a": 3}, 1), ({"claim-a": 4}, 2)]
        node.let_go.set()
        node.answers.put_nowait({"claim-a": _ended("claim-a")})
        assert (await vacated).state is ClaimState.ENDED
        await feed.close()

    asyncio.run(scenario())
