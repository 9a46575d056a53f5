"""`htgrid advertise` and `htgrid status` as an HTCondor admin uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from htgrid.cli import main

# The grid resource ad of HTCondor's grid-universe manual ("Advertising Grid Resources").
GRID_AD = """\
# example grid resource ClassAd for a gt2 job
MyType         = "Machine"
TargetType     = "Job"
Name           = "Example1_Gatekeeper"
Machine        = "Example1_Gatekeeper"
resource_name  = "gt2 grid.example.com/jobmanager-pbs"
UpdateSequenceNumber  = 4
Requirements   = (CurMatches < 10) && (TARGET.JobUniverse == 9)
Rank           = 0.000000
CurrentRank    = 0.000000
WantAdRevaluate = True
CurMatches     = 1
"""

SITES = "\n".join(
    GRID_AD.replace("Example1", name).replace("grid.example.com", f"{name.lower()}.example.com")
    for name in ("SiteA", "SiteB", "SiteC")
)


def slot(n: int, state: str, activity: str, load: float, since: int) -> str:
    return f"""MyType = "Machine"
Name = "slot{n}@vulture.cs.wisc.edu"
Machine = "vulture.cs.wisc.edu"
OpSys = "LINUX"
Arch = "INTEL"
State = "{state}"
Activity = "{activity}"
LoadAvg = {load}
Memory = 512
EnteredCurrentActivity = {1_000_000 - since}
MyCurrentTime = 1000000
Requirements = true
"""


# condor_status's manual, example 1: four slots of vulture.
VULTURE = "\n".join(
    [
        slot(1, "Claimed", "Busy", 1.05, 6462),
        slot(2, "Claimed", "Busy", 1.0, 6499),
        slot(3, "Unclaimed", "Idle", 0.07, 126332),
        slot(4, "Unclaimed", "Idle", 0.0, 126334),
    ]
)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_manuals_grid_ad_is_advertised_and_shown(
    pool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advertise", "UPDATE_STARTD_AD", write(tmp_path, "site.ad", GRID_AD)]) == 0
    assert main(["status", "-af", "Name", "resource_name", "CurMatches"]) == 0
    out = capsys.readouterr().out
    assert out == "Example1_Gatekeeper gt2 grid.example.com/jobmanager-pbs 1\n"
    # A refresh with the same UpdateSequenceNumber is fine; an older one is refused.
    assert main(["advertise", "UPDATE_STARTD_AD", write(tmp_path, "again.ad", GRID_AD)]) == 0
    older = GRID_AD.replace("UpdateSequenceNumber  = 4", "UpdateSequenceNumber = 3")
    assert main(["advertise", "UPDATE_STARTD_AD", write(tmp_path, "old.ad", older)]) == 1
    assert "older than the stored ad's 4" in capsys.readouterr().err


def test_several_ads_in_one_file_and_their_invalidation(
    pool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites = write(tmp_path, "sites.ad", SITES)
    # Without -multiple, condor_advertise reads the file as one ad; say so.
    assert main(["advertise", "UPDATE_STARTD_AD", sites]) == 0
    assert "use -multiple to send 3 ads" in capsys.readouterr().err
    assert main(["advertise", "-multiple", sites]) == 0  # the command from MyType
    main(["status", "-af", "Name"])
    assert capsys.readouterr().out.split() == [
        "SiteA_Gatekeeper",
        "SiteB_Gatekeeper",
        "SiteC_Gatekeeper",
    ]
    query = 'MyType = "Query"\nTargetType = "Machine"\nRequirements = Name == "SiteB_Gatekeeper"\n'
    assert main(["advertise", "INVALIDATE_STARTD_ADS", write(tmp_path, "rm", query)]) == 0
    main(["status", "-af", "Name"])
    assert capsys.readouterr().out.split() == ["SiteA_Gatekeeper", "SiteC_Gatekeeper"]


def test_the_default_table_and_totals_are_condor_statuss(
    pool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advertise", "-multiple", "UPDATE_STARTD_AD", write(tmp_path, "v", VULTURE)]) == 0
    assert main(["status", "vulture"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:7] == [
        "",
        "Name               OpSys      Arch   State     Activity LoadAv Mem   ActvtyTime",
        "",
        "slot1@vulture.cs.w LINUX      INTEL  Claimed   Busy      1.050  512  0+01:47:42",
        "slot2@vulture.cs.w LINUX      INTEL  Claimed   Busy      1.000  512  0+01:48:19",
        "slot3@vulture.cs.w LINUX      INTEL  Unclaimed Idle      0.070  512  1+11:05:32",
        "slot4@vulture.cs.w LINUX      INTEL  Unclaimed Idle      0.000  512  1+11:05:34",
    ]
    assert [" ".join(line.split()) for line in lines[8:]] == [
        "Total Owner Claimed Unclaimed Matched Preempting Backfill Drain",
        "",
        "INTEL/LINUX 4 0 2 2 0 0 0 0",
        "",
        "Total 4 0 2 2 0 0 0 0",
    ]
    assert main(["status", "-constraint", 'State == "Unclaimed"', "-json"]) == 0
    ads = json.loads(capsys.readouterr().out)
    assert [ad["Name"] for ad in ads] == ["slot3@vulture.cs.wisc.edu", "slot4@vulture.cs.wisc.edu"]
    assert main(["status", "-l", "slot1@vulture.cs.wisc.edu"]) == 0
    assert 'State = "Claimed"' in capsys.readouterr().out.splitlines()


def test_site_ads_count_as_malformed_in_totals_as_condor_status_says(
    pool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["advertise", "-multiple", "UPDATE_STARTD_AD", write(tmp_path, "s", SITES)])
    main(["status", "-total"])
    out = capsys.readouterr().out
    assert "(Omitted 3 malformed ads in computed attribute totals)" in out
    main(["status", "-any"])
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].split() == ["MyType", "TargetType", "Name"]
    assert ["Machine", "Job", "SiteA_Gatekeeper"] in [r.split() for r in rows]
    assert ["Collector", "None", "htgrid", "pool"] in [r.split() for r in rows]


def test_exit_codes_scripts_rely_on(pool: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "-constraint", "Memory >="]) == 2
    assert "column 10" in capsys.readouterr().err
    assert main(["status", "-schedd"]) == 0  # nothing to show is not a failure
    assert main(["status", "-pool", "127.0.0.1:1"]) == 1
    assert "no collector answers" in capsys.readouterr().err
