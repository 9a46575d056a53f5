"""`remote_universe = vanilla`: A's job runs on an execute node of pool B.

Pool B is a whole pool this time (queue, collector, negotiator, an execute node): B's
negotiator matches the remote copy once its input is staged, B's execute node runs it
in a sandbox of its own with the spooled input, and the output goes back to A.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, wait_for

from ._pools import ad_of, b_jobs, remote_id, submit


@pytest.mark.timeout(300)
def test_a_vanilla_job_runs_on_an_execute_node_of_b(
    pools_with_nodes: tuple[PersonalPool, PersonalPool], tmp_path: Path
) -> None:
    a, b = pools_with_nodes
    work = tmp_path / "work"
    body = 'cat in.txt\necho "sandbox $(pwd)" >&2\nexit 3\n'
    job = submit(a, b, work, body=body, universe="vanilla")
    done = wait_for(
        lambda: (ad := ad_of(a, job)) and ad.get("JobStatus") == JobStatus.COMPLETED and ad,
        timeout=180,
        what="the job to complete on A",
    )
    assert done["ExitCode"] == 3
    assert (work / "out.txt").read_text() == "from A\n"
    # It ran in a sandbox of B's execute node, not in B's spool (a local universe job's).
    sandbox = (work / "err.txt").read_text().split("sandbox ", 1)[1].strip()
    assert Path(sandbox).is_relative_to(b.home / "execute"), sandbox
    # B's copy was a vanilla job, matched and run by B's execute node.
    remote = wait_for(lambda: ad_of(b, remote_id(done)), what="B's copy")
    assert remote["JobUniverse"] == 5
    assert str(remote.get("LastRemoteHost") or remote.get("RemoteHost") or "").startswith("slot")
    assert len(b_jobs(b)) == 1
