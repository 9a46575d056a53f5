"""A status answer longer than HTCondor's 500 KiB GAHP line: refused cleanly by default,
given whole with `--max-line` (how htgrid's grid manager starts it, so one request per
poll answers for all its jobs at a schedd)."""

from __future__ import annotations

from htgrid.classad import ClassAd

from ._wire import Wire
from .conftest import SCHEDD_NAME, RemotePool

JOBS = 400  # ~1.5 KiB an ad: ~600 KiB in one answer


def _queue_held_jobs(remote: RemotePool) -> int:
    with remote.pool.remote(remote.token) as schedd:
        cluster = schedd.reserve_cluster()
        ad = ClassAd(
            {
                "Cmd": "/bin/true",
                "JobUniverse": 12,
                "JobStatus": 5,
                "HoldReasonCode": 1,
                "HoldReason": "parked for the long-line test",
                "Environment": "PADDING=" + "x" * 1000,
            }
        )
        schedd.submit(cluster, ad, [ClassAd() for _ in range(JOBS)])
    return cluster


def test_a_status_answer_over_500_kib_needs_max_line(remote: RemotePool) -> None:
    cluster = _queue_held_jobs(remote)
    constraint = f"ClusterId == {cluster}"
    short = Wire(*remote.gahp_options("-s", SCHEDD_NAME))
    try:
        refused = short.call("CONDOR_JOB_STATUS_CONSTRAINED", SCHEDD_NAME, constraint)
    finally:
        short.close()
    # HTCondor's limit: the line is not written; the request fails, saying why.
    assert refused[0] == "F" and "limit" in refused[1], refused
    long = Wire(*remote.gahp_options("-s", SCHEDD_NAME, "--max-line", str(8 * 1024 * 1024)))
    try:
        answer = long.call("CONDOR_JOB_STATUS_CONSTRAINED", SCHEDD_NAME, constraint)
    finally:
        long.close()
    assert answer[:3] == ["S", "NULL", str(JOBS)]
    procs = sorted(int(ClassAd(text)["ProcId"]) for text in answer[3:])
    assert procs == list(range(JOBS))
