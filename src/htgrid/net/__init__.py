"""The job queue's API: a JSON HTTP API (ASGI) and its client; and what every daemon's
HTTP API is built from (`htgrid.net.server`) and secured with (`htgrid.net.security`).

The daemon serves `htgrid.net.app.create_app(...)` on its Unix socket, naming callers by
their peer credentials (`htgrid.net.server.peercred_identity`); the command line talks to
it with `ScheddClient`. Errors cross the wire as problem documents and come back as the
same `HTGridError` subclasses. This package's top level imports only the client side, so
a command does not pay for loading the server. Finding a schedd by name through its
pool's collector is the collector's (`htgrid.collector.locate_schedd`).
"""

from htgrid.net._errors import (
    ApiError,
    BadRequest,
    CedarError,
    DaemonUnavailable,
    RequestTooLarge,
    SandboxTooLarge,
)
from htgrid.net._wire import Jobs, ad_from_json
from htgrid.net.client import ScheddClient, socket_path

__all__ = [
    "ApiError",
    "BadRequest",
    "CedarError",
    "DaemonUnavailable",
    "Jobs",
    "RequestTooLarge",
    "SandboxTooLarge",
    "ScheddClient",
    "ad_from_json",
    "socket_path",
]
