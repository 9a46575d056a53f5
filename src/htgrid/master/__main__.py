"""`python -m htgrid.master [--home DIR] [--background] [--no-execute]`: the daemon's entry.

`htgrid up` runs it with `--background`: it forks before importing anything heavy, the
parent prints the daemon's pid and exits, and the child starts a new session (no
terminal, no signals from the shell that started it) and runs the daemon.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from htgrid._args import ArgumentParser
from htgrid._startup import lean_process


def main(argv: list[str] | None = None) -> int:
    lean_process()
    parser = ArgumentParser(prog="python -m htgrid.master")
    parser.add_argument("--home", type=Path, help="the pool's state directory ($HTGRID_HOME)")
    parser.add_argument(
        "--background", action="store_true", help="detach and run in the background"
    )
    parser.add_argument("--no-execute", action="store_true", help="run no execute node (no STARTD)")
    args = parser.parse_args(argv)
    if args.background:
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            return 0
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)  # stdout was the pipe the pid went to; the log (stderr) from now on
    # Imported after the fork, for start-up: `htgrid up` waits for the pid it prints.
    from htgrid.master._run import run_daemon

    return run_daemon(args.home, execute=not args.no_execute)


if __name__ == "__main__":
    sys.exit(main())
