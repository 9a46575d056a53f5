"""The gt2/gt5 pieces that need no gatekeeper: the GAHP results, the RSL, the names."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.gahp import GahpProtocolError
from htgrid.gahp.commands import gram
from htgrid.grid import grid_type_of
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid.gram import GramJobId, GramResourceName
from htgrid.grid.gram._rsl import RslError, job_rsl, rsl_string, stdio_update
from htgrid.submit import SubmitDescription

GASS = "https://localhost:40001"


def _ad(**attrs: object) -> ClassAd:
    base: dict[str, object] = {"Iwd": "/home/u/run", "Cmd": "/bin/sh"}
    base.update(attrs)
    return ClassAd(base)


def test_gahp_results_read_as_htcondors_gt_gahp_writes_them() -> None:
    request = gram.JobRequest.of(["110", "https://ce:40000/1/2/"])
    assert request == gram.JobRequest(110, "https://ce:40000/1/2/")
    assert gram.JobRequest.of(["12", "NULL"]).contact is None
    # operation code, job failure code, job state (HTCondor's order), then htgrid's exit.
    state = gram.JobState.of(["0", "0", "8", "3"])
    assert (state.code, state.failure, state.name, state.exit_code) == (0, 0, "DONE", 3)
    assert gram.JobState.of(["0", "155", "4"]).name == "FAILED"
    assert gram.JobState.of(["7"]) == gram.JobState.of(["7", "NULL"]) == gram.JobState(7)
    assert gram.JobState(0, 0, 2).fields() == ("0", "0", "2")
    version = gram.Version.of(["0", "toolkit-version=6.2", "version=15.8 (1)"])
    assert version.gram5 and version.extensions["version"] == "15.8 (1)"
    assert not gram.Version.of(["12"]).gram5
    assert not gram.Version.of(["0", "toolkit-version=4.0"]).gram5
    assert gram.error_text(155) == "Globus error 155: the job manager could not stage out a file"
    assert gram.error_text(999) == "Globus error 999"
    for bad in ([], ["x"], ["0", "x", "y"]):
        with pytest.raises(GahpProtocolError):
            gram.JobState.of(bad)


def test_grid_resource_and_job_id() -> None:
    assert grid_type_of("gt5 ce/jobmanager-pbs") == "gt2"  # one type runs both
    name = GramResourceName.parse("GT5 ce.example.org:2119/jobmanager-pbs")
    assert (name.kind, name.key) == ("gt5", "gt5 ce.example.org:2119/jobmanager-pbs")
    with pytest.raises(UnsupportedGridJob, match="resource contact is missing"):
        GramResourceName.parse("gt2")
    grid_id = GramJobId.parse("gt2 ce/jobmanager https://ce:40000/1/2/")
    assert grid_id == GramJobId("gt2", "ce/jobmanager", "https://ce:40000/1/2/")
    assert str(grid_id) == "gt2 ce/jobmanager https://ce:40000/1/2/"
    assert GramJobId.parse("arc https://ce 1") is None


def test_the_rsl_stages_files_through_the_gass_server() -> None:
    ad = _ad(
        Cmd="job.sh",
        Arguments="a 'two words' \"q\"",
        Environment="A=1 B='x y'",
        In="in.txt",
        Out="/abs/out",
        Err="err",
        TransferInput="in.txt, data/d.bin",
        TransferOutput="res.txt,sub/r2",
        TransferOutputRemaps="res.txt=renamed.txt",
        GlobusRSL="(queue=short)(maxWallTime=10)",
    )
    rsl = job_rsl(ad, GASS + "/", gram5=True)
    assert rsl.startswith(f'&(executable="{GASS}/home/u/run/job.sh")')
    assert '(arguments="a" "two words" """q""")' in rsl
    assert '(environment=(A "1")(B "x y"))' in rsl
    assert f'(stdin="{GASS}/home/u/run/in.txt")' in rsl
    assert "(stdout=$(GLOBUS_CACHED_STDOUT))(stderr=$(GLOBUS_CACHED_STDERR))" in rsl
    assert (
        f'(file_stage_out=($(GLOBUS_CACHED_STDOUT) "{GASS}/abs/out")'
        f'($(GLOBUS_CACHED_STDERR) "{GASS}/home/u/run/err")'
        f'("res.txt" "{GASS}/home/u/run/renamed.txt")("sub/r2" "{GASS}/home/u/run/r2"))'
    ) in rsl
    assert (
        f'(file_stage_in=("{GASS}/home/u/run/in.txt" "in.txt")'
        f'("{GASS}/home/u/run/data/d.bin" "d.bin"))'
    ) in rsl
    assert rsl.endswith("(save_state=yes)(two_phase=600)(queue=short)(maxWallTime=10)")
    # GRAM2: stdout and stderr streamed to the GASS server as the job writes them.
    gram2 = job_rsl(ad, GASS, gram5=False)
    assert f'(stdout="{GASS}/abs/out")(stderr="{GASS}/home/u/run/err")' in gram2
    assert "GLOBUS_CACHED" not in gram2
    assert stdio_update(ad, GASS, gram5=False).startswith(f'&(stdout="{GASS}/abs/out")')


def test_the_rsl_of_a_job_without_transfer_and_a_bad_ad() -> None:
    rsl = job_rsl(_ad(TransferExecutable=False, Out="/dev/null"), GASS, gram5=True)
    assert rsl == '&(executable="/bin/sh")(scratch_dir=$(HOME))(directory=$(SCRATCH_DIRECTORY))' + (
        "(save_state=yes)(two_phase=600)"
    )
    assert rsl_string('say "hi"') == '"say ""hi"""'
    with pytest.raises(RslError, match="Iwd"):
        job_rsl(ClassAd({"Cmd": "/bin/true"}), GASS, gram5=True)


@pytest.mark.parametrize("kind", ["gt2", "gt5"])
def test_submit_takes_gt2_and_gt5_with_globus_rsl(kind: str) -> None:
    text = (
        f"universe = grid\ngrid_resource = {kind} ce.example.org/jobmanager-pbs\n"
        "executable = /bin/true\nglobus_rsl = (queue=short)\nqueue\n"
    )
    (job,) = SubmitDescription.from_text(text, cwd="/tmp").jobs(1, owner="u", qdate=1)
    assert job.ad["GridResource"] == f"{kind} ce.example.org/jobmanager-pbs"
    assert job.ad["GlobusRSL"] == "(queue=short)"
