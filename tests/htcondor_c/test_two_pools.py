"""HTCondor-C between two real pools on this machine: A's grid manager sends a job to B.

Pool B runs the queue and its collector (TLS + tokens); pool A runs the queue and the
grid manager, trusts B's CA and holds a user token of B (`_pools.two_pools`).
`remote_universe = local` makes B run the job itself, at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, wait_for

from ._pools import B_NAME, ad_of, b_jobs, submit


@pytest.mark.timeout(300)
def test_a_job_submitted_on_a_runs_on_b_and_comes_back(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    a, b = pools
    work = tmp_path / "work"
    job = submit(a, b, work)
    done = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=120,
        what="the job to complete on A",
    )
    assert done["ExitCode"] == 7
    assert (work / "out.txt").read_text() == "from A\n"
    assert "ran on" in (work / "err.txt").read_text()
    # The queue daemon writes 001 and 005 as it follows its change feed: soon after.
    log = wait_for(lambda: "005 (" in (text := (work / "job.log").read_text()) and text, what="005")
    events = [line[:3] for line in log.splitlines() if line[:3].isdigit()]
    assert events[:2] == ["000", "027"] and "001" in events and events[-1] == "005"
    remote = str(done["GridJobId"]).split()
    assert remote[:2] == ["condor", B_NAME]
    # B's copy ran there, and was let go once its output was back.
    b_job = wait_for(
        lambda: (ad := ad_of(b, remote[3])) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=30,
        what="B's copy in its history",
    )
    with b.client() as schedd:
        wait_for(lambda: not schedd.query(f"ClusterId == {remote[3].split('.')[0]}"), timeout=30)
    assert b_job["SubmitterGlobalJobId"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["down", "kill-9"])
def test_the_laptop_goes_away_while_the_job_runs_on_b(
    pools: tuple[PersonalPool, PersonalPool], tmp_path: Path, how: str
) -> None:
    """Submit on A, wait until B has the input, stop A (htgrid down, or kill -9 of its
    daemons), let the job run on B, start A again: the result comes back, exactly once."""
    a, b = pools
    work = tmp_path / "work"
    marker = tmp_path / "runs"
    body = "echo run >> $1\nsleep 3\ncat in.txt\nexit 7\n"
    job = submit(a, b, work, extra=f'+Remote_Arguments = "{marker}"\n', body=body)
    wait_for(lambda: any(ad.get("StageInFinish") for ad in b_jobs(b)), timeout=90, what="stage in")
    if how == "down":
        a.stop()
    else:
        a.kill()
    wait_for(
        lambda: any(ad.get("JobStatus") == JobStatus.COMPLETED for ad in b_jobs(b)),
        timeout=60,
        what="the job to finish on B while A is away",
    )
    a.start()
    done = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=120,
        what="the result back on A",
    )
    assert done["ExitCode"] == 7
    assert (work / "out.txt").read_text() == "from A\n"
    assert marker.read_text().split() == ["run"]  # ran once
    assert len(b_jobs(b)) == 1  # one remote copy, ever
