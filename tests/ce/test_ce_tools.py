"""The CE's tools: `htgrid router_q` (condor_router_q) counts routed jobs per route and
state, and `htgrid q -better-analyze` of a job the CE does not route says which route
clause fails and with what values (job_router_info's explanation), not that no execute
node joined."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import SPECIAL, ce_pool, jobs


def submit(home: Path, work: Path, extra: str) -> str:
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sub").write_text(
        f"executable = /bin/sleep\narguments = 60\ninitialdir = {work}\n{extra}queue\n"
    )
    status, out, err = run_cli(home, "submit", str(work / "job.sub"))
    assert status == 0, err
    return f"{out.split('cluster')[-1].strip().rstrip('.')}.0"


@pytest.mark.timeout(300)
def test_router_q_counts_per_route_and_analyze_says_why_a_job_is_not_routed(
    tmp_path: Path,
) -> None:
    with ce_pool(tmp_path / "ce", SPECIAL) as ce:
        routed = submit(ce.home, tmp_path / "routed", '+queue = "special"\n')
        unrouted = submit(ce.home, tmp_path / "unrouted", '+queue = "short"\n')
        copy = wait_for(
            lambda: next(iter(jobs(ce, f'RoutedFromJobId == "{routed}"')), None),
            timeout=120,
            what="the routed copy",
        )
        status, out, err = run_cli(ce.home, "router_q", "-S")
        assert status == 0, err
        header, *rows = out.splitlines()
        assert header.split() == ["JOBS", "ST", "Route", "GridResource"]
        assert len(rows) == 1 and rows[0].split()[0] == "1", out
        assert rows[0].split()[2:] == ["Special", "batch", "fork"], out
        status, out, _ = run_cli(ce.home, "router_q", "-H")
        assert status == 0 and out.splitlines()[1:] == []  # none held
        status, out, _ = run_cli(ce.home, "router_q")
        assert status == 0 and f"{copy['ClusterId']}.0" in out and unrouted not in out

        status, out, err = run_cli(ce.home, "q", "-better-analyze", unrouted)
        assert status == 0, err
        assert f"Job {unrouted}" in out and "is idle" in out
        assert "The job router htcondor-ce routes idle jobs here; it would not route" in out
        assert 'route Special: no: REQUIREMENTS false: queue == "special" is false' in out
        assert 'queue = "short"' in out and "No execute node" not in out
        status, out, _ = run_cli(ce.home, "q", "-better-analyze", routed)
        source = jobs(ce, f"ClusterId == {routed.split('.')[0]}")[0]
        if source["JobStatus"] == JobStatus.IDLE:  # its copy not running yet
            assert "It is the job router htcondor-ce's: routed by route Special" in out
        # The routed job's batch job ends with it (none is left running after the test).
        status, _, err = run_cli(ce.home, "rm", "-all")
        assert status == 0, err
        wait_for(lambda: not ce_queue(ce), timeout=120, what="the CE's queue emptied")


def ce_queue(ce: PersonalPool) -> list[object]:
    with ce.client() as schedd:
        return list(schedd.query("true"))
