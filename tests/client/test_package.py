"""htgrid.client loads its names on demand, and imports no daemon package: the condor
GAHP server, a separate process, may import it."""

from __future__ import annotations

import subprocess
import sys

import htgrid.client


def test_every_name_is_there_when_asked_for() -> None:
    assert [n for n in htgrid.client.__all__ if getattr(htgrid.client, n, None) is None] == []


def test_the_client_side_imports_no_daemon_nor_server_side() -> None:
    probe = (
        "import sys, htgrid.client as c\n"
        "print(sorted(m for m in ('httpx', 'httpcore') if m in sys.modules))\n"
        "for name in c.__all__: getattr(c, name)\n"
        "daemons = ('htgrid.net', 'htgrid.collector', 'htgrid.schedd', 'htgrid.startd',\n"
        "           'htgrid.queue', 'htgrid.grid', 'starlette', 'uvicorn', 'cryptography')\n"
        "print(sorted(m for m in daemons if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["[]", "[]"]
