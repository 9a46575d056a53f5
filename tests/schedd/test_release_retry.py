"""A claim whose job is over and whose node did not answer its release is asked again
in the background, less often each time, until the node answers or the claim's lease is
surely over: until then the claim holds the node's resources from every other job."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from htgrid.queue import JobId
from htgrid.schedd import _shadow_recover
from htgrid.schedd._claims import ClaimRecord
from htgrid.schedd._shadow_base import ShadowSettings
from htgrid.startd import StartdUnavailable

CLAIM = "c" * 32


class _Node:
    """A node that does not answer the first `silent` releases."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.asked = 0

    async def release(self, claim_id: str, **_: Any) -> None:
        self.asked += 1
        if self.asked <= self.silent:
            raise StartdUnavailable("the node at <127.0.0.2:9620> does not answer")


class _Claims:
    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def forget(self, claim_id: str) -> None:
        self.forgotten.append(claim_id)


class _Manager:
    def __init__(self, node: _Node, spool: Path) -> None:
        self.node = node
        self.settings = ShadowSettings("schedd@test", spool, alive_interval=1.0, lease=60.0)
        self.claims = _Claims()
        self.clock = 1_000.0

    def client(self, address: str, pem: str | None) -> _Node:
        return self.node

    def now(self) -> float:
        return self.clock


def _record(lease: float) -> ClaimRecord:
    return ClaimRecord(CLAIM, JobId(3, 0), "<127.0.0.2:9620>", "PEM", lease, 1.0)


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shadow_recover, "_SETTLE_RETRY", 0.01)


def test_a_release_the_node_did_not_answer_is_asked_again_until_it_is(tmp_path: Path) -> None:
    manager = _Manager(_Node(silent=3), tmp_path)
    node = manager.node
    asyncio.run(_shadow_recover.end_claim_later(manager, _record(600.0)))  # type: ignore[arg-type]
    assert node.asked == 4  # three unanswered, then released
    assert manager.claims.forgotten == [CLAIM]


def test_a_node_that_never_answers_is_let_go_once_the_claims_lease_is_over(
    tmp_path: Path,
) -> None:
    manager = _Manager(_Node(silent=10**6), tmp_path)

    async def scenario() -> None:
        asking = asyncio.create_task(_shadow_recover.end_claim_later(manager, _record(60.0)))  # type: ignore[arg-type]
        while manager.node.asked < 3:
            await asyncio.sleep(0.01)
        assert not asking.done()  # the lease is not over: asked again
        manager.clock += 60.0 + 1.0 + _shadow_recover.LEASE_MARGIN  # past lease and vacate
        await asyncio.wait_for(asking, 10)

    asyncio.run(scenario())
    assert manager.claims.forgotten == [CLAIM]  # its lease ended it on the node
