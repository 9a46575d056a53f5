"""`htgrid gahp ec2`: the EC2 GAHP server on stdin and stdout.

It takes HTCondor's EC2_GAHP flags, so the grid manager can start it as it starts its own
(`-w <min workers> -m <max workers> -d <debug flags> -f <file>`), plus options of its own:

    $ htgrid gahp ec2
    $GahpVersion: 0.1.0 Nov 21 2026 htgrid\\ EC2\\ GAHP $
    EC2_VM_SERVER_TYPE 1 https://ec2.us-east-1.amazonaws.com /k/access /k/secret
    S
    RESULTS
    S 1
    1 0 Amazon

This module only builds the parser: boto3 is imported when the server starts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from htgrid._args import ArgumentParser
from htgrid._gc import tune_gc
from htgrid._startup import lean_process
from htgrid.errors import UsageError

__all__ = ["add_arguments", "add_parser", "main", "run"]

_DESCRIPTION = (
    "Serve HTCondor's EC2 GAHP commands on stdin/stdout. Each request names the "
    "service URL and the access and secret key files to use."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the `ec2` parser to the `gahp` group's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "ec2",
        help="the EC2 GAHP: virtual machines on EC2 or an EC2-compatible cloud (boto3)",
        description=_DESCRIPTION,
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m htgrid.backends.ec2`: the same server without the rest of `htgrid`."""
    lean_process()
    parser = ArgumentParser(prog="htgrid-ec2-gahp", description=_DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UsageError as err:
        print(f"htgrid-ec2-gahp: {err}", file=sys.stderr)
        return 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The EC2 GAHP's options."""
    parser.add_argument(
        "-m",
        "--max-workers",
        type=int,
        default=10,
        metavar="N",
        help="at most N AWS calls at once for starts, and N for stops and other changes (10)",
    )
    parser.add_argument(
        "--status-workers",
        type=int,
        default=2,
        metavar="N",
        help="at most N status queries at once (2)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=5,
        metavar="N",
        help="HTTP attempts per AWS call; throttling and 5xx answers are retried (5)",
    )
    parser.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        help="region for service URLs that do not name one (default: $AWS_REGION, "
        "$AWS_DEFAULT_REGION, else us-east-1)",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        metavar="MS",
        help="milliseconds between calls to one service and key (HTCondor's "
        "EC2_GAHP_RATE_LIMIT; 0, the default, does not space them)",
    )
    parser.add_argument(
        "--accept-limit",
        type=int,
        default=1000,
        metavar="N",
        help="requests of one command held at once before 'F Threads limit reached' (1000)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    # HTCondor's EC2_GAHP command line; threads are made on demand, files are not kept.
    parser.add_argument("-w", "--min-workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("-d", "--debug", default="", help=argparse.SUPPRESS)
    parser.add_argument("-f", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    parser.add_argument("-l", default=None, help=argparse.SUPPRESS)
    parser.add_argument("-s", default=None, help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until QUIT, EOF on stdin or SIGTERM."""
    try:  # here for start-up: boto3 loads to serve, not to build the parser
        from htgrid.backends.ec2._aws import ClientSettings
        from htgrid.backends.ec2.server import Ec2Gahp, Ec2Options
    except ImportError as err:
        raise UsageError(f"htgrid gahp ec2 needs boto3: pip install 'htgrid[ec2]' ({err})") from err
    for name in ("max_workers", "status_workers", "max_attempts", "accept_limit"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    verbose = args.verbose or "FULLDEBUG" in args.debug or "D_ALL" in args.debug
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if verbose else logging.WARNING,
        format="htgrid-ec2-gahp: %(levelname)s %(message)s",
    )
    options = Ec2Options(
        max_workers=args.max_workers,
        status_workers=args.status_workers,
        accept_limit=args.accept_limit,
        region=args.region,
        rate_limit=max(0.0, args.rate_limit) / 1000.0,
        client=ClientSettings(
            max_attempts=args.max_attempts,
            pool_connections=args.max_workers * 2 + args.status_workers + 2,
        ),
    )
    gahp = Ec2Gahp(options)
    try:
        tune_gc()
        asyncio.run(gahp.server().serve_stdio())
    finally:
        gahp.close()
    return 0
