"""The README's first command: a grid job run end to end on the embedded default."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import htcondor2

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_main_job_runs_a_grid_job_end_to_end(tmp_path: Path) -> None:
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    env = dict(os.environ, HTGRID_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        ["sh", str(work / "grid" / "run.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 job(s) submitted to cluster 1." in done.stdout
    assert (work / "grid" / "hello.out").read_text().startswith("Hello from the grid universe\n")
    events = list(htcondor2.JobEventLog(str(work / "grid" / "hello.log")).events(stop_after=0))
    kinds = [e.type for e in events]
    assert kinds == [
        htcondor2.JobEventType.SUBMIT,
        htcondor2.JobEventType.GRID_SUBMIT,
        htcondor2.JobEventType.EXECUTE,
        htcondor2.JobEventType.JOB_TERMINATED,
    ]
    assert events[1]["GridResource"] == "batch fork"
    assert events[-1]["ReturnValue"] == 0
    # The pool is down again afterwards.
    assert "htgrid daemons stopped" in done.stdout
