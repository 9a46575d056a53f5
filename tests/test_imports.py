"""Importing htgrid as a library changes nothing of the importing program's modules."""

from __future__ import annotations

import subprocess
import sys


def test_importing_htgrid_leaves_sys_modules_alone() -> None:
    code = (
        "import sys\n"
        "import htgrid, htgrid.classad, htgrid.net, htgrid.queue, htgrid.gahp, htgrid.grid\n"
        "print(sorted(k for k, v in sys.modules.items() if v is None))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_htgrid_processes_leave_unused_modules_out() -> None:
    code = (
        "import sys\n"
        "from htgrid._startup import lean_process\n"
        "lean_process()\n"
        "import httpx\n"
        "print('httpx._main' in sys.modules and sys.modules['httpx._main'] is None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "True"
