"""The job queue's API: a JSON HTTP API (ASGI) and its client.

The daemon serves `htgrid.net.app.create_app(...)` on its Unix socket, naming callers by
their peer credentials (`htgrid.net._peer`); the command line talks to it with
`ScheddClient`; `locate_schedd` finds another schedd's URL through its pool's
collector. Errors cross the wire as problem documents and come back as the same
`HTGridError` subclasses. This package's top level imports only the client side, so a
command does not pay for loading the server.
"""

from htgrid.net._errors import ApiError, BadRequest, DaemonUnavailable
from htgrid.net._locate import (
    ScheddLocation,
    ScheddNotFound,
    find_schedd,
    find_schedd_async,
    locate_schedd,
    locate_schedd_async,
)
from htgrid.net._wire import Jobs
from htgrid.net.client import ScheddClient, socket_path

__all__ = [
    "ApiError",
    "BadRequest",
    "DaemonUnavailable",
    "Jobs",
    "ScheddClient",
    "ScheddLocation",
    "ScheddNotFound",
    "find_schedd",
    "find_schedd_async",
    "locate_schedd",
    "locate_schedd_async",
    "socket_path",
]
