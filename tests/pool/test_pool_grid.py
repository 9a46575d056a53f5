"""Grid matchmaking end to end: sites advertised with `htgrid advertise`, jobs with
`grid_resource = $$(resource_name)` matched by the pool's negotiator, GridResource filled
in the queue for the grid manager; and `htgrid q -better-analyze` against the pool."""

from __future__ import annotations

from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction, JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from .conftest import submit

SITE = """MyType = "Machine"
TargetType = "Job"
Name = "{name}"
Machine = "{name}"
resource_name = "{resource}"
SiteName = "{site}"
Requirements = (CurMatches < 10) && (TARGET.JobUniverse == 9)
Rank = 0.0
CurrentRank = 0.0
WantAdRevaluate = True
CurMatches = 0
ClassAdLifetime = 3600
"""
SITES = (
    ("site-alpha", "batch fork", "alpha"),
    ("site-beta", "batch fork beta.example.org", "beta"),
    ("site-gamma", "batch slurm gamma.example.org", "gamma"),
)


def _advertise(pool: PersonalPool, tmp_path: Path) -> None:
    path = tmp_path / "sites.ad"
    path.write_text("\n".join(SITE.format(name=n, resource=r, site=s) for n, r, s in SITES))
    rc, _, err = run_cli(pool.home, "advertise", "-multiple", "UPDATE_STARTD_AD", str(path))
    assert rc == 0, err


def _grid_job(requirements: str, *, resource: str = "$$(resource_name)", extra: str = "") -> str:
    return (
        f"universe = grid\ngrid_resource = {resource}\nexecutable = /bin/true\n"
        f"requirements = {requirements}\nlog = grid.log\n{extra}queue\n"
    )


def test_grid_jobs_get_their_site_filled_in_by_matchmaking(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    _advertise(pool, tmp_path)
    # The analysis counts what the collector holds: the three sites and the node's slot,
    # which the node may not have advertised yet.
    wait_for(
        lambda: len(run_cli(pool.home, "status", "-af", "Name")[1].split()) == 4,
        what="the sites and the slot in the collector",
    )
    beta = submit(
        pool.home,
        tmp_path / "beta",
        _grid_job('TARGET.SiteName == "beta"', extra="match_list_length = 3\n"),
    )
    ranked = submit(
        pool.home,
        tmp_path / "ranked",
        _grid_job("TARGET.CurMatches < 10", extra='rank = TARGET.SiteName == "gamma"\n'),
    )
    nowhere = submit(pool.home, tmp_path / "nowhere", _grid_job('TARGET.SiteName == "delta"'))
    unfilled = submit(
        pool.home,
        tmp_path / "unfilled",
        _grid_job('TARGET.SiteName == "alpha"', resource="$$(queue_name)"),
    )

    def matched(cluster: int) -> ClassAd | None:
        ad = schedd.get(f"{cluster}.0")
        return ad if "$$(" not in str(ad.get("GridResource")) else None

    ad = wait_for(lambda: matched(beta), what="the beta job matched")
    assert ad["GridResource"] == "batch fork beta.example.org"
    assert ad["MATCH_resource_name"] == "batch fork beta.example.org"
    assert (ad["NumJobMatches"], ad["LastMatchName0"]) == (1, "site-beta")
    assert ad["JobStatus"] == JobStatus.IDLE  # now the grid manager's to submit
    assert ad["Matched"] is True  # submitted as false: the grid manager waits for this
    ad = wait_for(lambda: matched(ranked), what="the ranked job matched")
    assert ad["GridResource"] == "batch slurm gamma.example.org"
    held = wait_for(lambda: (a := schedd.get(f"{unfilled}.0"))["JobStatus"] == 5 and a)
    assert held["HoldReason"] == "Cannot expand $$(queue_name)"
    idle = wait_for(lambda: (a := schedd.get(f"{nowhere}.0")).get("LastRejMatchReason") and a)
    assert idle["LastRejMatchReason"] == "no match found"
    assert idle["GridResource"] == "$$(resource_name)"
    assert idle["Matched"] is False
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", f"{nowhere}.0")
    assert rc == 0
    assert "filled in by grid matchmaking" in out
    assert "no match found" in out
    assert '[0]           0  TARGET.SiteName == "delta"' in out
    assert "4 are rejected by your job's requirements" in out  # three sites and the slot
    schedd.act(JobAction.Remove, Jobs.of([f"{c}.0" for c in (beta, ranked, nowhere, unfilled)]))


def test_better_analyze_explains_a_vanilla_job_against_the_slots(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    big = submit(pool.home, tmp_path, "executable = /bin/true\nrequest_memory = 900000\nqueue\n")
    wait_for(lambda: schedd.get(f"{big}.0").get("LastRejMatchReason"), what="a cycle's verdict")
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", f"{big}.0")
    assert rc == 0
    assert f"Job {big}.0 (owner " in out and "vanilla universe) is idle." in out
    assert "The last negotiation cycle" in out and "no match found" in out
    assert "TARGET.Memory >= RequestMemory" in out
    assert "MODIFY TO" in out  # the slot's memory, as a suggestion
    assert "0 are able to run your job" in out
    schedd.act(JobAction.Remove, Jobs.of([f"{big}.0"]))
