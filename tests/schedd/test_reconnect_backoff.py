"""A shadow's attempts to reconnect to a job on a node that does not answer back off as
HTCondor's shadow's do (RECONNECT_BACKOFF_FACTOR ** (attempts + 2) seconds, at most
RECONNECT_BACKOFF_CEILING), never past the job's lease; the time is the test's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import htgrid.schedd._shadow_run as shadow_module
from htgrid.classad import ClassAd
from htgrid.pool import CONFIG_NAME, KNOBS
from htgrid.queue import JobId
from htgrid.schedd import ScheddConfig
from htgrid.schedd._shadow_base import RESTARTED, GaveUp, ShadowSettings
from htgrid.startd import ClaimState, ClaimStatus, StartdError, StartdUnavailable

LEASE = 60  # the job's JobLeaseDuration; its JobMaxVacateTime is 10


class _Manager:
    """The shadow's manager, on the test's clock."""

    def __init__(self, settings: ShadowSettings) -> None:
        self.settings = settings
        self.clock = 1000.0
        self.events: list[tuple[str, Any]] = []

    def now(self) -> float:
        return self.clock

    def monotonic(self) -> float:
        return self.clock

    async def disconnected(self, run: Any, why: str, reason: str, deadline: float) -> None:
        self.events.append(("022", deadline - self.clock))

    async def reconnected(self, run: Any) -> None:
        self.events.append(("023", self.clock))

    async def gave_up(self, run: Any, reason: str) -> None:
        self.events.append(("024", reason))

    def drop_lease(self, run: Any) -> None:
        pass


class _Node:
    """A node that does not answer the first `silent` attempts (or answers them with
    `error`), then runs the job."""

    def __init__(self, manager: _Manager, silent: int, error: StartdError) -> None:
        self.manager, self.silent, self.error = manager, silent, error
        self.attempts: list[float] = []

    async def status(self, claim_id: str, **_: Any) -> ClaimStatus:
        self.attempts.append(self.manager.clock)
        if len(self.attempts) <= self.silent:
            raise self.error
        return ClaimStatus(claim_id, "slot1_1@node2", ClaimState.RUNNING, 7)


def _reconnect(
    monkeypatch: pytest.MonkeyPatch,
    silent: int,
    error: StartdError | None = None,
    **knobs: float,
) -> tuple[_Manager, _Node, ClaimStatus | None]:
    manager = _Manager(ShadowSettings("schedd", Path("/nonexistent"), **knobs))
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        manager.clock += delay  # the shadow's waits pass on the test's clock alone
        return await real_sleep(0, *args)

    monkeypatch.setattr(shadow_module.asyncio, "sleep", sleep)
    node = _Node(manager, silent, error or StartdUnavailable("connection refused"))
    job = ClassAd({"ClusterId": 1, "ProcId": 0, "JobLeaseDuration": LEASE})
    job["JobMaxVacateTime"] = 10
    run = shadow_module.ShadowRun(
        manager,  # type: ignore[arg-type]
        JobId(1, 0),
        job,
        node,  # type: ignore[arg-type]
        "<127.0.0.2:9618>",
        claim_id="claim",
    )
    lost: Callable[[str, str], Any] = run._lost

    async def attempt() -> ClaimStatus | None:
        try:
            status: ClaimStatus = await lost("the schedd restarted", RESTARTED)
        except GaveUp:
            return None
        return status

    return manager, node, asyncio.run(attempt())


def _waits(node: _Node) -> list[float]:
    return [b - a for a, b in zip(node.attempts, node.attempts[1:], strict=False)]


def test_the_attempts_back_off_by_htcondors_factor_and_reconnect_once_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager, node, status = _reconnect(monkeypatch, silent=3)
    assert status is not None and status.state is ClaimState.RUNNING
    # The first at once, then 2 ** 3, 2 ** 4, 2 ** 5 seconds.
    assert _waits(node) == [8, 16, 32]
    assert [e[0] for e in manager.events] == ["022", "023"]


def test_the_attempts_stop_at_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    manager, node, status = _reconnect(monkeypatch, silent=100)
    assert status is None
    # The lease, its vacate time and a margin: 75 s; the last wait is cut to end there.
    ((_, left),) = [e for e in manager.events if e[0] == "022"]
    assert left == 75
    assert _waits(node) == [8, 16, 32]  # 56 s in: the next would be past the lease
    assert manager.events[-1] == (
        "024",
        f"Job disconnected too long: JobLeaseDuration ({LEASE} seconds) expired",
    )
    assert manager.clock - node.attempts[0] == 75  # given up on at the lease's end


def test_the_ceiling_and_the_factor_are_the_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    _, node, status = _reconnect(monkeypatch, silent=4, reconnect_factor=1.5, reconnect_ceiling=6)
    assert status is not None
    # ceil(1.5 ** 3) = 4, ceil(1.5 ** 4) = 6, then the ceiling.
    assert _waits(node) == [4, 6, 6, 6]


def test_a_node_that_answers_is_asked_again_shortly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its claim being ended (its lease ran out there), say: no backoff, it is not
    unreachable, and it soon says the claim is gone."""
    busy = StartdError("claim's lease ran out: it is being ended")
    _, node, status = _reconnect(monkeypatch, silent=3, error=busy)
    assert status is not None
    assert _waits(node) == [1, 1, 1]


def test_the_knobs_are_htcondors_with_its_defaults(tmp_path: Path) -> None:
    assert (KNOBS["RECONNECT_BACKOFF_FACTOR"], KNOBS["RECONNECT_BACKOFF_CEILING"]) == (
        "2.0",
        "300",
    )
    default = ScheddConfig.load(tmp_path)
    assert (default.reconnect_factor, default.reconnect_ceiling) == (2.0, 300.0)
    (tmp_path / CONFIG_NAME).write_text(
        "RECONNECT_BACKOFF_FACTOR = 3\nRECONNECT_BACKOFF_CEILING = 60\n"
    )
    set_ = ScheddConfig.load(tmp_path)
    assert (set_.reconnect_factor, set_.reconnect_ceiling) == (3.0, 60.0)
