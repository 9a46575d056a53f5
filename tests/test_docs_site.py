"""The documentation site builds with `mkdocs build --strict`: every page in the nav, every
link and anchor found, and the pages made from the code (the API, the knobs, the
commands' help) rendered from this checkout."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_the_pages_made_from_the_code(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")
        pytest.skip("mkdocs and mkdocs-material are not installed")
    site = tmp_path / "site"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (site / "api" / "index.html").read_text()
    assert "/v1/jobs/{job_id}/output" in api and 'id="schema-problem"' in api
    commands = (site / "reference" / "commands" / "index.html").read_text()
    assert "htgrid ce trace" in commands and "examples:" in commands
    knobs = (site / "coming-from-htcondor" / "index.html").read_text()
    assert "GRIDMANAGER_JOB_PROBE_INTERVAL" in knobs and "htgrid:knobs" not in knobs
    assert "CEDAR against HTTPS" in (site / "bench" / "index.html").read_text()
