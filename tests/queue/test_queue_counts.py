"""`JobQueue.count_jobs`: jobs by status and an attribute, as a scan of every ad counts
them, though it reads a job's own attributes only when they set or hide the attribute."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobAction, JobId, JobQueue

ALICE = Identity("alice")


def scanned(q: JobQueue, by: str) -> Counter[tuple[int, Any]]:
    return Counter((ad["JobStatus"], ad.get(by)) for ad in q.query(None, ["JobStatus", by]))


def submit(q: JobQueue, cluster_ad: dict[str, Any], procs: list[dict[str, Any]]) -> list[JobId]:
    with q.transaction(ALICE) as tx:
        cluster = tx.new_cluster()
        tx.set_cluster_ad(cluster, ClassAd({"Owner": "alice", "Cmd": "/bin/true", **cluster_ad}))
        return [tx.new_proc(cluster, ClassAd(proc)) for proc in procs]


def test_counts_match_a_scan_of_every_ad(tmp_path: Path) -> None:
    q = JobQueue.open(tmp_path, fsync=False)
    try:
        local = submit(q, {"JobUniverse": 12, "JobStatus": 1}, [{}, {}, {}])
        q.act(JobAction.Hold, local[1], ALICE)
        # A proc of its own universe, and one whose string mentions the name.
        submit(
            q,
            {"JobUniverse": 5, "JobStatus": 1},
            [{}, {"JobUniverse": 12}, {"Note": 'a "JobUniverse" of its own? no'}],
        )
        # Born held for their input with the hold reasons in the cluster ad, as an
        # HTCondor-C batch is: a release hides the cluster's HoldReasonCode.
        spooled = submit(
            q,
            {"JobUniverse": 12, "JobStatus": 5, "HoldReasonCode": 16, "HoldReason": "Spooling"},
            [{}, {}, {}, {}],
        )
        q.input_staged(spooled[:2], ALICE, {"StageInFinish": 1}, "Data files spooled")

        by_universe = q.count_jobs("JobUniverse")
        assert by_universe == scanned(q, "JobUniverse")
        assert by_universe == Counter({(1, 12): 2 + 1 + 2, (5, 12): 1 + 2, (1, 5): 2})
        by_code = q.count_jobs("HoldReasonCode")
        assert by_code == scanned(q, "HoldReasonCode")
        assert by_code[5, 16] == 2  # still held for their input
        assert by_code[1, None] == 2 + 3 + 2  # released: no HoldReasonCode, hidden
        assert q.count_jobs("NoSuchAttribute") == Counter({(1, None): 7, (5, None): 3})
    finally:
        q.close()
