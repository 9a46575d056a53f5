"""Markers and helpers for the batch back-end tests.

Tests marked `slurm` or `sge` run against the real batch system (.ci/slurm-up.sh,
.ci/sge-up.sh). Where it is not there they are skipped, except under CI=true, where a
missing batch system is a failure: CI must never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs a running Slurm (.ci/slurm-up.sh)")
    config.addinivalue_line("markers", "sge: needs a running Grid Engine (.ci/sge-up.sh)")


def require_lrm(name: str, probe: Sequence[str]) -> None:
    """Skip (or fail under CI=true) unless `probe` runs and succeeds."""
    why = ""
    if shutil.which(probe[0]) is None:
        why = f"{probe[0]} is not installed"
    else:
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=20, check=False)
        except subprocess.TimeoutExpired:
            why = f"{' '.join(probe)} timed out"
        else:
            if done.returncode != 0:
                why = f"{' '.join(probe)} failed: {done.stderr.strip()[:200]}"
    if not why:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is required under CI=true: {why}")
    pytest.skip(f"{name} not available: {why}")


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A Slurm controller that answers."""
    require_lrm("Slurm", ["scontrol", "ping"])


@pytest.fixture(scope="session")
def sge_cluster() -> None:
    """A Grid Engine qmaster that answers."""
    require_lrm("Grid Engine", ["qstat", "-u", "root"])
