"""The condor GAHP server starts without what it never runs."""

from __future__ import annotations

import subprocess
import sys


def test_the_gahp_server_loads_no_command_line_client_of_httpx() -> None:
    # httpx loads its own command-line client (click, rich, pygments) when they are
    # installed, as they are beside htgrid: ~80 ms of every GAHP server's start, which
    # the first job of a resource waits for.
    code = (
        "import sys\n"
        "import htgrid.backends.condor.server\n"
        "import httpx\n"
        "print(sorted(m for m in ('click', 'rich', 'pygments') if m in sys.modules))\n"
        "print(callable(httpx.AsyncClient))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]
