"""A restarted schedd reconnecting to a job on a reused claim of a node of another host
checks which job the claim ran: the next job's activation carries the claim's reuse, so
a schedd killed after it recorded the next job's start, before that activation, finds
the claim still ENDED for the last job. That end is not the next job's: the claim never
ran it, so it goes back to idle, to run once, elsewhere or later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue import JobId, JobQueue
from htgrid.schedd._shadow_base import ShadowSettings
from htgrid.schedd._shadow_run import ShadowRun
from htgrid.startd import ClaimState, ClaimStatus, Outcome, OutcomeKind

CLAIM = "c" * 32


class _Node:
    """A node's client whose claim ended a job (`ran`) and waits for the schedd."""

    def __init__(self, ran: str) -> None:
        self.ran = ran
        self.released: list[str] = []
        self.idle: list[bool] = []  # each release's: no job ran on the claim then

    async def status(self, claim_id: str, *, wait: float = 0.0, version: int = -1) -> ClaimStatus:
        outcome = Outcome(OutcomeKind.EXITED, exit_code=0)
        return ClaimStatus(
            claim_id, "slot1_1@node2", ClaimState.ENDED, 7, False, outcome, None, self.ran
        )

    async def release(self, claim_id: str, *, idle: bool = False) -> None:
        self.released.append(claim_id)
        self.idle.append(idle)

    async def reuse(self, claim_id: str) -> ClaimStatus:  # the code before this change
        return ClaimStatus(claim_id, "slot1_1@node2", ClaimState.CLAIMED, 8)


class _Host:
    """The shadow manager, recording what the shadow asked of it."""

    def __init__(self, spool: Path) -> None:
        self.settings = ShadowSettings("schedd@test", spool, alive_interval=1.0, lease=60.0)
        self.writes: list[str] = []
        self.given_up: list[str] = []
        self.reconnects = 0
        self.forgotten = 0

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any:
        self.writes.append(getattr(fn, "__name__", repr(fn)))
        return "completed", []

    async def record_claim(self, run: ShadowRun) -> None:
        pass

    async def forget_claim(self, run: ShadowRun) -> None:
        self.forgotten += 1

    def hold_lease(self, run: ShadowRun) -> None:
        pass

    def drop_lease(self, run: ShadowRun) -> None:
        pass

    async def disconnected(self, run: ShadowRun, why: str, reason: str, deadline: float) -> None:
        pass

    async def reconnected(self, run: ShadowRun) -> None:
        self.reconnects += 1

    async def gave_up(self, run: ShadowRun, reason: str) -> None:
        self.given_up.append(reason)

    def idle_scan(self, run: ShadowRun) -> Callable[[JobQueue], list[ClassAd]]:
        return lambda q: []

    def next_job(self, run: ShadowRun, ads: list[ClassAd]) -> None:
        return None

    def now(self) -> float:
        return 1_000_000.0

    def monotonic(self) -> float:
        return 1_000.0

    def failed(self, failure: object) -> None:
        raise AssertionError(f"the shadow failed: {failure}")


def _reconnect(tmp_path: Path, ran: str) -> tuple[_Host, _Node]:
    host, node = _Host(tmp_path / "spool"), _Node(ran)
    job = ClassAd({"ClusterId": 3, "ProcId": 1, "Owner": "u", "JobStatus": 2})
    run = ShadowRun(host, JobId(3, 1), job, node, "<127.0.0.2:9620>", claim_id=CLAIM)  # type: ignore[arg-type]
    asyncio.run(run.run())
    return host, node


def test_a_claim_still_ended_for_the_last_job_gives_the_next_one_back_to_idle(
    tmp_path: Path,
) -> None:
    host, node = _reconnect(tmp_path, ran="3.0")
    assert host.given_up == ["Job not found at execution machine"]
    assert host.reconnects == 0 and host.writes == []  # no exit recorded for job 3.1
    assert node.released == [CLAIM] and host.forgotten == 1
    assert node.idle == [False]  # a run given up on may still be running there


def test_a_claim_that_ended_the_job_itself_is_followed_to_its_exit(tmp_path: Path) -> None:
    host, node = _reconnect(tmp_path, ran="3.1")
    assert host.given_up == [] and host.reconnects == 1
    assert host.writes == ["record_and_scan"]  # its exit, recorded once
    assert node.released == [CLAIM]
    # Its job over, the claim's release is answered at once: a short request, sent over
    # a kept connection (`StartdClient.release`).
    assert node.idle == [True]
