"""The `htgrid` command.

Exit codes a script can rely on: 0 success, 1 a negative answer (no match, false, no
such job, not your job, no daemon running, some of several jobs not acted on), 2 bad
usage or input (the message names the file, line or column), 3 an internal error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from htgrid.errors import HTGridError

__all__ = ["main"]

EXIT_OK = 0
EXIT_NO = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    from htgrid import __version__
    from htgrid.cli import (
        _act,
        _classad,
        _config_val,
        _gahp,
        _grid,
        _history,
        _pool,
        _q,
        _startd,
        _status,
        _submit,
        _token,
        _trust,
        _wait,
    )

    parser = argparse.ArgumentParser(
        prog="htgrid", description="HTCondor's grid machinery: ClassAds, queue, grid jobs."
    )
    parser.add_argument("--version", action="version", version=f"htgrid {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _classad.register(commands)
    _gahp.register(commands)
    _grid.register(commands)
    _status.register(commands)  # collector, status, advertise
    _startd.register(commands)  # the execute node
    _token.register(commands)  # token create, list, revoke
    _trust.register(commands)  # trust add, list, remove (other pools' CAs)
    _config_val.register(commands)  # the pool's knobs
    for jobs in (_pool, _submit, _q, _act, _history, _wait):  # the job queue's commands
        jobs.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from htgrid.net import DaemonUnavailable
    from htgrid.queue import JobNotFound, NotAuthorized

    try:
        return int(handler(args))
    except (DaemonUnavailable, JobNotFound, NotAuthorized) as err:
        print(f"htgrid: {err}", file=sys.stderr)  # a negative answer, not bad input
        return EXIT_NO
    except HTGridError as err:
        print(f"htgrid: {err}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        print(f"htgrid: {err.strerror or err}: {err.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
