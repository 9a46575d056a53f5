"""`htgrid gahp condor`: the condor GAHP server (HTCondor-C) on stdin and stdout.

The grid manager starts one per remote schedd and pool; a person can type at it too:

    $ htgrid gahp condor --pool 127.0.0.1:9618 --tokens-dir ~/.htgrid/tokens.d \\
          --ca-file ~/.htgrid/etc/ca/trusted.d/pool-b.crt
    $GahpVersion 2.0.1 Jun 27 2005 Condor\\ GAHP $
    CONDOR_JOB_STATUS_CONSTRAINED 1 htgrid@pool-b true
    S
    RESULTS
    S 1
    1 S NULL 0

HTCondor's own flags (`-f`, `-s <schedd>`, `-P <pool>`) are taken too.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from htgrid._gc import tune_gc
from htgrid.errors import UsageError

__all__ = ["add_arguments", "add_parser", "run"]

_DESCRIPTION = (
    "Serve HTCondor's C-GAHP commands (CONDOR_JOB_*) on stdin/stdout against htgrid job "
    "queues of a remote pool, over HTTPS with tokens."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the `condor` parser to the `gahp` group's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "condor",
        help="the condor GAHP (HTCondor-C): jobs in a remote pool's queue",
        description=_DESCRIPTION,
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The condor GAHP's options."""
    parser.add_argument(
        "-P",
        "--pool",
        metavar="HOST:PORT",
        help="the remote pool's collector, where schedds are looked up by name",
    )
    parser.add_argument(
        "-s",
        "--schedd",
        metavar="NAME",
        help="the schedd a request naming NULL means (default: the pool's first)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="present the (first) token in this file to the remote pool",
    )
    parser.add_argument(
        "--tokens-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="look here for a token issued by the remote pool (repeatable)",
    )
    parser.add_argument(
        "--ca-file",
        action="append",
        default=[],
        metavar="FILE",
        help="trust this CA for the remote daemons' TLS certificates (repeatable; "
        "default: $GAHP_SSL_CAFILE, else the system's CAs)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="network timeout of a connect, read or write (60)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=20,
        metavar="N",
        help="HTTPS connections per remote schedd; more requests wait for one (20)",
    )
    parser.add_argument(
        "--file-workers",
        type=int,
        default=10,
        metavar="N",
        help="stage-ins and stage-outs at once (HTCondor's C_GAHP_MAX_FILE_REQUESTS, 10)",
    )
    parser.add_argument(
        "--accept-limit",
        type=int,
        default=1000,
        metavar="N",
        help="requests of one command held at once before 'F Threads limit reached' (1000)",
    )
    parser.add_argument(
        "--max-line",
        type=int,
        default=500 * 1024,
        metavar="BYTES",
        help="the longest GAHP line read or written (HTCondor's grid manager reads 500 KiB)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more on stderr")
    parser.add_argument("-f", action="store_true", help=argparse.SUPPRESS)  # HTCondor's
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until QUIT, EOF on stdin or SIGTERM."""
    # Imported here for start-up: the server loads to serve, not to build the parser.
    from htgrid.backends.condor._http import RemoteSettings
    from htgrid.backends.condor.server import CondorGahp, CondorOptions

    for name in ("max_connections", "file_workers", "accept_limit"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_line < 1024:
        raise UsageError("--max-line must be at least 1024 bytes")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    ca_files = list(args.ca_file) or [f for f in [os.environ.get("GAHP_SSL_CAFILE")] if f]
    for path in ca_files:
        if not os.path.isfile(path):
            raise UsageError(f"--ca-file {path}: no such file")
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="htgrid-condor-gahp: %(levelname)s %(message)s",
    )
    options = CondorOptions(
        remote=RemoteSettings(
            pool=args.pool,
            default_schedd=args.schedd,
            ca_files=tuple(ca_files),
            timeout=args.timeout,
            max_connections=args.max_connections,
        ),
        token_file=args.token_file,
        token_dirs=tuple(args.tokens_dir),
        file_workers=args.file_workers,
        accept_limit=args.accept_limit,
        max_line=args.max_line,
    )
    tune_gc()
    asyncio.run(_serve(CondorGahp, options))
    return 0


async def _serve(factory: Any, options: Any) -> None:
    gahp = factory(options)
    # What the first request sets up once (~90 ms: httpx's first client, anyio's asyncio
    # back end) is done aside while the grid manager answers the banner: the first ping,
    # which every first submit waits for, does not pay for it.
    warm = asyncio.get_running_loop().run_in_executor(None, _warm_up)
    try:
        await gahp.server().serve_stdio()
    finally:
        await gahp.aclose()
        await warm


def _warm_up() -> None:
    import anyio
    import httpx

    # anyio loads its asyncio back end at its first use in a loop (the first request
    # would): a run of nothing, on a loop of this thread's own, loads it here.
    anyio.run(anyio.sleep, 0)

    # Never used: its first creation loads what every later one needs. Not verifying, so
    # that it does not load the system's CAs (20-30 ms holding the GIL), which no client
    # here uses: they trust the pool's CA files, or build their own default context.
    httpx.AsyncClient(verify=False)
