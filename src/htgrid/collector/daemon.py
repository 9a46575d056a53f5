"""Running the collector: uvicorn serving the app over TLS, callers known by their tokens,
and HTCondor's CEDAR on the same port (`htcondor2.Collector`, condor_status).

`serve()` is the coroutine a program can run next to its other work; `run()` is the
foreground `htgrid collector` command. The pool's security material (key, CA, server
certificate, daemon token) is made if missing (`ensure_pool_security`, as `htgrid up`
does), then the collector presents the pool's server certificate and checks every
caller's bearer token against the pool's keys and trust domain. The certificate is
renewed and reloaded while the collector runs (`CertRotator`), without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import cast

from starlette.applications import Starlette

from htgrid.client import DEFAULT_PORT
from htgrid.collector._cedar import collector_cedar
from htgrid.collector._errors import CollectorError
from htgrid.collector._store import DEFAULT_LIFETIME, AdStore
from htgrid.collector.app import create_app
from htgrid.net.cedar import pool_security
from htgrid.net.security import (
    SERVER_CERT,
    CertRotator,
    PoolCA,
    RotatingServer,
    SecurityConfig,
    ensure_pool_security,
    server_ssl_context,
)
from htgrid.net.server import (
    SHARED_PORT_DIR,
    PeerCertProtocol,
    SharedPort,
    api_config,
    start_shared,
    tcp_listener,
)
from htgrid.pool import ApiLimits, ConfigFile, HomeLayout, htgrid_home, trusted_ca_files

__all__ = ["make_server", "run", "serve", "serve_on"]

_log = logging.getLogger("htgrid.collector")


def make_server(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    home: Path | None = None,
    store: AdStore | None = None,
    default_lifetime: float = DEFAULT_LIFETIME,
    name: str = "htgrid pool",
    housekeeping_interval: float = 60.0,
    limits: ApiLimits | None = None,
) -> RotatingServer:
    """A uvicorn server for a collector of the pool in `home` ($HTGRID_HOME) at
    `host:port`, over TLS (not started); `limits` defaults to the pool's knobs."""
    security = SecurityConfig.load(home)
    material = ensure_pool_security(security)
    if limits is None:
        limits = ConfigFile.read(home if home is not None else htgrid_home()).api_limits()
    app = create_app(
        store if store is not None else AdStore(default_lifetime=default_lifetime),
        name=name,
        address=f"<{host}:{port}>",
        housekeeping_interval=housekeeping_interval,
        security=security,
        limits=limits,
    )
    # A client may present a certificate of a CA the pool trusts (SSL lines map its DN).
    layout = HomeLayout(home if home is not None else htgrid_home())
    tls = server_ssl_context(material.server, client_cas=trusted_ca_files(layout))
    config = api_config(
        app, limits, tls=tls, lifespan=True, address=(host, port), protocol=PeerCertProtocol
    )
    rotator = CertRotator(PoolCA(security.ca_dir), SERVER_CERT, tls, material.server)
    return RotatingServer(config, rotator)


async def serve_on(server: RotatingServer, sock: socket.socket, home: Path | None) -> None:
    """Serve `server`'s app over HTTPS and its store over CEDAR on the listening `sock`,
    until the server stops (`should_exit`) or this is cancelled."""
    app = cast(Starlette, server.config.app)
    where = home if home is not None else htgrid_home()
    security = pool_security(where, "COLLECTOR")
    cedar = collector_cedar(app.state.collector, security)
    tls = server.rotator.context
    # HTCondor's shared port: the collector's port also reaches the daemons behind it
    # (`<host:port?sock=schedd>`), as HTCondor's shared_port daemon on 9618.
    shared = SharedPort("collector", where / "run" / SHARED_PORT_DIR)
    serving = await start_shared(server, sock, "the collector", CollectorError, tls, cedar, shared)
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        server.should_exit = True
        await serving
        raise


def _listen(host: str, port: int) -> socket.socket:
    sock = tcp_listener(host)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector until cancelled."""
    server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
    _log.info("collector listening on %s:%d", host, port)
    home = kwargs.get("home")
    await serve_on(server, _listen(host, port), home if isinstance(home, Path) else None)


def run(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector in the foreground until interrupted (Ctrl-C)."""
    home = kwargs.get("home")

    async def main() -> None:
        server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
        await serve_on(server, _listen(host, port), home if isinstance(home, Path) else None)

    asyncio.run(main())
