"""`htgrid gahp batch`: the batch GAHP server on stdin and stdout.

The grid manager starts it as a blahp (`BATCH_GAHP`); a person can type at it too:

    $ htgrid gahp batch --scratch /tmp/gahp
    $GahpVersion: 0.1.0 Nov 21 2026 htgrid\\ batch\\ GAHP $
    BLAH_PING 1 fork
    S
    RESULTS
    S 1
    1 0 No\\ error
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from htgrid._args import ArgumentParser
from htgrid._gc import tune_gc

__all__ = ["main", "register"]


def register(commands: Any) -> None:
    """Add the `gahp` command group to the top-level parser."""
    group = commands.add_parser("gahp", help="run a GAHP server on stdin/stdout")
    sub = group.add_subparsers(dest="gahp_command", metavar="GAHP")
    group.set_defaults(handler=lambda args: _no_subcommand(group))
    _add_gahp_types(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m htgrid.cli._gahp batch ...`: the GAHP servers without the rest of the CLI."""
    parser = ArgumentParser(prog="htgrid gahp")
    _add_gahp_types(parser.add_subparsers(dest="gahp_command", metavar="GAHP"))
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        return _no_subcommand(parser)
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130


def _add_gahp_types(sub: Any) -> None:
    batch = sub.add_parser(
        "batch",
        help="the batch GAHP (the blahp's job): fork, slurm, sge, pbs, lsf",
        description=(
            "Serve the blahp's GAHP commands on stdin/stdout. Jobs' working areas live "
            "under the scratch directory, which must survive a restart of this server."
        ),
    )
    batch.add_argument(
        "--scratch",
        type=Path,
        help="the server's scratch directory (default: $GAHP_TEMP/htgrid-batch, "
        "else $XDG_STATE_HOME/htgrid/batch-gahp)",
    )
    batch.add_argument(
        "--status-window",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="collect status requests this long before one batch-system query (0.5)",
    )
    batch.add_argument(
        "--status-max-age",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="reuse a status answer this long for BLAH_JOB_STATUS (20)",
    )
    batch.add_argument(
        "--status-all-max-age",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="reuse a status answer this long for BLAH_JOB_STATUS_ALL, a poll of all jobs "
        "(1; at most --status-max-age)",
    )
    batch.add_argument(
        "--submit-workers",
        type=int,
        default=50,
        metavar="N",
        help="at most N submits (and N of each other job command) at once (50)",
    )
    batch.add_argument(
        "--status-workers",
        type=int,
        default=1000,
        metavar="N",
        help="at most N status requests at once (1000)",
    )
    batch.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    batch.set_defaults(handler=_batch)
    register_ec2(sub)
    register_azure(sub)
    register_condor(sub)
    register_arc(sub)
    register_gram(sub)


def register_ec2(sub: Any) -> None:
    """Add `htgrid gahp ec2` (its flags live with the back end; boto3 loads only to serve)."""
    from htgrid.backends.ec2 import cli as ec2_cli

    ec2_cli.add_parser(sub)


def register_azure(sub: Any) -> None:
    """Add `htgrid gahp azure` (its flags live with the back end; the SDK loads only to serve)."""
    from htgrid.backends.azure import cli as azure_cli

    azure_cli.add_parser(sub)


def register_condor(sub: Any) -> None:
    """Add `htgrid gahp condor` (HTCondor-C: jobs in a remote pool's queue)."""
    from htgrid.backends.condor import cli as condor_cli

    condor_cli.add_parser(sub)


def register_arc(sub: Any) -> None:
    """Add `htgrid gahp arc` (an ARC CE's REST interface)."""
    from htgrid.backends.arc import cli as arc_cli

    arc_cli.add_parser(sub)


def register_gram(sub: Any) -> None:
    """Add `htgrid gahp gram` (Globus GRAM job managers: gt2, gt5)."""
    from htgrid.backends.gram import cli as gram_cli

    gram_cli.add_parser(sub)


def _no_subcommand(group: argparse.ArgumentParser) -> int:
    group.print_help(sys.stderr)
    return 2


def default_scratch() -> Path:
    """Where the batch GAHP keeps jobs when no --scratch is given."""
    gahp_temp = os.environ.get("GAHP_TEMP")
    if gahp_temp:
        return Path(gahp_temp) / "htgrid-batch"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "htgrid" / "batch-gahp"


def _batch(args: argparse.Namespace) -> int:
    # Imported here for start-up: the server loads to serve, not to build the parser.
    from htgrid.backends.batch.server import BatchGahp, BatchOptions

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="htgrid-gahp: %(levelname)s %(message)s",
    )
    scratch = (args.scratch or default_scratch()).absolute()
    scratch.mkdir(parents=True, exist_ok=True)
    options = BatchOptions(
        scratch=scratch,
        status_window=args.status_window,
        status_max_age=args.status_max_age,
        status_all_max_age=args.status_all_max_age,
        submit_workers=args.submit_workers,
        status_workers=args.status_workers,
    )
    tune_gc()
    asyncio.run(BatchGahp(options).serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
