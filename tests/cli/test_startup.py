"""What the `htgrid` command loads to start: each run of it, and each GAHP server the grid
manager starts (it waits for the server's banner before its first request); and what a
process that imports htgrid without the command (a daemon, a script) loads."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "argv",
    [
        # `htgrid q` of a schedd in another pool: it speaks HTTP (and fails here, after)
        ["q", "-name", "x", "-pool", "127.0.0.1:1"],
        # the condor GAHP as the grid manager starts it: banner, then EOF on stdin
        ["gahp", "condor"],
    ],
)
def test_httpxs_own_command_line_is_not_loaded(argv: list[str]) -> None:
    # httpx imports its command-line tool (click, rich, pygments: ~60 ms) whenever they
    # are installed, which they are with htgrid; htgrid's own processes leave it out.
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "htgrid", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()}
    assert "httpx" in imported  # the probe reached the HTTP client
    assert not imported & {"click", "pygments"}


def test_a_command_that_talks_to_a_queue_loads_no_server_side() -> None:
    # The client needs the security package's errors; its server middleware (starlette)
    # and CA (cryptography) are ~200 ms of every `htgrid q` otherwise. asyncio and the
    # collector's client are only for finding a schedd by name (-name), the queue's store
    # (SQLite) and the submit language only for the daemons and `htgrid submit`: ~35 ms of
    # the others. The pool's settings load, how a job is started and the daemons do not.
    # httpx (with httpcore, h11, ssl, email...: most of a short command's start) is for
    # another pool's queue: the local one is spoken to on its socket without it.
    probe = (
        "import sys\n"
        "from htgrid.cli import build_parser\n"
        "build_parser('q')\n"
        "import htgrid.net.client\n"
        "server_side = ('starlette', 'cryptography', 'uvicorn', 'asyncio', 'sqlite3',\n"
        "               'htgrid.queue.store', 'htgrid.submit._description',\n"
        "               'htgrid.pool._launch', 'htgrid.schedd._daemon', 'htgrid.master',\n"
        "               'htgrid.collector', 'httpx', 'httpcore', 'ssl')\n"
        "print(sorted(m for m in server_side if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["[]"]


@pytest.mark.parametrize(
    "package",
    [
        "htgrid.net.security",
        "htgrid.queue",
        "htgrid.submit",
        "htgrid.pool",
        "htgrid.schedd",
        "htgrid.startd",
        "htgrid.master",
    ],
)
def test_every_name_of_a_package_that_loads_on_demand_is_there_when_asked_for(
    package: str,
) -> None:
    module = importlib.import_module(package)

    assert [name for name in module.__all__ if getattr(module, name, None) is None] == []


def test_the_version_loads_no_command() -> None:
    # `htgrid --version` answers before any command is parsed: it loaded all of them.
    probe = (
        "import sys\n"
        "from htgrid.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('htgrid.cli._')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["htgrid 0.1.0", "[]"]
