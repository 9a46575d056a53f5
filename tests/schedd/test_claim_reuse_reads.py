"""Claims whose jobs end at once share the idle jobs read for their next jobs: however
many they are, each finds one while idle jobs are left (with a read per claim, the
claims past the read's window found every job in it taken, and were given up, each
slot then waiting for a negotiation cycle), and a read serves many claims."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobId, JobQueue, StagedProcs
from htgrid.schedd._shadow import ShadowManager
from htgrid.schedd._shadow_base import ShadowSettings
from htgrid.schedd._worker import QueueWorker
from htgrid.startd import Resources

USER = getpass.getuser()
CLAIMS = 80  # more than a read per claim took in (64)
IDLE = 100


class _Claim:
    """What `next_job` reads of a shadow whose job ended: its job and its slot."""

    def __init__(self, proc: int) -> None:
        self.job_id = JobId(1000, proc)  # running: of another cluster
        self.job = ClassAd({"Owner": USER})
        self.slot_ad = ClassAd({"Cpus": 1, "Memory": 1024, "Disk": 1 << 20, "Requirements": True})
        self.resources = Resources(1, 1024, 1 << 20)
        self.start_seq = 1  # its job started


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


def test_claims_ending_at_once_each_find_a_next_job_from_shared_reads(tmp_path: Path) -> None:
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    ad = ClassAd(
        {
            "Cmd": "/bin/true",
            "JobUniverse": 5,
            "Iwd": str(tmp_path),
            "Owner": USER,
            "Requirements": True,
        }
    )
    manager = ShadowManager(worker, ShadowSettings("schedd@test", tmp_path / "spool"))
    claims = [_Claim(proc) for proc in range(CLAIMS)]
    shadows: dict[JobId, Any] = manager._shadows  # the claims' current (running) jobs
    shadows.update({claim.job_id: claim for claim in claims})

    async def scenario() -> tuple[list[JobId | None], int]:
        cluster = await worker.write(lambda q: _submit(q, ad, IDLE))
        assert cluster == 1
        # Every claim's job ends before any of them picks its next: each exit comes
        # with its read, made before the others took anything.
        reads = [manager.idle_scan(claim) for claim in claims]  # type: ignore[arg-type]
        results = [await worker.read(read) for read in reads]
        picked = []
        for claim, ads in zip(claims, results, strict=True):
            following = manager.next_job(claim, ads)  # type: ignore[arg-type]
            picked.append(None if following is None else following[0])
        # The next exits find jobs left in what was read: no read at all.
        later = [await worker.read(manager.idle_scan(claim)) for claim in claims[:10]]  # type: ignore[arg-type]
        return picked, sum(ads is not None for ads in later)

    try:
        picked, reads = asyncio.run(scenario())
    finally:
        worker.close()
    assert None not in picked, picked.count(None)
    assert len(set(picked)) == CLAIMS  # each job to one claim only
    assert reads == 0


def test_claims_ending_while_a_read_is_under_way_wait_for_it_rather_than_read_again(
    tmp_path: Path,
) -> None:
    # At a burst of ends, each claim read the same few hundred idle jobs again (a read
    # per claim, hundreds of ads each, all but one read thrown away): one read now, the
    # others' jobs taken from it once it came.
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    ad = ClassAd(
        {
            "Cmd": "/bin/true",
            "JobUniverse": 5,
            "Iwd": str(tmp_path),
            "Owner": USER,
            "Requirements": True,
        }
    )
    manager = ShadowManager(worker, ShadowSettings("schedd@test", tmp_path / "spool"))
    claims = [_Claim(proc) for proc in range(CLAIMS)]
    manager._shadows.update({claim.job_id: claim for claim in claims})  # type: ignore[misc]

    async def scenario() -> tuple[int, list[JobId | None]]:
        await worker.write(lambda q: _submit(q, ad, IDLE))
        reads = [manager.idle_scan(claim) for claim in claims]  # type: ignore[arg-type]
        # The first claim's read goes with its exit; the others' exits read nothing and
        # find no job yet: they wait for the read under way.
        first = asyncio.ensure_future(worker.read(reads[0]))
        rest = [await worker.read(read) for read in reads[1:]]
        waiting = [asyncio.ensure_future(manager.scanned(c)) for c in claims[1:]]  # type: ignore[arg-type]
        ads = await first
        await asyncio.gather(*waiting)
        picked = [manager.next_job(claims[0], ads)]  # type: ignore[arg-type]
        picked += [manager.next_job(claim, None) for claim in claims[1:]]  # type: ignore[arg-type]
        return sum(each is not None for each in [ads, *rest]), [
            None if p is None else p[0] for p in picked
        ]

    try:
        reads, picked = asyncio.run(scenario())
    finally:
        worker.close()
    assert reads == 1
    assert None not in picked, picked.count(None)
    assert len(set(picked)) == CLAIMS


def test_claims_left_without_a_job_read_no_more_until_a_job_is_idle_again(
    tmp_path: Path,
) -> None:
    # At the end of a run every idle job is some claim's: each claim ending then read
    # the same ~100 jobs (all taken) again, found none, and was let go. A read that
    # found all the owner's idle jobs stands until one is made idle (here: submitted).
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    ad = ClassAd(
        {
            "Cmd": "/bin/true",
            "JobUniverse": 5,
            "Iwd": str(tmp_path),
            "Owner": USER,
            "Requirements": True,
        }
    )
    manager = ShadowManager(worker, ShadowSettings("schedd@test", tmp_path / "spool"))
    claims = [_Claim(proc) for proc in range(IDLE + 20)]
    manager._shadows.update({claim.job_id: claim for claim in claims})  # type: ignore[misc]

    async def scenario() -> tuple[int, bool, list[int | None], bool, JobId | None]:
        await worker.write(lambda q: _submit(q, ad, IDLE))
        manager.follow_from(await worker.read(lambda q: q.last_seq))
        follower = asyncio.ensure_future(manager.run())
        ads = await worker.read(manager.idle_scan(claims[0], fresh=True))  # type: ignore[arg-type]
        picked = [manager.next_job(claims[0], ads)]  # type: ignore[arg-type]
        picked += [manager.next_job(claim, None) for claim in claims[1:]]  # type: ignore[arg-type]
        taken = sum(p is not None for p in picked)
        left = claims[-1]  # its job ended, no job for it: all are the others'
        exhausted = manager.exhausted(left)  # type: ignore[arg-type]
        again = [await worker.read(manager.idle_scan(c)) for c in claims[-5:]]  # type: ignore[arg-type]
        more = await worker.write(lambda q: _submit(q, ad, 1))
        for _ in range(500):  # the feed's follower hears of it
            if not manager.exhausted(left):  # type: ignore[arg-type]
                break
            await asyncio.sleep(0.01)
        still = manager.exhausted(left)  # type: ignore[arg-type]
        fresh = await worker.read(manager.idle_scan(left, fresh=True))  # type: ignore[arg-type]
        following = manager.next_job(left, fresh)  # type: ignore[arg-type]
        follower.cancel()
        assert following is None or following[0].cluster == more
        return (
            taken,
            exhausted,
            [None if a is None else len(a) for a in again],
            still,
            None if following is None else following[0],
        )

    try:
        taken, exhausted, again, still, following = asyncio.run(scenario())
    finally:
        worker.close()
    assert taken == IDLE
    assert exhausted and again == [None] * 5  # nothing read again
    assert not still and following is not None  # the new job found, by one read
