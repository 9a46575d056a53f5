"""`htgrid classad eval|match` as an admin uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "classad"


def test_eval_prints_values_in_classad_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["classad", "eval", "1 + 2", 'strcat("a", 1)', "{1, 2 + 3}", "undefined", "2.5"])
    assert rc == 0
    assert capsys.readouterr().out.splitlines() == [
        "3",
        '"a1"',
        "{ 1,5 }",
        "undefined",
        "2.500000000000000E+00",
    ]


def test_eval_in_an_ad_file(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["classad", "eval", "-f", str(EXAMPLES / "job.ad"), "--", "RequestMemory * 2"])
    assert rc == 0
    assert capsys.readouterr().out == "16384\n"


def test_eval_syntax_error_exits_2_with_position(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["classad", "eval", "1 +"]) == 2
    err = capsys.readouterr().err
    assert "line 1, column 4" in err
    assert "^" in err


def test_match_names_the_failing_clause_and_the_values(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["classad", "match", str(EXAMPLES / "job.ad"), str(EXAMPLES / "machines.ad")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "slot1@node01.example.org: MATCH" in out
    assert "slot1@gpu03.example.org: MATCH" in out
    node02 = out.split("slot1@node02.example.org: no match", 1)[1].split("slot1@gpu03")[0]
    assert "[FAIL] TARGET.Memory >= RequestMemory" in node02
    assert "TARGET.Memory = 4096" in node02
    assert "[FAIL] TARGET.Cpus >= RequestCpus" in node02
    assert "TARGET.Arch" not in node02  # only failing clauses are shown
    assert out.rstrip().endswith("2 of 3 machine(s) match.")


def test_match_reports_the_machine_side_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.ad"
    job.write_text('Owner = "mallory"\nRequestMemory = 1\nRequirements = true\n')
    rc = main(["classad", "match", str(job), str(EXAMPLES / "machines.ad")])
    out = capsys.readouterr().out
    assert rc == 0
    assert 'machine Requirements:\n    [FAIL] TARGET.Owner isnt "mallory"' in out


def test_match_with_no_matching_machine_exits_1(tmp_path: Path) -> None:
    job = tmp_path / "job.ad"
    job.write_text("Requirements = TARGET.Memory > 10000000\n")
    assert main(["classad", "match", str(job), str(EXAMPLES / "machines.ad")]) == 1


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["classad", "match", "/nonexistent/job.ad", "/nonexistent/m.ad"]) == 2
    assert "No such file" in capsys.readouterr().err
