"""What `htgrid._startup.lean_process` keeps out is what the libraries would load: if
httpx stops importing its command line as `httpx._main` (or httpcore trio), the names
in `_startup` are stale and this fails."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

_PROBE = """
import sys
if sys.argv[1] == "lean":
    from htgrid._startup import lean_process
    lean_process()
import httpx, httpcore
print(sorted(m for m in ("httpx._main", "click", "trio") if sys.modules.get(m) is not None))
"""


def _loaded(lean: bool) -> str:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, "lean" if lean else "plain"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_httpx_loads_its_command_line_by_that_name_and_httpcore_trio() -> None:
    # click is installed beside htgrid (uvicorn needs it); trio when something brought it.
    trio = ["trio"] if importlib.util.find_spec("trio") is not None else []
    assert _loaded(lean=False) == str(["click", "httpx._main", *trio])


def test_a_lean_process_loads_none_of_them() -> None:
    assert _loaded(lean=True) == "[]"
