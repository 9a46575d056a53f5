"""A job held or removed while it runs on a node of another host: the request that stops
it there, lost on its way (the node's broker connection dropped as it went, say), is
made again while the node's keep-alives are answered; the job is not taken as
disconnected (022), nor its stop put off by the reconnection's backoff. A node whose
keep-alives go unanswered is disconnected, as before. The time is the test's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import htgrid.schedd._shadow_run as shadow_module
from htgrid.classad import ClassAd
from htgrid.queue import JobId
from htgrid.schedd._leases import NodeLink
from htgrid.schedd._shadow_base import ShadowSettings, StopReason, Unreachable
from htgrid.startd import (
    ClaimState,
    ClaimStatus,
    Outcome,
    OutcomeKind,
    StartdError,
    StartdUnavailable,
)

_LOST = "no execute node is registered with this broker as 'node5' (it is reconnecting)"


class _Manager:
    def __init__(self) -> None:
        self.settings = ShadowSettings("schedd", Path("/nonexistent"), alive_interval=2)
        self.clock = 1000.0
        self.events: list[str] = []

    def now(self) -> float:
        return self.clock

    def monotonic(self) -> float:
        return self.clock

    async def disconnected(self, run: Any, why: str, reason: str, deadline: float) -> None:
        self.events.append("022")


class _Node:
    """Loses the first `lost` vacate requests, then stops the job; its one poll says the
    job's end once it was stopped."""

    where = "<127.0.0.5:9618?CCBID=127.0.0.1:9618#node5>"

    def __init__(self, lost: int) -> None:
        self.lost = lost
        self.vacates: list[str] = []

    async def vacate(self, claim_id: str, reason: str = "vacate") -> ClaimStatus:
        self.vacates.append(reason)
        if len(self.vacates) <= self.lost:
            raise StartdUnavailable(f"no execute node answers at {self.where}: {_LOST}")
        return ClaimStatus(claim_id, "slot1_1@node5", ClaimState.VACATING, 3)

    async def watch(
        self, token: str, claims: dict[str, int], *, wait: float, seq: int | None = None
    ) -> dict[str, ClaimStatus | StartdError]:
        assert self.vacates, "polled before the job was told to stop"
        evicted = Outcome(OutcomeKind.EVICTED)
        return {
            c: ClaimStatus(c, "slot1_1@node5", ClaimState.ENDED, 4, outcome=evicted) for c in claims
        }


def _stop(
    monkeypatch: pytest.MonkeyPatch, node: _Node, *, down: bool = False
) -> tuple[_Manager, ClaimStatus | BaseException]:
    """Follow a running job told to stop (removed): its claim's end, or what ended it."""
    manager = _Manager()
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        manager.clock += delay  # the shadow's waits pass on the test's clock alone
        return await real_sleep(0, *args)

    monkeypatch.setattr(shadow_module.asyncio, "sleep", sleep)

    async def scenario() -> ClaimStatus | BaseException:
        job = ClassAd({"ClusterId": 1, "ProcId": 0, "JobLeaseDuration": 2400})
        run = shadow_module.ShadowRun(
            manager,  # type: ignore[arg-type]
            JobId(1, 0),
            job,
            node,  # type: ignore[arg-type]
            node.where,
            claim_id="claim",
        )
        run.link = NodeLink(node, node.where, manager.monotonic)  # type: ignore[arg-type]
        if down:  # its keep-alives unanswered for two intervals
            run.link.silent(manager.clock + 5, 4, "no answer")
        run.stop(StopReason.REMOVE)
        running = ClaimStatus("claim", "slot1_1@node5", ClaimState.RUNNING, 2, job="1.0")
        try:
            return await asyncio.wait_for(run._follow(job, running), 30)
        except (Unreachable, TimeoutError) as exc:
            return exc
        finally:
            await run.link.feed.close()

    return manager, asyncio.run(scenario())


def test_a_stop_request_lost_on_its_way_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    node = _Node(lost=2)
    manager, ended = _stop(monkeypatch, node)
    assert isinstance(ended, ClaimStatus), ended
    assert ended.state is ClaimState.ENDED and ended.outcome is not None
    assert ended.outcome.kind is OutcomeKind.EVICTED
    assert node.vacates == ["remove", "remove", "remove"]
    assert manager.events == []  # never disconnected: the node answered all along
    assert manager.clock == 1002.0  # asked again after a second each time, no backoff


def test_a_node_that_does_not_answer_its_keep_alives_is_disconnected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = _Node(lost=1)
    _, ended = _stop(monkeypatch, node, down=True)
    assert isinstance(ended, Unreachable), ended
    assert node.vacates == ["remove"]
