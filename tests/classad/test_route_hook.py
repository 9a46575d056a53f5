"""The shipped classad2 job-router hook runs on htgrid with only the import swapped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import classad2
import htcondor2  # noqa: F401 - puts classad2 in HTCondor mode

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "classad"


def _run(script: Path, stdin: str) -> str:
    done = subprocess.run(
        [sys.executable, str(script)], input=stdin, capture_output=True, text=True, check=True
    )
    return done.stdout


def _as_dict(text: str) -> dict[str, str]:
    ad = classad2.parseOne(text, classad2.ParserType.Old)
    return {k.lower(): repr(ad.lookup(k)) for k in ad}


def test_hook_gives_the_same_job_ad_on_htgrid_and_classad2(tmp_path: Path) -> None:
    stdin = (EXAMPLES / "route_hook_input.txt").read_text()
    source = (EXAMPLES / "route_hook.py").read_text()
    assert "import htgrid.classad as classad\n" in source
    official = tmp_path / "route_hook_classad2.py"
    official.write_text(
        source.replace(
            "import htgrid.classad as classad\n", "import htcondor2\nimport classad2 as classad\n"
        )
    )

    ours = _run(EXAMPLES / "route_hook.py", stdin)
    theirs = _run(official, stdin)

    assert _as_dict(ours) == _as_dict(theirs)
    job = classad2.parseOne(ours, classad2.ParserType.Old)
    assert job["RequestMemory"] == 2048 and job["BatchQueue"] == "short"
    assert job["BatchRuntime"].eval() == 7200 and job["RoutedTo"] == "batch slurm"
    assert "x509userproxy" not in job
