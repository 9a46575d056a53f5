"""What an htgrid process leaves unloaded: decided by its entry point, never by an import.

`import httpx` also loads httpx's own command-line client when click and rich are
installed, as they are beside htgrid (htgrid needs rich, uvicorn click): ~80 ms of the
start of every process that speaks HTTP (a GAHP server, `htgrid q -name`), for code none
of them runs. httpcore imports trio whenever it is installed, to lock for trio's tasks
too (~67 ms of a GAHP server's start); htgrid's processes run on asyncio alone, and
httpcore goes without it the same way. A None entry in sys.modules makes such an import
fail, and both libraries then do without. Only `main()` functions call this: a program
that imports htgrid as a library keeps its modules as they are.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["lean_process"]

_UNUSED: Final = ("httpx._main", "trio")


def lean_process() -> None:
    """Keep the modules htgrid's own processes never use from being loaded by others."""
    for name in _UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
