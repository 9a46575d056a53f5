"""A schedd killed after a node of another host took a job's activation and before it
recorded the start (the 001): the job is idle in the queue, its claim runs it. At the
next start the node says so; the start is recorded then (one 001) and the job
reconnected to, not run again; a claim never activated is ended as before; and a
second restart finds the job running and writes no second 001."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue import ChangeKind, Identity, JobId, JobQueue, JobStatus, StagedProcs
from htgrid.schedd._claims import ClaimBook, ClaimRecord, public_claim_id
from htgrid.schedd._shadow import ShadowManager
from htgrid.schedd._shadow_base import ShadowSettings
from htgrid.schedd._shadow_recover import recover_claims
from htgrid.schedd._worker import QueueWorker
from htgrid.startd import ClaimNotFound, ClaimState, ClaimStatus

USER = getpass.getuser()
NODE = "<127.0.0.9:9618>"
TOOK = "t" * 32  # the claim the node took job 1.0's activation on
CLAIMED = "c" * 32  # a claim of job 1.1, never activated


class _Node:
    """A node of another host as recovery asks it: what each claim runs; releases."""

    def __init__(self) -> None:
        self.released: list[str] = []

    async def status(self, claim_id: str, wait: float = 0, version: int = 0) -> ClaimStatus:
        if claim_id in self.released:
            raise ClaimNotFound(f"no claim {claim_id}")
        if claim_id == TOOK:
            return ClaimStatus(TOOK, "slot1_1@node9", ClaimState.RUNNING, 3, job="1.0")
        return ClaimStatus(CLAIMED, "slot1_2@node9", ClaimState.CLAIMED, 1)

    async def release(self, claim_id: str) -> None:
        self.released.append(claim_id)


def _submit(q: JobQueue, ad: ClassAd, procs: int) -> int:
    me = Identity(USER)
    cluster = q.reserve_cluster()
    with StagedProcs(cluster, ad, me, None) as staged:
        for _ in range(procs):
            staged.add(None)
        with q.transaction(me, reserved=cluster) as tx:
            tx.set_cluster_ad(tx.new_cluster(), ad)
            tx.add_staged(cluster, staged)
    return cluster


def _recover(spool: Path, node: _Node) -> tuple[list[Any], list[JobId]]:
    """One start-up's recovery: the runs it launched (not run), the jobs it requeued."""
    worker = QueueWorker(JobQueue.open(spool, fsync=False))
    manager = ShadowManager(worker, ShadowSettings("schedd@test", spool, fsync=False))
    launched: list[Any] = []
    manager.client = lambda address, pem: node  # type: ignore[method-assign,assignment,return-value]
    manager.launch = launched.append  # type: ignore[method-assign,assignment]

    async def run() -> list[JobId]:
        evicted = await recover_claims(manager)
        for _ in range(200):  # the claims ended in the background
            if not manager._settlers:
                break
            await asyncio.sleep(0.01)
        return evicted

    try:
        return launched, asyncio.run(run())
    finally:
        worker.close()


def test_a_start_the_node_took_is_recorded_at_restart_once(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    q = JobQueue.open(spool, fsync=False)
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": str(tmp_path), "Owner": USER})
    ad["JobLeaseDuration"] = 600
    assert _submit(q, ad, 2) == 1
    q.close()
    claims = ClaimBook(spool / "claims", fsync=False)  # as the daemon keeps them
    for claim, proc in ((TOOK, 0), (CLAIMED, 1)):
        claims.write(ClaimRecord(claim, JobId(1, proc), NODE, "pem", 600.0, 5.0))
    node = _Node()

    launched, evicted = _recover(spool, node)
    assert evicted == []
    assert [(run.job_id, run.claim_id) for run in launched] == [(JobId(1, 0), TOOK)]
    assert node.released == [CLAIMED]  # never activated: ended, its job idle still
    q = JobQueue.open(spool, fsync=False)
    try:
        job = q.get(JobId(1, 0))
        assert job["JobStatus"] == JobStatus.RUNNING and job["NumJobStarts"] == 1
        assert job["RemoteHost"] == "slot1_1@node9" and job["StartdIpAddr"] == NODE
        assert job["PublicClaimId"] == public_claim_id(TOOK)
        assert q.get(JobId(1, 1))["JobStatus"] == JobStatus.IDLE
    finally:
        q.close()

    # Killed again: the job runs on, found by its claim; no second start.
    launched, _ = _recover(spool, node)
    assert [(run.job_id, run.claim_id) for run in launched] == [(JobId(1, 0), TOOK)]
    q = JobQueue.open(spool, fsync=False)
    try:
        assert q.get(JobId(1, 0))["NumJobStarts"] == 1
        starts = [
            c
            for c in q.changes_since(0)
            if c.kind is ChangeKind.STATUS and c.status == JobStatus.RUNNING
        ]
        assert [c.job_ids for c in starts] == [[JobId(1, 0)]]  # the one 001
    finally:
        q.close()
