"""`htgrid gahp azure`: the Azure GAHP server on stdin and stdout.

The grid manager starts it as AZURE_GAHP; a person can type at it too:

    $ htgrid gahp azure
    $GahpVersion: 0.1.0 Nov 21 2026 htgrid\\ Azure\\ GAHP $
    AZURE_PING 1 /home/me/azure.auth 0123-...-cdef
    S
    RESULTS
    S 1
    1 NULL

This module only builds the parser: the Azure SDK is imported when the server starts.
The CA bundle to trust comes from --ca-file, else GAHP_SSL_CAFILE (which the grid manager
sets), else the system's.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import sys
from typing import Any

from htgrid._gc import tune_gc
from htgrid.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the `azure` parser to the `gahp` group's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "azure",
        help="the Azure GAHP: virtual machines and scale sets on Microsoft Azure",
        description=(
            "Serve HTCondor's Azure GAHP commands on stdin/stdout. Each request names an "
            "auth file (service principal) and a subscription."
        ),
    )
    counts = (
        ("--create-workers", 20, "VM creations at once"),
        ("--delete-workers", 20, "VM deletions at once"),
        ("--list-workers", 4, "VM lists at once"),
        ("--vmss-workers", 8, "requests of each scale-set command at once"),
        ("--retries", 3, "azure-core retries of a throttled or failed call before reporting it"),
    )
    for flag, default, text in counts:
        parser.add_argument(
            flag, type=int, default=default, metavar="N", help=f"{text} ({default})"
        )
    parser.add_argument(
        "--timeout",
        type=float,
        default=540.0,
        metavar="SECONDS",
        help="give up on a request after this long, as a transient error (540)",
    )
    parser.add_argument(
        "--retry-backoff",
        type=float,
        default=0.8,
        metavar="SECONDS",
        help="back-off factor between those retries (0.8)",
    )
    parser.add_argument(
        "--polling-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="poll long-running operations this often when Azure names no Retry-After (5)",
    )
    parser.add_argument("--ca-file", help="CA bundle to trust (default: $GAHP_SSL_CAFILE)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    parser.set_defaults(handler=run)
    return parser


#: The Azure SDK's modules the server uses (the `htgrid[azure]` extra installs them).
_SDK = (
    "azure.core",
    "azure.identity",
    "azure.mgmt.compute",
    "azure.mgmt.keyvault",
    "azure.mgmt.network",
    "azure.mgmt.resource",
)


def _require_sdk() -> None:
    """UsageError naming the extra to install when a module of the SDK is missing (found,
    not imported: the management clients load when a request first needs them)."""
    missing = []
    for name in _SDK:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a None entry
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise UsageError(
            "htgrid gahp azure needs the Azure SDK: pip install 'htgrid[azure]' "
            f"(missing: {', '.join(missing)})"
        )


def run(args: argparse.Namespace) -> int:
    """Serve until QUIT or EOF."""
    _require_sdk()
    # Imported here for start-up: the SDK loads to serve, not to build the parser.
    from htgrid.backends.azure._session import ClientOptions
    from htgrid.backends.azure.server import AzureGahp, AzureOptions

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="htgrid-gahp: %(levelname)s %(message)s",
    )
    if not args.verbose:
        # azure-core logs every HTTP request at INFO; stderr goes to the grid manager's log.
        logging.getLogger("azure").setLevel(logging.WARNING)
    options = AzureOptions(
        clients=ClientOptions(
            ca_file=args.ca_file or os.environ.get("GAHP_SSL_CAFILE") or None,
            retries=args.retries,
            retry_backoff=args.retry_backoff,
            polling_interval=args.polling_interval,
        ),
        timeout=args.timeout,
        create_workers=args.create_workers,
        delete_workers=args.delete_workers,
        list_workers=args.list_workers,
        vmss_workers=args.vmss_workers,
    )
    tune_gc()
    asyncio.run(AzureGahp(options).serve_stdio())
    # QUIT means "terminate as quickly as possible". Nothing is left to save, yet worker
    # threads may still be inside Azure calls and Python's teardown of the SDK's modules
    # alone takes about a second: leave now.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
