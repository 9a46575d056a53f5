"""What a negotiation cycle writes into the queue for the jobs it did not match: a job's
LastRejMatchReason when it changes, and nothing for a job told the same again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.negotiator import CycleResult, Rejection, negotiate
from htgrid.queue import Identity, JobId, JobQueue
from htgrid.schedd._negotiation import QueueJobs
from htgrid.schedd._worker import QueueWorker

T0 = 1_700_000_000
# The reasons HTCondor's negotiator gives (LastRejMatchReason).
NO_MATCH = "no match found"
SUBMITTER_LIMIT = "submitter limit exceeded"


class _NoShadows:
    busy: frozenset[JobId] = frozenset()


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[QueueWorker]:
    w = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    yield w
    w.close()


def test_a_cycle_writes_only_the_rejections_that_change(worker: QueueWorker) -> None:
    clock = [float(T0)]
    jobs = QueueJobs(worker, _NoShadows(), clock=lambda: clock[0])  # type: ignore[arg-type]
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Owner": "alice"})

    async def cycle(reasons: dict[JobId, str] | None = None) -> list[JobId]:
        """A cycle with no slot (every job: no match found, unless `reasons`); the
        jobs it changed in the queue."""
        seq = await worker.read(lambda q: q.last_seq)
        idle = await jobs.idle_jobs()
        result = negotiate(idle, [], now=clock[0])
        if reasons is not None:
            rejections = tuple(Rejection(j, "alice", r) for j, r in reasons.items())
            result = CycleResult((), rejections, (), 1, 0, 1, 0.0)
        await jobs.report(result)
        changes = await worker.read(lambda q: q.changes_since(seq))
        return [JobId(c.cluster, proc) for c in changes for proc in c.procs]

    async def scenario() -> None:
        cluster = await worker.write(lambda q: q.submit(Identity("alice"), ad, 3))
        ids = [JobId(cluster, proc) for proc in range(3)]
        assert await cycle() == ids  # each job told why, once
        for _ in range(2):
            clock[0] += 60
            assert await cycle() == []  # the same again: nothing written
        clock[0] += 60
        changed = await cycle({ids[0]: NO_MATCH, ids[1]: SUBMITTER_LIMIT, ids[2]: NO_MATCH})
        assert changed == [ids[1]]
        ads = await worker.read(lambda q: [q.get(j) for j in ids])
        assert [a["LastRejMatchReason"] for a in ads] == [NO_MATCH, SUBMITTER_LIMIT, NO_MATCH]
        assert [a["LastRejMatchTime"] for a in ads] == [T0, T0 + 180, T0]

    asyncio.run(scenario())
