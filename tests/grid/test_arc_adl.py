"""What the arc type sends: the service URL filled in as HTCondor's fillURL does, the
GridResource forms, and the job's ADL (arc_rte, arc_resources, arc_application...)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from htgrid.gahp.commands.arc import service_url
from htgrid.grid import GRID_TYPES, UnsupportedGridJob, grid_type_of
from htgrid.grid.arc._adl import job_description, staging
from htgrid.grid.arc._ids import ArcResourceName
from htgrid.submit import SubmitDescription

ADL = "{http://www.eu-emi.eu/es/2010/12/adl}"


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("ce.example.org", "https://ce.example.org:443/arex/rest/1.0"),
        ("https://ce.example.org/arex", "https://ce.example.org:443/arex/rest/1.0"),
        ("https://ce.example.org:8443/arex/", "https://ce.example.org:8443/arex/rest/1.0"),
        ("https://ce.example.org:443/arex/rest/1.0", "https://ce.example.org:443/arex/rest/1.0"),
    ],
)
def test_the_service_url_needs_only_the_host(given: str, url: str) -> None:
    assert service_url(given) == url


def test_arc_and_the_older_nordugrid_form_name_the_type() -> None:
    assert grid_type_of("nordugrid ce.example.org") == "arc"
    assert GRID_TYPES["arc"].resource_key("nordugrid ce.example.org") == "arc ce.example.org"
    assert ArcResourceName.parse("arc https://ce/arex").url == "https://ce/arex"
    with pytest.raises(UnsupportedGridJob, match="the ARC CE's URL is missing"):
        ArcResourceName.parse("arc")


def _ad(tmp_path: Path, body: str) -> object:
    text = f"universe = grid\ngrid_resource = arc ce.example.org\n{body}\nqueue\n"
    desc = SubmitDescription.from_text(text, cwd=str(tmp_path))
    return next(iter(desc.jobs(1, owner="u", qdate=0))).ad


def test_the_adl_carries_what_the_submit_file_asked(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "data.txt").write_text("data\n")
    ad = _ad(
        tmp_path,
        'executable = run.sh\narguments = "a \'b c\'"\nenvironment = "X=1 Y=two"\n'
        "transfer_input_files = data.txt\noutput = out\nerror = err\n"
        "request_cpus = 4\nrequest_memory = 2048\n"
        "arc_rte = ENV/PROXY USE_DELEGATION_DB,ENV/RTE\n"
        "arc_resources = <NetworkInfo>gigabitethernet</NetworkInfo>\n"
        "arc_application = <Priority>7</Priority>",
    )
    root = ET.fromstring(job_description(ad, "deleg1", "htgrid_1_0_abc"))  # type: ignore[arg-type]
    app = root.find(f"{ADL}Application")
    assert app is not None
    assert app.findtext(f"{ADL}Executable/{ADL}Path") == "run.sh"
    assert [a.text for a in app.iter(f"{ADL}Argument")] == ["a", "b c"]
    assert app.findtext(f"{ADL}Output") == "_condor_stdout"
    assert app.findtext(f"{ADL}Priority") == "7"
    env = {
        e.findtext(f"{ADL}Name"): e.findtext(f"{ADL}Value") for e in app.iter(f"{ADL}Environment")
    }
    assert env == {"X": "1", "Y": "two"}
    res = root.find(f"{ADL}Resources")
    assert res is not None
    assert res.findtext(f"{ADL}SlotRequirement/{ADL}NumberOfSlots") == "4"
    assert res.findtext(f"{ADL}IndividualPhysicalMemory") == str(2048 * 1024 * 1024)
    assert res.findtext(f"{ADL}NetworkInfo") == "gigabitethernet"
    rtes = [
        (r.findtext(f"{ADL}Name"), [o.text for o in r.iter(f"{ADL}Option")])
        for r in res.iter(f"{ADL}RuntimeEnvironment")
    ]
    assert rtes == [("ENV/PROXY", ["USE_DELEGATION_DB"]), ("ENV/RTE", [])]
    assert root.findtext(f"{ADL}ActivityIdentification/{ADL}Name") == "htgrid_1_0_abc"
    inputs = [f.findtext(f"{ADL}Name") for f in root.iter(f"{ADL}InputFile")]
    assert inputs == ["data.txt", "run.sh"]
    files = staging(ad)  # type: ignore[arg-type]
    assert files.inputs == (f"{tmp_path}/data.txt", f"{tmp_path}/run.sh")
    assert files.outputs == (
        ("_condor_stdout", f"{tmp_path}/out"),
        ("_condor_stderr", f"{tmp_path}/err"),
    )


def test_nordugrid_rsl_makes_xrsl_with_the_users_relations(tmp_path: Path) -> None:
    ad = _ad(
        tmp_path,
        "executable = /bin/echo\ntransfer_executable = false\narguments = hi\n"
        "nordugrid_rsl = (walltime=60)",
    )
    ad["NordugridRSL"] = "(walltime=60)"  # type: ignore[index]
    text = job_description(ad, None, "n")  # type: ignore[arg-type]
    assert text.startswith('&(executable="/bin/echo")(arguments="hi")(jobname="n")')
    assert text.endswith("(walltime=60)")
