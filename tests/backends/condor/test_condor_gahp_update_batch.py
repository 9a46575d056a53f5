"""Concurrent CONDOR_JOB_UPDATEs of one schedd setting the same attributes go as one edit
(how the grid manager lets finished remote jobs go), each request answered on its own."""

from __future__ import annotations

from pathlib import Path

from .conftest import RemotePool
from .test_condor_gahp_batch import run_together
from .test_condor_gahp_stage_out import completed_jobs

LET_GO = "[ LeaveJobInQueue = false ]"


def still_queued(remote: RemotePool, ids: list[str]) -> list[str]:
    """Those of `ids` still in the remote queue."""
    with remote.pool.remote(remote.token) as schedd:
        ads = schedd.query("true", ["ClusterId", "ProcId"])
    present = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads}
    return [job_id for job_id in ids if job_id in present]


def test_20_updates_setting_the_same_are_one_edit(remote: RemotePool, tmp_path: Path) -> None:
    ids, _ = completed_jobs(remote, tmp_path, 20)
    assert still_queued(remote, ids) == ids  # kept by LeaveJobInQueue

    priorities: list[str] = []
    results, sent = run_together(
        remote, "CONDOR_JOB_UPDATE", "update", [(job_id, LET_GO) for job_id in ids], priorities
    )

    assert results == [("S", "NULL")] * 20
    assert sent and set(sent) == {"POST /v1/jobs/edit"} and len(sent) <= 3, sent
    # Background work for the remote daemon (RFC 9218's lowest urgency): letting go of
    # finished jobs waits behind the jobs it is running.
    assert set(priorities) == {"u=7"}
    assert still_queued(remote, ids) == []  # all let go


def test_updates_of_a_missing_job_or_other_attributes_are_answered_alone(
    remote: RemotePool, tmp_path: Path
) -> None:
    ids, _ = completed_jobs(remote, tmp_path, 4)
    requests = [(job_id, LET_GO) for job_id in ids[:3]]
    requests += [("999999.0", LET_GO), (ids[3], '[ BatchNote = "kept" ]')]

    results, sent = run_together(remote, "CONDOR_JOB_UPDATE", "update", requests)

    assert results == [("S", "NULL")] * 3 + [("F", "Job not found"), ("S", "NULL")]
    assert still_queued(remote, ids) == [ids[3]]  # only the one told to go went
    with remote.pool.remote(remote.token) as schedd:
        assert schedd.get(ids[3])["BatchNote"] == "kept"
    # The edit naming the missing job was refused whole; then one edit a job.
    assert len(sent) <= 2 + 4 + 1, sent
