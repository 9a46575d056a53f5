"""`htgrid web`: the pool in a browser.

    $ htgrid web                 # on the pool's host: a local proxy, as you, no token
    htgrid web: open http://127.0.0.1:40123/web/?key=... (Ctrl-C stops it)
    $ htgrid web -url            # where remote users sign in with a token of the pool

The pages are the schedd's (/web beside its API); the proxy passes the local user's
requests to its Unix socket, where the kernel names the caller, so no token is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

from htgrid.cli._common import EXIT_NO, EXIT_OK
from htgrid.errors import UsageError
from htgrid.pool import HomeLayout, htgrid_home

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `web` to the top-level parser."""
    cmd = commands.add_parser(
        "web",
        help="the pool in a browser: queue, jobs, slots, grid resources, CE routes",
        description=(
            "Serve the pool's web view to this host's browser, as you: a proxy on "
            "127.0.0.1 passes your requests to the pool's socket (no token needed), until "
            "Ctrl-C. Open the URL it prints; it holds a key only your browser gets. Remote "
            "users open the pool's TLS address (-url) and sign in with a token of the pool "
            "(htgrid token create -identity USER@TRUST_DOMAIN)."
        ),
        epilog="example: htgrid web -port 8080   (then open the URL it prints)",
    )
    cmd.add_argument("--home", type=Path, default=None, help="the pool's home ($HTGRID_HOME)")
    cmd.add_argument(
        "-port", "--port", type=int, default=0, help="the local port (default: any free one)"
    )
    cmd.add_argument(
        "-url", "--url", action="store_true", help="print the pool's web address over TLS and exit"
    )
    cmd.set_defaults(handler=_web)


def _web(args: argparse.Namespace) -> int:
    home = args.home.absolute() if args.home else htgrid_home()
    layout = HomeLayout(home)
    if args.url:
        try:
            url = layout.schedd_url_file.read_text().strip()
        except FileNotFoundError:
            print(f"htgrid web: the pool of {home} is not running (htgrid up)", file=sys.stderr)
            return EXIT_NO
        print(f"{url}/web/")
        return EXIT_OK
    if not 0 <= args.port <= 65535:
        raise UsageError(f"-port must be 0 to 65535, not {args.port}")
    socket = layout.schedd_socket
    if not socket.exists():
        print(f"htgrid web: the pool of {home} is not running (htgrid up)", file=sys.stderr)
        return EXIT_NO
    from htgrid.web.proxy import run_proxy

    def ready(url: str) -> None:
        print(f"htgrid web: open {url} (Ctrl-C stops it)", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_proxy(socket, args.port, ready=ready))
    return EXIT_OK
