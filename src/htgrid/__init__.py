"""htgrid: HTCondor's machinery for running jobs beyond the local pool, in Python."""

import sys

from htgrid.errors import HTGridError

__all__ = ["HTGridError", "__version__"]
__version__ = "0.1.0"

# `import httpx` also loads httpx's own command-line client when click and rich are
# installed, as they are beside htgrid (htgrid needs rich, uvicorn click): ~80 ms of the
# start of every process that speaks HTTP (a GAHP server, `htgrid q -name`), for code
# none of them runs. A None entry makes that import fail, and httpx then goes without.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
