"""The exit codes the README promises, a pipe closed early, and -better-analyze on a big
queue: against one daemon whose queue holds a few thousand idle jobs in a few clusters."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid
from htgrid.testing import PersonalPool, run_cli, wait_for

SRC = str(Path(htgrid.__file__).resolve().parents[1])  # the htgrid under test, for children


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("pool")
    work = tmp_path_factory.mktemp("jobs")
    with PersonalPool(home, kill_grace=2, fsync=False) as running:
        # Vanilla jobs stay idle (no execute node): 3000 jobs in two autoclusters (the
        # first and third cluster alike), then one cluster held.
        for memory, count in ((100, 1500), (200, 1000), (100, 500), (300, 40)):
            sub = work / f"m{memory}-{count}.sub"
            sub.write_text(
                f"executable = /bin/echo\narguments = $(Process)\nrequest_memory = {memory}\n"
                f"queue {count}\n"
            )
            rc, _, err = run_cli(home, "submit", str(sub))
            assert rc == 0, err
        assert run_cli(home, "hold", "4")[0] == 0
        # One job done, for history (and out of the queue before the analysis).
        sub = work / "local.sub"
        sub.write_text("universe = local\nexecutable = /bin/true\nqueue\n")
        assert run_cli(home, "submit", str(sub))[0] == 0
        wait_for(lambda: run_cli(home, "history", "5.0", "-af", "JobStatus")[1] == "4\n")
        yield running


@pytest.mark.parametrize(
    "argv",
    [
        ["q", "99.0"],
        ["q", "99"],
        ["q", "-l", "99.0"],
        ["q", "-af", "Owner", "-constraint", "true", "--", "99.0"],
        ["q", "-better-analyze", "99.0"],
        ["q", "1.0", "99.0"],
        ["rm", "99.0"],
        ["hold", "99.0"],
        ["release", "99.0"],
        ["qedit", "99.0", "Foo", "1"],
        ["wait", "99.0"],
        ["history", "99.0"],
        ["history", "-l", "99"],
    ],
)
def test_a_job_not_found_is_a_negative_answer(pool: PersonalPool, argv: list[str]) -> None:
    rc, _, err = run_cli(pool.home, *argv)
    assert rc == 1, err
    assert "99" in err and "Traceback" not in err


def test_jobs_that_are_there_answer_0(pool: PersonalPool) -> None:
    assert run_cli(pool.home, "q", "1.0", "2")[0] == 0
    assert run_cli(pool.home, "q", "1.7", "-af", "ProcId")[1] == "7\n"
    assert run_cli(pool.home, "q", "nobody-here")[0] == 0  # a user without jobs: not a "no"


def test_an_internal_error_is_3_with_its_traceback(
    pool: PersonalPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from htgrid.cli import _q

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_q, "totals_line", broken)
    rc, _, err = run_cli(pool.home, "q")
    assert rc == 3
    assert "internal error" in err and "RuntimeError: a bug" in err


@pytest.mark.parametrize(
    "argv",
    [["q", "-nobatch"], ["q", "-l"], ["q", "-af", "ClusterId", "ProcId", "Args"], ["status"]],
)
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(
    pool: PersonalPool, argv: list[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "HTGRID_HOME": str(pool.home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "htgrid", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    status = proc.wait(timeout=60)
    if argv == ["status"]:  # no collector in this pool: the error, and nothing else
        assert status == 1 and "Traceback" not in err and "Exception ignored" not in err
        return
    assert first
    assert err == ""
    assert status == 141  # 128 + SIGPIPE, as a C tool SIGPIPE ended


def test_better_analyze_without_a_job_analyses_each_autocluster_once(
    pool: PersonalPool,
) -> None:
    rc, out, err = run_cli(pool.home, "q", "-better-analyze")
    assert (rc, err) == (0, "")
    assert out.startswith("3040 job(s) in 3 group(s) of alike jobs")
    # The alike clusters 1 and 3 are one group; cluster 2 another; the held cluster 4 a
    # third.
    assert "Jobs 1.0-1499, 3.0-499 (2000 jobs) are alike: job 1.0 stands for them." in out
    assert "Jobs 2.0-999 (1000 jobs) are alike: job 2.0 stands for them." in out
    assert "Jobs 4.0-39 (40 jobs) are alike: job 4.0 stands for them." in out
    assert out.count("RequestMemory = 100") == 1 and out.count("RequestMemory = 200") == 1
    assert "Job 4.0 (owner" in out and "is held" in out
    assert len(out.splitlines()) < 100
    # A job named: its own analysis; a cluster named: its groups.
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", "3.7")
    assert rc == 0 and out.startswith("Job 3.7 (owner")
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", "2")
    assert rc == 0 and out.startswith("1000 job(s) in 1 group(s) of alike jobs")
