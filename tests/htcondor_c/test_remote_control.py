"""What A's user does to a job that runs on B, and what B does when A is gone for good.

`htgrid rm` on A removes B's copy (its process ends, it leaves B's queue); a job whose
submitter stops renewing its lease (JobLeaseDuration) is removed by B once the lease
expires, and A, when it comes back, holds its job saying so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._pools import ad_of, alive, b_jobs, in_queue, remote_id, submit

# A job that says where it runs (its pid, in the file named by its argument) and lasts.
LONG_JOB = "echo $$ > $1\nexec sleep 600\n"


def _running_on_b(a: PersonalPool, b: PersonalPool, job: str, pid_file: Path) -> tuple[str, int]:
    """Wait until A's `job` runs on B; (B's job id, the job's pid there)."""
    ad = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.RUNNING and ad,
        timeout=90,
        what="the job to run on B (as A sees it)",
    )
    remote = remote_id(ad)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the job's pid")
    return remote, int(pid_file.read_text())


@pytest.mark.timeout(300)
def test_rm_on_a_removes_the_job_on_b(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    a, b = pools
    pid_file = tmp_path / "pid"
    job = submit(
        a, b, tmp_path / "work", extra=f'+Remote_Arguments = "{pid_file}"\n', body=LONG_JOB
    )
    remote, pid = _running_on_b(a, b, job, pid_file)
    assert alive(pid)

    status, _, err = run_cli(a.home, "rm", job)
    assert status == 0, err

    # B's copy is removed: its process ends and it leaves B's queue, Removed.
    wait_for(lambda: not alive(pid), timeout=60, what="the job's process on B to end")
    wait_for(lambda: not in_queue(b, remote), timeout=30, what="B's copy to leave B's queue")
    b_ad = ad_of(b, remote)
    assert b_ad is not None and b_ad["JobStatus"] == JobStatus.REMOVED
    # And A's job, once B confirmed, leaves A's queue as removed jobs do.
    wait_for(lambda: not in_queue(a, job), timeout=60, what="A's job to leave A's queue")
    a_ad = ad_of(a, job)
    assert a_ad is not None and a_ad["JobStatus"] == JobStatus.REMOVED
    assert len(b_jobs(b)) == 1


@pytest.mark.timeout(300)
def test_b_removes_the_job_when_its_lease_expires_after_a_is_gone(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    a, b = pools
    pid_file = tmp_path / "pid"
    lease = 20  # condor_submit raises a shorter one to 20 s
    job = submit(
        a,
        b,
        tmp_path / "work",
        extra=f'job_lease_duration = {lease}\n+Remote_Arguments = "{pid_file}"\n',
        body=LONG_JOB,
    )
    local = ad_of(a, job)
    assert local is not None and local["JobLeaseDuration"] == lease
    remote, pid = _running_on_b(a, b, job, pid_file)
    b_ad = ad_of(b, remote)
    assert b_ad is not None and b_ad["JobLeaseDuration"] == lease
    # A renews the lease while it runs: it is renewed past the first expiration.
    first = int(b_ad["JobLeaseExpiration"])  # type: ignore[call-overload]
    wait_for(
        lambda: (ad := ad_of(b, remote)) and int(ad["JobLeaseExpiration"]) > first,  # type: ignore[call-overload]
        timeout=lease * 2,
        what="A to renew the lease",
    )

    a.kill()  # for good, as a laptop that never comes back

    wait_for(lambda: not in_queue(b, remote), timeout=lease * 4, what="B to remove its copy")
    gone = ad_of(b, remote)
    assert gone is not None and gone["JobStatus"] == JobStatus.REMOVED
    assert "lease expired" in str(gone["RemoveReason"])
    # Removed after the last expiration A had set, not before.
    assert int(gone["EnteredCurrentStatus"]) >= int(gone["JobLeaseExpiration"])  # type: ignore[call-overload]
    wait_for(lambda: not alive(pid), timeout=30, what="the job's process on B to end")

    # A comes back: its job is held, and says why.
    a.start()
    held = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.HELD and ad,
        timeout=60,
        what="A to hold its job",
    )
    assert "lease" in str(held["HoldReason"])
    assert len(b_jobs(b)) == 1
