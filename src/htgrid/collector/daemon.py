"""Running the collector: uvicorn serving the app on loopback.

`serve()` is the coroutine `htgrid up` can run next to the other daemons; `run()` is the
foreground `htgrid collector` command. Both listen on 127.0.0.1 unless told otherwise:
nothing authenticates callers yet, so the API must not face a network.
"""

from __future__ import annotations

import logging

import uvicorn

from htgrid.collector._store import DEFAULT_LIFETIME, AdStore
from htgrid.collector.app import create_app
from htgrid.collector.client import DEFAULT_PORT

__all__ = ["make_server", "run", "serve"]

_log = logging.getLogger("htgrid.collector")


def make_server(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    store: AdStore | None = None,
    default_lifetime: float = DEFAULT_LIFETIME,
    name: str = "htgrid pool",
    housekeeping_interval: float = 60.0,
) -> uvicorn.Server:
    """A uvicorn server for a collector at `host:port` (not started)."""
    app = create_app(
        store if store is not None else AdStore(default_lifetime=default_lifetime),
        name=name,
        address=f"<{host}:{port}>",
        housekeeping_interval=housekeeping_interval,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", access_log=False
    )
    return uvicorn.Server(config)


async def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector until cancelled."""
    server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
    _log.info("collector listening on %s:%d", host, port)
    await server.serve()


def run(host: str = "127.0.0.1", port: int = DEFAULT_PORT, **kwargs: object) -> None:
    """Serve a collector in the foreground until interrupted (Ctrl-C)."""
    server = make_server(host, port, **kwargs)  # type: ignore[arg-type]
    server.run()
