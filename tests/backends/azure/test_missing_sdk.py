"""`htgrid gahp azure` without the Azure SDK says what to install, as the ec2 GAHP does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import htgrid

SRC = str(Path(htgrid.__file__).resolve().parents[1])  # the htgrid under test

START = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
from htgrid.cli import main
sys.exit(main(["gahp", "azure"]))
"""


@pytest.mark.parametrize("absent", ["azure", "azure.identity", "azure.mgmt.compute"])
def test_without_the_sdk_the_server_names_the_extra(absent: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", START, absent],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'htgrid[azure]'" in lines[0]
    assert done.stdout == ""  # no GAHP banner: it did not start
