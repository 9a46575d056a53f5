"""`JobQueue.count_jobs`: jobs by status and an attribute, as a scan of every ad counts
them, though it reads a job's own attributes only when they set or hide the attribute."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import BatchCounts, Identity, JobAction, JobId, JobQueue

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


def batches_scanned(q: JobQueue, constraint: str | None) -> list[BatchCounts]:
    """`summarize` as the batch view once made it: from every matching job's ad."""
    found: dict[tuple[int, str, Any], dict[str, Any]] = {}
    for ad in q.query(constraint):
        name = ad.get("JobBatchName")
        key = (ad["ClusterId"], ad["Owner"], name if isinstance(name, str) else None)
        batch = found.setdefault(key, {"q": [], "t": [0], "procs": [], "counts": Counter()})
        if type(ad.get("QDate")) is int:
            batch["q"].append(ad["QDate"])
        if type(ad.get("TotalSubmitProcs")) is int:
            batch["t"].append(ad["TotalSubmitProcs"])
        batch["procs"].append(ad["ProcId"])
        batch["counts"][ad["JobStatus"]] += 1
    return [
        BatchCounts(
            c,
            o,
            n,
            min(b["q"], default=None),
            max(b["t"]),
            min(b["procs"]),
            max(b["procs"]),
            dict(b["counts"]),
        )
        for (c, o, n), b in sorted(
            found.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")
        )
    ]


CONSTRAINTS = [
    None,
    "true",
    'Owner == "alice"',
    'Owner == "ALICE" && JobStatus == 5',
    "JobStatus == 1 || JobStatus == 5",
    "ClusterId == 2 && ProcId >= 1",
    'Owner =?= "Alice"',  # identity: case counts
    "JobUniverse == 12",  # not SQL's: each ad evaluated
    'JobBatchName =?= "nightly" && JobStatus == 1',
]


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_batches_are_counted_as_every_ad_says(tmp_path: Path, constraint: str | None) -> None:
    q = JobQueue.open(tmp_path, fsync=False)
    try:
        batch = {"JobBatchName": "nightly", "QDate": 500, "TotalSubmitProcs": 4}
        first = submit(q, {"JobUniverse": 12, **batch}, [{}, {}, {}, {}])
        q.act(JobAction.Hold, first[1:3], ALICE)
        # Procs that say their own batch name, QDate and TotalSubmitProcs, or hide them.
        submit(
            q,
            {"JobUniverse": 5, **batch},
            [{}, {"JobBatchName": "other", "QDate": 400}, {"TotalSubmitProcs": 9}, {}],
        )
        third = submit(q, {"JobUniverse": 5, "QDate": 300}, [{}, {}, {"JobUniverse": 12}])
        q.edit([third[1]], {"QDate": "undefined"}, ALICE)
        q.act(JobAction.Remove, [first[3]], ALICE)  # leaves a gap in cluster 1
        counted = q.summarize(constraint)
        assert counted == batches_scanned(q, constraint)
        if constraint is None:
            assert sum(b.jobs for b in counted) == 10
            assert q.count_owners() == {"alice": {1: 8, 5: 2}}
    finally:
        q.close()
