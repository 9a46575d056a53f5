"""`htgrid gahp arc`: the ARC CE GAHP server on stdin and stdout.

The grid manager starts it as ARC_GAHP, one per credential (`--proxy` or `--token-file`;
INITIALIZE_FROM_FILE and UPDATE_TOKEN work too); a person can type at it:

    $ htgrid gahp arc --proxy /tmp/x509up_u1000
    $GahpVersion: 0.1.0 Nov 28 2026 htgrid\\ ARC\\ GAHP $
    ARC_PING 1 https://ce.example.org/arex
    S
    RESULTS
    S 1
    1 200 OK
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the `arc` parser to the `gahp` group's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "arc",
        help="the ARC GAHP: jobs on a NorduGrid ARC CE through its REST interface",
        description="Serve HTCondor's ARC CE GAHP commands on stdin/stdout.",
    )
    parser.add_argument("--proxy", help="the X.509 proxy to present (a TLS client certificate)")
    parser.add_argument("--token-file", help="a file holding the bearer token to present")
    parser.add_argument(
        "--ca-dir",
        help="the grid CA directory (default: $X509_CERT_DIR, else /etc/grid-security/certificates)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=100,
        metavar="N",
        help="requests of each command at once (100)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up on one HTTP request after this long (60)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Serve until QUIT or EOF."""
    from htgrid.backends.arc.server import ArcGahp, ArcOptions

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="htgrid-gahp: %(levelname)s %(message)s",
    )
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    ca_dir = args.ca_dir or os.environ.get("X509_CERT_DIR") or "/etc/grid-security/certificates"
    options = ArcOptions(
        proxy=args.proxy,
        token_file=args.token_file,
        ca_dir=ca_dir,
        timeout=args.timeout,
        workers=args.workers,
    )
    asyncio.run(ArcGahp(options).serve_stdio())
    return 0
