"""Grid matchmaking, as HTCondor's grid-universe manual tells it, with three sites
advertised to a collector as condor_advertise UPDATE_STARTD_AD would."""

from __future__ import annotations

import time
from collections import Counter

from htgrid.classad import ClassAd
from htgrid.collector import AdStore
from htgrid.negotiator import NegotiatorConfig, negotiate
from htgrid.queue import PolicyAction, periodic_decision

from ._pool import ads

NOW = 1_700_000_000.0

# "Advertising Grid Resources to HTCondor": the ad of a site taking several jobs.
SITE = """\
MyType         = "Machine"
TargetType     = "Job"
Name           = "{name}"
Machine        = "{name}"
UpdateSequenceNumber  = 4
Requirements   = (CurMatches < 10) && (TARGET.JobUniverse == 9)
Rank           = 0.000000
CurrentRank    = 0.000000
WantAdRevaluate = True
CurMatches     = 1
{extra}
"""

# The grid manual's configuration for matching one site ad to several jobs.
GRID_CONFIG = NegotiatorConfig(ignore_user_priorities=True)


def advertised(*sites: tuple[str, str]) -> list[ClassAd]:
    """The site ads as the negotiator gets them back from the collector."""
    store = AdStore(clock=lambda: NOW)
    text = "\n".join(SITE.format(name=name, extra=extra) for name, extra in sites)
    for ad in ads(text):
        assert store.update("UPDATE_STARTD_AD", ad).accepted
    return store.query("Machine")


def bamboozle_job(proc: int) -> ClassAd:
    """`grid_resource = $$(resource_name)` and the Bamboozle requirements, submitted."""
    (ad,) = ads(
        f"""MyType = "Job"
ClusterId = 12
ProcId = {proc}
Owner = "alice"
User = "alice@example.com"
JobStatus = 1
JobUniverse = 9
Cmd = "analyze_bamboozle_data"
Out = "aaa.12.out"
Err = "aaa.12.err"
UserLog = "aaa.log"
GridResource = "$$(resource_name)"
Requirements = (TARGET.HaveBamboozle == true) && (TARGET.resource_name =!= undefined)
"""
    )
    return ad


def test_bamboozle_jobs_go_only_where_both_attributes_are() -> None:
    sites = advertised(
        ("SiteA", 'resource_name = "gt2 grid.example.com/jobmanager-pbs"\nHaveBamboozle = True'),
        ("SiteB", "HaveBamboozle = True"),  # Bamboozle, but no resource_name: no match
        ("SiteC", 'resource_name = "batch slurm c.example.com"'),  # the other way round
    )
    jobs = [bamboozle_job(p) for p in range(12)]
    result = negotiate(jobs, sites, config=GRID_CONFIG, now=NOW)
    # SiteA already has one job (CurMatches = 1) and takes up to 9 more: the negotiator
    # raises CurMatches in its copy after each match, so the tenth fails CurMatches < 10.
    assert Counter(m.machine for m in result.matches) == {"SiteA": 9}
    assert [m.machine_ad["CurMatches"] for m in result.matches] == list(range(1, 10))
    assert [r.reason for r in result.rejections] == ["no match found"] * 3
    # grid_resource takes the whole of the site's resource_name, recorded as MATCH_.
    first = result.matches[0]
    running = first.job_ad(jobs[0])
    assert running["GridResource"] == "gt2 grid.example.com/jobmanager-pbs"
    assert running["MATCH_resource_name"] == "gt2 grid.example.com/jobmanager-pbs"
    assert ("NumJobMatches", "1") in first.job_updates
    assert jobs[0]["GridResource"] == "$$(resource_name)"  # the queued job keeps its macro


def test_without_ignoring_user_priorities_the_pie_is_three_ads() -> None:
    sites = advertised(
        *((n, f'resource_name = "gt2 {n}.example.com"\nHaveBamboozle = True') for n in "ABC")
    )
    jobs = [bamboozle_job(p) for p in range(12)]
    # Why the manual sets NEGOTIATOR_IGNORE_USER_PRIORITIES: each site ad counts as one
    # slot in the fair-share pie, so a lone user gets three matches a cycle.
    assert len(negotiate(jobs, sites, now=NOW).matches) == 3
    assert len(negotiate(jobs, sites, config=GRID_CONFIG, now=NOW).matches) == 12


def avoiding_job() -> ClassAd:
    """The manual's "Advanced Grid Usage" job: remember one site, prefer another."""
    (ad,) = ads(
        """MyType = "Job"
ClusterId = 20
ProcId = 0
Owner = "alice"
User = "alice@example.com"
JobStatus = 1
JobUniverse = 9
GridResource = "$$(resource_name)"
Requirements = TARGET.resource_name =!= undefined
LastMatchListLength = 1
Rank = TARGET.Name != LastMatchName0
NumSystemHolds = 0
NumGlobusSubmits = 0
PeriodicRelease = (NumSystemHolds <= ((NumGlobusSubmits * 4) + 4)) && (NumGlobusSubmits < 4) && (HoldReason != "via condor_hold (by user alice)") && ((time() - EnteredCurrentStatus) > (NumSystemHolds * 60 * 5))
"""
    )
    return ad


def test_a_job_that_failed_at_a_site_is_released_and_tries_another() -> None:
    sites = advertised(
        *(
            (n, f'resource_name = "batch slurm {n.lower()}.example.com"')
            for n in ("SiteA", "SiteB", "SiteC")
        )
    )
    job = avoiding_job()
    (first,) = negotiate([job], sites, config=GRID_CONFIG, now=NOW).matches
    assert first.machine == "SiteA"  # no history yet: every site ranks alike
    job = first.job_ad(job)
    assert job["LastMatchName0"] == "SiteA"
    assert job["GridResource"] == "batch slurm sitea.example.com"

    # The site fails the job; the grid manager holds it.
    job = avoiding_job()
    for name, expr in first.job_updates:
        job[name] = ClassAd(f"[v = {expr}]")["v"]
    job["JobStatus"] = 5
    job["HoldReason"] = "Error connecting to SiteA"
    job["NumSystemHolds"] = 1
    job["NumGlobusSubmits"] = 1
    wall = int(time.time())
    job["EnteredCurrentStatus"] = wall - 100
    assert periodic_decision(job, wall) is None  # five minutes per hold not yet past
    job["EnteredCurrentStatus"] = wall - 301
    decision = periodic_decision(job, wall)
    assert decision is not None and decision.action is PolicyAction.RELEASE
    job["JobStatus"] = 1

    (second,) = negotiate([job], sites, config=GRID_CONFIG, now=NOW + 400).matches
    assert second.machine == "SiteB"  # Rank = TARGET.Name != LastMatchName0
    assert dict(second.history)["LastMatchName0"] == '"SiteB"'

    # With the other sites gone, the last one is still taken: Rank prefers, not requires.
    (again,) = negotiate([job], sites[:1], config=GRID_CONFIG, now=NOW + 800).matches
    assert again.machine == "SiteA"


def test_a_site_that_cannot_fill_the_macro_holds_the_job_instead() -> None:
    (site,) = ads(SITE.format(name="Bare", extra=""))
    (job,) = ads(
        'ClusterId = 1\nProcId = 0\nOwner = "a"\nJobUniverse = 9\n'
        'GridResource = "$$(resource_name)"\nRequirements = true\n'
    )
    (match,) = negotiate([job], [site], config=GRID_CONFIG, now=NOW).matches
    assert match.expansion.error == "Cannot expand $$(resource_name)"
