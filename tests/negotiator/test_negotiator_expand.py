"""What a match writes into the job: `$$()` macros, MATCH_ attributes, match history."""

from __future__ import annotations

from htgrid.classad import ClassAd
from htgrid.negotiator import apply_updates, expand, history_updates

SITE = ClassAd(
    {
        "Name": "SiteA",
        "resource_name": "batch slurm a.example.com",
        "Memory": 2048,
        "GLIDEIN_Site": "Wisconsin",
    }
)


def test_attribute_macros_defaults_and_numbers() -> None:
    job = ClassAd(
        {
            "GridResource": "$$(resource_name)",
            "Note": "site=$$(GLIDEIN_Site) mem=$$(Memory) queue=$$(BatchQueue:normal)",
        }
    )
    result = expand(job, SITE)
    assert result.error is None
    assert dict(result.expanded) == {
        "GridResource": '"batch slurm a.example.com"',
        "Note": '"site=Wisconsin mem=2048 queue=normal"',
    }
    # The values taken from the site are recorded, as the schedd's MATCH_ attributes.
    assert dict(result.recorded) == {
        "MATCH_resource_name": '"batch slurm a.example.com"',
        "MATCH_GLIDEIN_Site": '"Wisconsin"',
        "MATCH_Memory": "2048",
    }


def test_expression_macros_see_the_site_as_target() -> None:
    job = ClassAd(
        {
            "Size": 3,
            "JOBGLIDEIN_ResourceName": (
                "$$([ifThenElse(isUndefined(TARGET.GLIDEIN_ResourceName), "
                "TARGET.GLIDEIN_Site, TARGET.GLIDEIN_ResourceName)])"
            ),
            "Scaled": "$$([TARGET.Memory * MY.Size])",
        }
    )
    result = expand(job, SITE)
    running = apply_updates(job, result.recorded, result.expanded)
    assert running["JOBGLIDEIN_ResourceName"] == "Wisconsin"
    assert running["MATCH_EXP_JOBGLIDEIN_ResourceName"] == "Wisconsin"
    assert running["Scaled"] == "6144"


def test_macros_the_site_cannot_fill_are_errors() -> None:
    assert expand(ClassAd({"G": "$$(nothing)"}), SITE).error == "Cannot expand $$(nothing)"
    broken = expand(ClassAd({"G": "$$(resource_name"}), SITE)
    assert broken.error is not None and "no closing" in broken.error
    assert expand(ClassAd({"G": "$$([TARGET.nothing])"}), SITE).error is not None


def test_match_history_keeps_the_latest_sites_first() -> None:
    job = ClassAd({"LastMatchListLength": 3})
    for now, site in enumerate(("A", "B", "C", "D"), start=100):
        job = apply_updates(job, history_updates(job, site, now))
    assert [job.get(f"LastMatchName{i}") for i in range(4)] == ["D", "C", "B", None]
    assert (job["NumJobMatches"], job["LastMatchTime"]) == (4, 103)
    # Without match_list_length, only the count and the time are kept.
    assert dict(history_updates(ClassAd(), "A", 5.0)) == {
        "NumJobMatches": "1",
        "LastMatchTime": "5",
    }
