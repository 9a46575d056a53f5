"""The `htgrid` command.

Exit codes a script can rely on: 0 success, 1 a negative answer (no match, false, no
such job, not your job, no daemon running, some of several jobs not acted on), 2 bad
usage or input (the message names the file, line or column), 3 an internal error. A reader
that closes the pipe early (`htgrid q | head`) ends the command quietly, with 141 (128 +
SIGPIPE) as a C tool would have.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Final

from htgrid import __version__
from htgrid._args import ArgumentParser
from htgrid._startup import lean_process
from htgrid.errors import HTGridError

__all__ = ["main"]

EXIT_OK = 0
EXIT_NO = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_PIPE = 128 + 13  # SIGPIPE


#: Each command word and the module that registers it: a command imports only its own
#: module, so that `htgrid gahp condor` (started per remote pool) or `htgrid q` does not
#: pay for the web server, the submit language and the rest at every start.
_MODULES: Final = {
    "classad": "_classad",
    "gahp": "_gahp",
    "gridmanager": "_grid",
    "collector": "_status",
    "status": "_status",
    "advertise": "_status",
    "startd": "_startd",
    "token": "_token",
    "trust": "_trust",
    "config_val": "_config_val",
    "up": "_pool",
    "down": "_pool",
    "reconfig": "_pool",
    "submit": "_submit",
    "q": "_q",
    "rm": "_act",
    "hold": "_act",
    "release": "_act",
    "qedit": "_act",
    "history": "_history",
    "wait": "_wait",
    "job_router": "_router",
    "job_router_info": "_router",
    "transform_ads": "_router",
    "web": "_web",
    "annex": "_annex",
    "router_q": "_router",
    "ce": "_ce",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone when it is one of them."""
    parser = ArgumentParser(
        prog="htgrid", description="HTCondor's grid machinery: ClassAds, queue, grid jobs."
    )
    parser.add_argument("--version", action="version", version=f"htgrid {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command in _MODULES:
        names = [_MODULES[command]]
    elif command == "--version":  # answered before any command is parsed
        names = []
    else:  # help, a typo: every command, in the order `htgrid --help` lists them
        names = list(dict.fromkeys(_MODULES.values()))
    for name in names:
        importlib.import_module(f"htgrid.cli.{name}").register(commands)
    if names:  # --version loads no more than it needs
        importlib.import_module("htgrid.cli._examples").attach(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    lean_process()
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        status = int(handler(args))
        sys.stdout.flush()  # here, where a closed pipe is still ours to handle
        return status
    except BrokenPipeError:
        return _pipe_closed()
    except HTGridError as err:
        print(f"htgrid: {err}", file=sys.stderr)
        return EXIT_NO if _negative(err) else EXIT_USAGE
    except OSError as err:
        print(f"htgrid: {err.strerror or err}: {err.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception:  # a bug: say so, with what a report needs
        print("htgrid: internal error (please report it with what follows):", file=sys.stderr)
        traceback.print_exc()
        return EXIT_INTERNAL


def _pipe_closed() -> int:
    """The reader of stdout went away (`htgrid q | head`): end quietly, as a C tool that
    SIGPIPE ends, with its status (128 + 13)."""
    # What is still buffered would fail again when Python flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (a test's StringIO): nothing to flush
        pass
    return EXIT_PIPE


def _negative(err: HTGridError) -> bool:
    """Whether `err` is a negative answer (no daemon, no such job, not yours), not bad input."""
    # Imported here, not at the top: a GAHP server or `htgrid classad` never needs them.
    from htgrid.net import DaemonUnavailable
    from htgrid.queue import JobNotFound, NotAuthorized

    return isinstance(err, (DaemonUnavailable, JobNotFound, NotAuthorized))


if __name__ == "__main__":
    sys.exit(main())
