"""examples/htcondor-c/run.sh: a job submitted on one pool runs on another and comes back."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import htcondor2
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "htcondor-c"
SITE = "schedd@site.example"


@pytest.mark.timeout(420)
def test_the_htcondor_c_example_runs_a_job_on_the_other_pool(tmp_path: Path) -> None:
    work = tmp_path / "htcondor-c"
    shutil.copytree(EXAMPLE, work)
    # The script makes its own pool homes (under TMPDIR); the suite's HTGRID_HOME is unused.
    # A short TMPDIR, as a user's /tmp: the pools' Unix sockets are under it, and a path
    # under pytest's (longer under pytest -n) passes the 108 bytes such a path may have.
    scratch = Path(tempfile.mkdtemp(prefix="htc-", dir="/tmp"))
    env = dict(os.environ, TMPDIR=str(scratch))
    done = subprocess.run(
        ["sh", str(work / "run.sh")], env=env, capture_output=True, text=True, timeout=400
    )
    left = list(scratch.iterdir())
    if done.returncode == 0:  # else the pools' files are kept there for a look (run.sh says)
        shutil.rmtree(scratch, ignore_errors=True)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    # The site's queue, read from the laptop with -name/-pool, had the job running.
    site_q = out.split(f"-- Schedd: {SITE} : <127.0.0.1:", 1)[1].split("Total for query", 1)[0]
    assert " R " in site_q and "job.sh" in site_q
    # The output came back: the file the job wrote and its stdout.
    assert (work / "answer.txt").read_text() == "HELLO FROM THE LAPTOP\n"
    assert (work / "job.out").read_text().startswith("ran at the site, in ")
    events = list(htcondor2.JobEventLog(str(work / "job.log")).events(stop_after=0))
    assert [e.type for e in events] == [
        htcondor2.JobEventType.SUBMIT,
        htcondor2.JobEventType.GRID_SUBMIT,
        htcondor2.JobEventType.EXECUTE,
        htcondor2.JobEventType.JOB_TERMINATED,
    ]
    resource = str(events[1]["GridResource"]).split()
    assert resource[:2] == ["condor", SITE] and resource[2].startswith("127.0.0.1:")
    assert str(events[1]["GridJobId"]).split()[:3] == resource
    assert events[-1]["ReturnValue"] == 0
    # Both pools stopped, and their scratch homes are gone.
    assert out.count("htgrid daemons stopped") == 2
    assert not left
