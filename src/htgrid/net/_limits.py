"""What the daemons' HTTP servers take from a client, and for how long.

Every HTTP API htgrid serves (the schedd's on its socket and over TLS, the collector's,
the execute node's) runs on `_guard.GuardedProtocol`, uvicorn's HTTP/1.1 protocol with
two clocks and a cap on a request's head (MAX_HEAD: 431 past it), and reads JSON bodies
with `read_body`. The knobs (htgrid.conf; their values are `htgrid.pool.ApiLimits`):

    MAX_API_REQUEST_MB = 64     the largest JSON request body, in MiB; a larger one is
                                refused with 413 before it is read (tar uploads have
                                MAX_TRANSFER_INPUT_MB instead)
    API_HEADER_TIMEOUT = 20     seconds a request's line and headers may take to arrive,
                                counted from the connection (or the previous answer)
    API_BODY_TIMEOUT = 60       seconds a request body may take, and one more for each
                                KiB that arrived (a body must keep up 1 KiB/s on average)

A client too slow for either (a "slowloris", which holds a connection open with a byte
now and then) is answered 408 and its connection closed, while every other connection
is served as usual. 64 MiB holds the largest submit expected in one JSON body: procs
that carry their whole ad (HTCondor-C) come 250, or 1 MiB, to a request.

A streamed body (NDJSON, `read_lines`: `htgrid submit` sends a cluster's procs so, as it
builds them) is read a line at a time: MAX_API_REQUEST_MB caps each line, not the whole,
which has no size of its own (the daemon stages what it reads, it does not hold it). Its
clock runs as long as whole lines keep coming: each moves its deadline API_BODY_TIMEOUT
past it, so a submit of a million procs, however long its client takes to make them, is
not cut off while it makes progress, and one that stops mid-line is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Final

from htgrid.errors import HTGridError
from htgrid.pool import ApiLimits

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "MAX_HEAD",
    "MIN_BODY_RATE",
    "PROGRESS_KEY",
    "RequestTooLarge",
    "read_body",
    "read_lines",
]

#: The largest request line and headers taken, in bytes (a bearer token is a few KiB).
MAX_HEAD: Final = 64 * 1024
#: The average rate a request body must keep up once API_BODY_TIMEOUT has passed.
MIN_BODY_RATE: Final = 1024
#: Where a request's state holds its connection's "a whole line came" (`read_lines`).
PROGRESS_KEY: Final = "htgrid.body_progress"


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


def _too_large(size: int, limits: ApiLimits, what: str = "") -> RequestTooLarge:
    return RequestTooLarge(
        f"{what}the request body is {size} bytes or more, over the limit of "
        f"MAX_API_REQUEST_MB = "
        f"{limits.max_request_mb} MiB ({limits.max_body} bytes)"
    )


async def read_lines(request: Request, limits: ApiLimits) -> AsyncIterator[bytes]:
    """The lines of the request body as they arrive (empty ones skipped); RequestTooLarge
    for a line past MAX_API_REQUEST_MB. Each whole line tells the connection's clock
    that the body makes progress."""
    cap = limits.max_body
    progress: Callable[[], None] | None = request.scope.get("state", {}).get(PROGRESS_KEY)
    rest = bytearray()
    async for chunk in request.stream():
        end = chunk.rfind(b"\n")
        if end < 0:
            rest += chunk
        else:
            rest += chunk[:end]
            lines = rest.split(b"\n")
            rest = bytearray(chunk[end + 1 :])
            for line in lines:
                if len(line) > cap:
                    raise _too_large(len(line), limits, "a line of ")
                if line.strip():
                    if progress is not None:
                        progress()
                    yield bytes(line)
        if len(rest) > cap:
            raise _too_large(len(rest), limits, "a line of ")
    if rest.strip():
        yield bytes(rest)
