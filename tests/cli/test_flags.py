"""Flags are taken only as written, or as the short forms HTCondor's own tools take.

argparse would read `-p` as `-pool` (and print the MyProxy password meant for it in the
error), `-annex NAME` as `-a nnex NAME`: every command refuses such guesses, naming the
flag and nothing else of the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid
from htgrid._args import ArgumentParser
from htgrid.cli import build_parser, main

SRC = str(Path(htgrid.__file__).resolve().parents[1])  # the htgrid under test, for children


def _commands(
    parser: ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], ArgumentParser]]:
    yield path, parser
    for word, sub in parser.subcommands().items():
        yield from _commands(sub, (*path, word))


def _guesses(flags: list[str]) -> list[str]:
    """For each long flag, the longest and the shortest of its cut forms that are not
    flags themselves: what argparse would have taken for it."""
    known = set(flags)
    out: list[str] = []
    for name in flags:
        dashes = 2 if name.startswith("--") else 1
        cuts = [name[:n] for n in range(dashes + 1, len(name)) if name[:n] not in known]
        if cuts:
            out.extend(dict.fromkeys([cuts[-1], cuts[0]]))
    return list(dict.fromkeys(out))


ALL = list(_commands(build_parser()))


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in ALL}
    assert {"q", "submit", "rm", "status", "gahp batch", "gahp ec2", "token create"} <= names
    assert all(isinstance(parser, ArgumentParser) for _, parser in ALL)


@pytest.mark.parametrize(("path", "parser"), ALL, ids=[" ".join(p) or "htgrid" for p, _ in ALL])
def test_a_cut_flag_is_refused_never_another_flag(
    path: tuple[str, ...], parser: ArgumentParser, capsys: pytest.CaptureFixture[str]
) -> None:
    guesses = _guesses(parser.flags())
    if len(parser.flags()) > 3:  # more than -h, --help and one other
        assert guesses, f"htgrid {' '.join(path)} has no flag to cut"
    for guess in guesses:
        with pytest.raises(SystemExit) as stop:
            main([*path, guess, "s3cr3t"])
        err = capsys.readouterr().err
        assert stop.value.code == 2, (path, guess)
        assert f"unknown option {guess}" in err, (path, guess, err)
        assert "s3cr3t" not in err


def test_htcondor_short_forms_are_the_flags_themselves() -> None:
    parser = build_parser()
    q = parser.parse_args(["q", "-nob", "-const", "Owner == 1", "-allu", "-ho", "-gri", "-tot"])
    assert (q.nobatch, q.constraint, q.allusers, q.hold, q.grid, q.totals) == (
        True,
        "Owner == 1",
        True,
        True,
        True,
        True,
    )
    assert parser.parse_args(["q", "-l", "-bet", "-n", "s", "-p", "h:1"]).analyze is True
    sub = parser.parse_args(["submit", "-a", "x = 1", "-appe", "y = 2", "-dry", "-", "f"])
    assert (sub.append, sub.dry_run, sub.file) == (["x = 1", "y = 2"], "-", "f")
    assert parser.parse_args(["submit", "-po", "h:1", "f"]).schedd_pool == "h:1"
    rm = parser.parse_args(["rm", "-a", "-r", "why", "-const", "true"])
    assert (rm.all_jobs, rm.reason, rm.constraint) == (True, "why", "true")
    hist = parser.parse_args(["history", "-m", "3", "-af", "Owner"])
    assert (hist.limit, hist.autoformat) == (3, ["Owner"])
    st = parser.parse_args(["status", "-sc", "-const", "true", "-t"])
    assert (st.mode, st.constraint, st.total) == ("schedd", "true", True)


@pytest.mark.parametrize("words", [["-g"], ["-gr"], ["-he"], ["-held", "-gr"]])
def test_forms_htcondor_reads_as_another_flag_are_not_taken(words: list[str]) -> None:
    # condor_q reads -gr as -group-by and -he as -help: never as -grid or -held here.
    with pytest.raises(SystemExit):
        build_parser().parse_args(["q", *words])


@pytest.mark.parametrize("flag", ["-p", "-pa", "-password"])
def test_the_myproxy_password_is_refused_and_never_echoed(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "job.sub"
    sub.write_text("executable = /bin/true\nqueue\n")
    status = main(["submit", flag, "s3cr3t-Pass", str(sub), "-dry-run", "-"])
    out, err = capsys.readouterr()
    assert status == 2
    assert "-password" in err and "MyProxy" in err
    assert "s3cr3t" not in out + err


@pytest.mark.parametrize("flag", ["-annex", "-annex-name", "--annex-name"])
def test_annex_aims_the_jobs_at_an_annex_not_a_then_nnex(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "job.sub"
    sub.write_text("executable = /bin/true\nqueue\n")
    status = main(["submit", flag, "zzq-pool", str(sub), "-dry-run", "-"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert '\nTargetAnnexName="zzq-pool"\n' in out
    assert "argument -a" not in err


@pytest.mark.parametrize(
    ("argv", "cut"),
    [
        (["-m", "htgrid.collector", "--hom", "x"], "--hom"),
        (["-m", "htgrid.startd", "--poo", "x"], "--poo"),
        (["-m", "htgrid.master", "--backg"], "--backg"),
        (["-m", "htgrid.backends.ec2", "--max-work", "3"], "--max-work"),
        (["-m", "htgrid.cli._gahp", "batch", "--scr", "x"], "--scr"),
    ],
)
def test_the_daemons_own_command_lines_refuse_cut_flags(argv: list[str], cut: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert f"unknown option {cut}" in done.stderr
