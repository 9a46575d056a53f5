"""An activation whose answer is lost (the node of another host stopped answering as it
was sent): the shadow asks the node what the claim runs. Taken: the start is recorded
then (001) and the job followed; not taken: the job never started (no 001), idle."""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import ChangeKind, Identity, JobId, JobQueue, JobStatus, StagedProcs
from htgrid.schedd._claims import started_on
from htgrid.schedd._shadow_base import NotStarted, ShadowSettings
from htgrid.schedd._shadow_files import InputTars
from htgrid.schedd._shadow_run import ShadowRun
from htgrid.startd import ClaimState, ClaimStatus, StartdUnavailable

USER = getpass.getuser()
CLAIM = "c" * 32
NODE = "<127.0.0.2:9620>"


class _Node:
    """A node whose answer to the activation is lost; then it says what the claim runs."""

    def __init__(self, took: bool) -> None:
        self.took = took
        self.asked = 0

    async def activate(self, claim_id: str, ad: ClassAd, *args: Any, **kw: Any) -> ClaimStatus:
        raise StartdUnavailable("the connection was reset")

    async def status(self, claim_id: str, *, wait: float = 0.0, version: int = -1) -> ClaimStatus:
        self.asked += 1
        if self.asked == 1:
            raise StartdUnavailable("no route to host")  # still away: asked again
        if self.took:
            return ClaimStatus(claim_id, "slot1_1@node2", ClaimState.RUNNING, 3, job="1.0")
        return ClaimStatus(claim_id, "slot1_1@node2", ClaimState.CLAIMED, 1)


class _Host:
    def __init__(self, q: JobQueue, spool: Path) -> None:
        self.q = q
        self.settings = ShadowSettings(
            "schedd@test", spool, alive_interval=1.0, lease=60.0, reconnect_factor=0.01
        )
        self.input_tars = InputTars()

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any:
        return fn(self.q)

    def now(self) -> float:
        return 1_000_000.0


def _started(q: JobQueue) -> list[ChangeKind]:
    return [
        c.kind
        for c in q.changes_since(0)
        if c.kind is ChangeKind.STATUS and c.status == JobStatus.RUNNING
    ]


@pytest.mark.parametrize("took", [True, False])
def test_a_lost_answer_is_asked_for_and_only_a_start_taken_is_recorded(
    tmp_path: Path, took: bool
) -> None:
    q = JobQueue.open(tmp_path / "spool", fsync=False)
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": str(tmp_path), "Owner": USER})
    ad["JobLeaseDuration"] = 60
    me = Identity(USER)
    cluster = q.reserve_cluster()
    with StagedProcs(cluster, ad, me, None) as staged:
        staged.add(None)
        with q.transaction(me, reserved=cluster) as tx:
            tx.set_cluster_ad(tx.new_cluster(), ad)
            tx.add_staged(cluster, staged)
    job = q.get(JobId(1, 0))
    node = _Node(took)
    host = _Host(q, tmp_path / "spool")
    run = ShadowRun(host, JobId(1, 0), job, node, NODE, claim_id=CLAIM)  # type: ignore[arg-type]
    run.start_attrs = started_on("slot1_1@node2", NODE, CLAIM, 1_000_000)
    try:
        if took:
            status = asyncio.run(run._activate(job))
            assert status.state is ClaimState.RUNNING and node.asked == 2
            assert q.get(JobId(1, 0))["RemoteHost"] == "slot1_1@node2"
            assert _started(q) == [ChangeKind.STATUS]  # its one 001
        else:
            with pytest.raises(NotStarted, match="did not take it"):
                asyncio.run(run._activate(job))
            assert q.get(JobId(1, 0))["JobStatus"] == JobStatus.IDLE
            assert _started(q) == []  # no 001
    finally:
        q.close()
