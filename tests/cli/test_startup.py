"""What the `htgrid` command loads to start: each run of it, and each GAHP server the grid
manager starts (it waits for the server's banner before its first request); and what a
process that imports htgrid without the command (a daemon, a script) loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import importlib, sys
if sys.argv[1]:
    from htgrid.cli import build_parser
    build_parser(sys.argv[1])
importlib.import_module(sys.argv[2])  # what the command speaks HTTP with
import httpx
print(" ".join(sorted(m for m in ("click", "pygments") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("command", "module"),
    [
        ("q", "htgrid.net.client"),
        ("gahp", "htgrid.backends.condor.server"),
        ("", "htgrid.net.client"),  # no command: the guard is the package's own
        ("", "htgrid.backends.condor.server"),
    ],
)
def test_httpxs_own_command_line_is_not_loaded(command: str, module: str) -> None:
    # httpx imports its command-line tool (click, rich, pygments: ~60 ms) whenever they
    # are installed, which they are with htgrid.
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, command, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out == [""]  # neither
