"""`htgrid gahp gram`: the gt GAHP server (GRAM, grid types gt2 and gt5) on stdin and stdout.

The grid manager starts it as GT2_GAHP/GT5_GAHP, one per proxy (`--proxy`, or
INITIALIZE_FROM_FILE); a person can type at it:

    $ htgrid gahp gram --proxy /tmp/x509up_u1000
    $GahpVersion: 0.1.0 Nov 28 2026 htgrid\\ GRAM\\ GAHP $
    GRAM_PING 1 ce.example.org/jobmanager-fork
    S
    RESULTS
    S 1
    1 0
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
    """Add the `gram` parser to the `gahp` group's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "gram",
        help="the gt GAHP: jobs on Globus GRAM job managers (gt2, gt5)",
        description="Serve HTCondor's GRAM GAHP commands on stdin/stdout.",
    )
    parser.add_argument("--proxy", help="the X.509 proxy to present")
    parser.add_argument(
        "--ca-dir",
        help="the grid CA directory (default: $X509_CERT_DIR, else /etc/grid-security/certificates)",
    )
    parser.add_argument(
        "--state-dir",
        help="keep the GASS server's pid and URL here, for a GAHP server started after this one",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Serve until QUIT or EOF."""
    from htgrid.backends.gram.server import GramGahp, GramOptions

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="htgrid-gahp: %(levelname)s %(message)s",
    )
    ca_dir = args.ca_dir or os.environ.get("X509_CERT_DIR") or "/etc/grid-security/certificates"
    asyncio.run(
        GramGahp(
            GramOptions(proxy=args.proxy, ca_dir=ca_dir, state_dir=args.state_dir)
        ).serve_stdio()
    )
    return 0
