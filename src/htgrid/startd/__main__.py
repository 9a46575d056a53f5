"""`python -m htgrid.startd --home DIR [--pool HOST:PORT] [--parent-fd N]`: the node's entry.

The master (`htgrid up`) starts it this way, with `--parent-fd` the read end of a pipe
whose other end only the master holds: when the master dies, the pipe reads as closed
and the node stops (so no job outlives the pool that ran it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from htgrid._args import ArgumentParser
from htgrid._startup import lean_process


def main(argv: list[str] | None = None) -> int:
    lean_process()
    parser = ArgumentParser(prog="python -m htgrid.startd")
    parser.add_argument("--home", type=Path, help="the pool's state directory ($HTGRID_HOME)")
    parser.add_argument("--pool", help="the collector's host:port")
    parser.add_argument("--parent-fd", type=int, help="stop when this pipe closes")
    args = parser.parse_args(argv)
    # Imported after `lean_process`, which must come before httpx loads (start-up).
    from htgrid.startd._run import run_startd

    return run_startd(args.home, pool=args.pool, parent_fd=args.parent_fd)


if __name__ == "__main__":
    sys.exit(main())
