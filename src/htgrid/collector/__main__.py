"""`python -m htgrid.collector`: a collector process, as the pool's master starts it.

    python -m htgrid.collector --home ~/.htgrid --fd 5 --parent-fd 4

`--fd` is a listening socket the master bound (so the port stays the same across
restarts, and connections made while the collector restarts wait in its backlog);
without it the collector binds `--host` and `--port` itself. It serves TLS with the
certificate of the pool in `--home` ($HTGRID_HOME) and takes that pool's tokens. With
`--parent-fd` it stops when that pipe closes, i.e. when the master is gone. SIGHUP (the
master's reconfig) leaves it running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

from htgrid._aio import on_parent_gone, take_sighup
from htgrid._args import ArgumentParser
from htgrid._gc import tune_gc
from htgrid._privsep import daemon_umask
from htgrid._startup import lean_process
from htgrid.classad import preload_functions
from htgrid.client import DEFAULT_PORT
from htgrid.collector.daemon import make_server, serve_on
from htgrid.net.server import tcp_listener
from htgrid.pool import configure_logging


def main(argv: list[str] | None = None) -> int:
    lean_process()
    parser = ArgumentParser(prog="python -m htgrid.collector")
    parser.add_argument("--home", type=Path, help="the pool's home ($HTGRID_HOME)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--fd", type=int, help="serve on this listening socket")
    parser.add_argument("--parent-fd", type=int, help="stop when this pipe closes")
    parser.add_argument("--lifetime", type=float, default=900.0, help="CLASSAD_LIFETIME")
    parser.add_argument("--name", default="htgrid pool")
    args = parser.parse_args(argv)
    daemon_umask()
    configure_logging()
    sock = socket.socket(fileno=args.fd) if args.fd is not None else None
    host, port = sock.getsockname()[:2] if sock is not None else (args.host, args.port)
    server = make_server(host, port, home=args.home, default_lifetime=args.lifetime, name=args.name)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        # condor_reconfig: what the collector takes live (DENY_*, ALLOW_*, the map file)
        # it reads again after each edit; SIGHUP must only not end it.
        take_sighup(
            loop,
            lambda: logging.getLogger("htgrid.collector").info(
                "reconfig: DENY_*, ALLOW_* and the map file are read again as they change"
            ),
        )
        if args.parent_fd is not None:

            def parent_gone() -> None:
                logging.getLogger("htgrid.collector").warning("the master is gone: stopping")
                server.should_exit = True

            on_parent_gone(loop, args.parent_fd, parent_gone)
        logging.getLogger("htgrid.collector").info(
            "htgrid collector (pid %d) listening on %s:%d", os.getpid(), host, port
        )
        listener = sock
        if listener is None:
            listener = tcp_listener(host)
            listener.bind((host.strip("[]"), port))
            listener.listen(128)
        await serve_on(server, listener, args.home)

    preload_functions()
    tune_gc()
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
