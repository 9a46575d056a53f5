"""`explain_grid_job` for condor (HTCondor-C) jobs: what `htgrid q -better-analyze` says."""

from __future__ import annotations

import time
from typing import Any

from htgrid.classad import ClassAd
from htgrid.grid import explain_grid_job

RESOURCE = "condor Schedd-B@pool-b 127.0.0.1:9618"


def _ad(**attrs: Any) -> ClassAd:
    ad = ClassAd()
    base: dict[str, Any] = {"JobUniverse": 9, "GridResource": RESOURCE, "JobStatus": 1}
    for name, value in {**base, **attrs}.items():
        ad[name] = value
    return ad


def _submitted(**attrs: Any) -> ClassAd:
    return _ad(
        Managed="External",
        GridSubmitTag="htgrid_4_0_0123456789ab",
        GridJobId=f"{RESOURCE} 17.0",
        GridJobSubmitTime=1_700_000_000,
        **attrs,
    )


def test_a_condor_job_being_submitted_names_its_submit_tag() -> None:
    lines = explain_grid_job(_ad(Managed="External", GridSubmitTag="htgrid_4_0_0123456789ab"))
    assert lines[0] == f"Grid job for {RESOURCE!r}."
    assert lines[1].startswith("Being submitted with submit tag htgrid_4_0_0123456789ab")
    assert "the job id is not known yet" in lines[1]


def test_a_condor_job_waiting_for_its_stage_in() -> None:
    lines = explain_grid_job(_submitted())
    assert lines[1].startswith(f"Submitted to {RESOURCE!r} as job 17.0 at 2023-11-")
    assert lines[2] == (
        "No status from the remote schedd Schedd-B@pool-b (pool 127.0.0.1:9618) yet "
        "(it is polled periodically)."
    )
    assert any(line.startswith("Its input is staged in first") for line in lines)


def test_a_running_condor_job_says_where_and_until_when_its_lease_runs() -> None:
    expires = int(time.time()) + 3600
    lines = explain_grid_job(
        _submitted(
            JobStatus=2,
            GridJobStatus="RUNNING",
            LastRemoteStatusUpdate=1_700_000_100,
            RemoteHost="slot1@node7",
            JobLeaseDuration=2400,
            GridJobLeaseExpiration=expires,
        )
    )
    assert lines[2].startswith(
        "The remote schedd Schedd-B@pool-b (pool 127.0.0.1:9618) last reported it RUNNING"
    )
    assert "It runs there on slot1@node7." in lines
    lease = [line for line in lines if line.startswith("Its lease")]
    assert lease == [
        f"Its lease at the remote schedd runs until "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(expires))} (JobLeaseDuration "
        "2400 s); the grid manager renews it. Should the grid manager stay away past it, the "
        "remote schedd removes the job."
    ]


def test_an_expired_lease_says_the_remote_copy_is_gone() -> None:
    lines = explain_grid_job(_submitted(GridJobStatus="IDLE", GridJobLeaseExpiration=1_700_000_000))
    assert any(
        line.startswith("Its lease at the remote schedd expired at 2023-11-")
        and "the remote schedd has removed the job" in line
        for line in lines
    )


def test_removed_and_completed_condor_jobs_name_the_remote_job() -> None:
    removing = explain_grid_job(_submitted(JobStatus=3))
    assert removing[1].startswith("Removed: the grid manager cancels job 17.0; the job leaves")
    assert "once the remote schedd Schedd-B@pool-b (pool 127.0.0.1:9618) confirms" in removing[1]
    done = explain_grid_job(_submitted(JobStatus=4, ExitCode=7, RemoteWallClockTime=3.0))
    assert done[1] == "Completed as job 17.0: exit code 7 after 3 s of wall-clock time."
