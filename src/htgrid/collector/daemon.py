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

from htgrid.client import DEFAULT_PORT
from htgrid.collector._store import DEFAULT_LIFETIME, AdStore
from htgrid.collector.app import create_app
from htgrid.net.security import (
    SERVER_CERT,
    CertRotator,
    PoolCA,
    RotatingServer,
    SecurityConfig,
    ensure_pool_security,
    server_ssl_context,
)
from htgrid.net.server import api_config
from htgrid.pool import ApiLimits, ConfigFile, htgrid_home

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
    tls = server_ssl_context(material.server)
    config = api_config(app, limits, tls=tls, lifespan=True, address=(host, port))
    rotator = CertRotator(PoolCA(security.ca_dir), SERVER_CERT, tls, material.server)
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
