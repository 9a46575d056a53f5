"""What the daemons' HTTP servers take from a client, and for how long.

Every HTTP API htgrid serves (the schedd's on its socket and over TLS, the collector's,
the execute node's) runs on `_guard.GuardedProtocol`, uvicorn's HTTP/1.1 protocol with
two clocks, and reads JSON bodies with `read_body`. The knobs (htgrid.conf; their values
are `htgrid.pool.ApiLimits`):

    MAX_API_REQUEST_MB = 64     the largest JSON request body, in MiB; a larger one is
                                refused with 413 before it is read (tar uploads have
                                MAX_TRANSFER_INPUT_MB instead)
    API_HEADER_TIMEOUT = 20     seconds a request's line and headers may take to arrive,
                                counted from the connection (or the previous answer)
    API_BODY_TIMEOUT = 60       seconds a request body may take, and one more for each
                                KiB that arrived (a body must keep up 1 KiB/s on average)

A client too slow for either (a "slowloris", which holds a connection open with a byte
now and then) is answered 408 and its connection closed, while every other connection
is served as usual. 64 MiB holds the largest submit expected: `htgrid submit` of a
cluster of 100,000 procs, each with its own arguments, input files, output and error
names, sends about 20 MiB; procs that carry their whole ad (HTCondor-C) come 250, or
1 MiB, to a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid.errors import HTGridError
from htgrid.pool import ApiLimits

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["MIN_BODY_RATE", "RequestTooLarge", "read_body"]

#: The average rate a request body must keep up once API_BODY_TIMEOUT has passed.
MIN_BODY_RATE: Final = 1024


class RequestTooLarge(HTGridError):
    """The request body is larger than the daemon takes."""


async def read_body(request: Request, limits: ApiLimits) -> bytes:
    """The whole request body; RequestTooLarge past MAX_API_REQUEST_MB, as soon as its
    declared length says so, else as soon as that much has arrived."""
    cap = limits.max_body
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large(int(declared), limits)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > cap:
            raise _too_large(len(data), limits)
    return bytes(data)


def _too_large(size: int, limits: ApiLimits) -> RequestTooLarge:
    return RequestTooLarge(
        f"the request body is {size} bytes or more, over the limit of MAX_API_REQUEST_MB = "
        f"{limits.max_request_mb} MiB ({limits.max_body} bytes)"
    )
