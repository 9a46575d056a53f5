"""Running the collector: uvicorn serving the app over TLS, callers known by their tokens.

`serve()` is the coroutine a program can run next to its other work; `run()` is the
foreground `htgrid collector` command. The pool's security material (key, CA, server
certificate, daemon token) is made if missing (`ensure_pool_security`, as `htgrid up`
does), then the collector presents the pool's server certificate and checks every
caller's bearer token against the pool's keys and trust domain. The certificate is
renewed and reloaded while the collector runs (`CertRotator`), without a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn

from htgrid.collector._store import DEFAULT_LIFETIME, AdStore
from htgrid.collector.app import create_app
from htgrid.collector.client import DEFAULT_PORT
from htgrid.net._guard import guarded_protocol
from htgrid.net._limits import ApiLimits
from htgrid.net.security import (
    SERVER_CERT,
    PoolCA,
    SecurityConfig,
    ensure_pool_security,
    server_ssl_context,
)
from htgrid.net.security._rotate import CertRotator, RotatingServer
from htgrid.schedd._config import ConfigFile, htgrid_home

__all__ = ["make_server", "run", "serve"]

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
) -> uvicorn.Server:
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
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        # A TLS connection's close waits for the peer's close_notify (30 s in asyncio);
        # an idle client that never reads must not hold a stopping collector that long.
        timeout_graceful_shutdown=5,
        ssl_certfile=str(material.server.cert),
        ssl_keyfile=str(material.server.key),
    )
    config.load()
    # The pool's own context (TLS 1.2 at least) in place of the one uvicorn built.
    config.ssl = server_ssl_context(material.server)
    rotator = CertRotator(PoolCA(security.ca_dir), SERVER_CERT, config.ssl, material.server)
    return RotatingServer(config, rotator)


async def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector until cancelled."""
    server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
    _log.info("collector listening on %s:%d", host, port)
    await server.serve()


def run(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector in the foreground until interrupted (Ctrl-C)."""
    server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
    server.run()
