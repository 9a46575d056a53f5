"""The event log writer's memory does not grow with the jobs it has written events for:
a factory that makes its procs one at a time (a SUBMITTED change each) through tens of
thousands of jobs left the writer holding something per job (each proc's look-up a
constraint text of its own, which the ClassAd parser keeps), 8 KB a job in the daemon."""

from __future__ import annotations

import asyncio
import getpass
import tracemalloc
from pathlib import Path

import htcondor2

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobAction, JobId, JobQueue, StagedProcs
from htgrid.schedd._userlog import UserLogWriter
from htgrid.schedd._worker import QueueWorker

USER = getpass.getuser()
ME = Identity(USER)
PROCS = 3000


def test_writing_a_factorys_events_one_proc_at_a_time_keeps_memory_flat(tmp_path: Path) -> None:
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    writer = UserLogWriter(worker, tmp_path / "userlog.seq", "<host>")
    ad = ClassAd(
        {
            "Cmd": "/bin/true",
            "JobUniverse": 5,
            "UserLog": "job.log",
            "Iwd": str(tmp_path),
            "Owner": USER,
            "JobMaterializeLimit": 1,
        }
    )

    def submit(q: JobQueue) -> int:
        cluster = q.reserve_cluster()
        with StagedProcs(cluster, ad, ME, None) as staged:
            for _ in range(PROCS):
                staged.add(None)
            with q.transaction(ME, reserved=cluster) as tx:
                tx.set_cluster_ad(tx.new_cluster(), ad)
                tx.add_staged(cluster, staged, factory=True)
        return cluster

    def remove(q: JobQueue, cluster: int, procs: range) -> None:
        for proc in procs:  # each leaves, and the factory makes the next in its place
            q.act(JobAction.Remove, [JobId(cluster, proc)], ME)

    async def run() -> list[int]:
        cluster = await worker.write(submit)
        sizes = []
        for start in range(0, PROCS, 250):
            await worker.write(lambda q, s=start: remove(q, cluster, range(s, s + 250)))
            await writer.catch_up()
            sizes.append(tracemalloc.get_traced_memory()[0])
        return sizes

    tracemalloc.start()
    try:
        sizes = asyncio.run(run())
    finally:
        tracemalloc.stop()
        worker.close()
    events = list(htcondor2.JobEventLog(str(tmp_path / "job.log")).events(stop_after=0))
    assert sum(int(e.type) == 9 for e in events) == PROCS  # every job's 000 and 009 written
    assert sum(int(e.type) == 0 for e in events) == PROCS
    # After the first thousand (caches of a bounded size filling), what is held stays.
    growth = sizes[-1] - sizes[3]
    assert growth < 1_500_000, [s // 1000 for s in sizes]
