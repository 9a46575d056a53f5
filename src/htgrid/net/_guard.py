"""The daemons' HTTP serving: `GuardedProtocol`, uvicorn's HTTP/1.1 protocol with the
clocks of `_limits`, and `ProblemResponse`, how every API sends a problem document.

uvicorn has two HTTP/1.1 protocols: on httptools (llhttp, in C) and on h11 (in Python:
twice the server's CPU a small request, bench/api_requests.py). `HTTP_PROTOCOL` is the
first when httptools can be imported, else the second; `guarded_protocol` puts the guard,
written once, on either (`GuardedProtocol` is a mixin: its methods extend uvicorn's).

The guard is the one place htgrid relies on uvicorn's internals (uvicorn 0.47 to 0.54;
tests/net_remote/test_uvicorn_adapter.py fails, for either protocol, if they change):
the connection's `transport`, `loop`, `client`, `app_state`, `scope` (the request being
parsed) and `cycle` (the last request whose head is in: a `RequestResponseCycle`, with
`scope`, `more_body`, `keep_alive`, `response_started`, `response_complete`,
`disconnected`, `message_event`), httptools' `pipeline` (requests waiting for the one
served), and it extends `connection_made`, `connection_lost`, `data_received` and
`on_response_complete`. uvicorn offers no public way to time a request's arrival, nor
to give a connection's requests what the kernel says of its peer. Subclasses add to
each request's `scope["state"]` through `connection_state`, not through `app_state`.

What the two parsers do differently, the guard makes the same:
- a request's head is capped at MAX_HEAD bytes (431; llhttp has no cap, h11 is given
  the same one and answers its own 400);
- a request asking to switch protocols (`Upgrade:`; htgrid serves no WebSocket) is
  answered on HTTP/1.1 and its connection closed after it: llhttp stops parsing the
  connection at it, and drops its body, so one with a body is refused (400).
What they still do differently, within HTTP/1.1: h11 takes a bare LF as a line's end,
a folded header line and both Content-Length and chunks (llhttp refuses them: 400);
llhttp takes a request without Host (h11 refuses it) and keeps a header value's
trailing blanks (h11 strips them).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from htgrid.net._limits import MAX_HEAD, MIN_BODY_RATE, PROGRESS_KEY
from htgrid.pool import DEFAULT_LIMITS, ApiLimits

__all__ = [
    "HTTP_PROTOCOL",
    "GuardedProtocol",
    "ProblemResponse",
    "guarded_protocol",
    "http_protocol",
]

_log = logging.getLogger("htgrid.net")


def http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol on httptools when it can be imported, else on h11."""
    try:
        importlib.import_module("httptools")
        module = importlib.import_module("uvicorn.protocols.http.httptools_impl")
    except ImportError:
        return H11Protocol
    return cast(type[asyncio.Protocol], module.HttpToolsProtocol)


#: The protocol every API is served on (`http_protocol()`, chosen once).
HTTP_PROTOCOL: Final = http_protocol()

if TYPE_CHECKING:
    # What the guard is checked against; both of uvicorn's protocols have these names.
    _Uvicorn = H11Protocol
else:
    _Uvicorn = object


class GuardedProtocol(_Uvicorn):
    """The guard of uvicorn's HTTP/1.1 protocol (a mixin: `guarded_protocol` puts it on
    one), closing connections whose requests come too slowly or too large.

    The head clock runs from the connection (or the end of the previous answer) until a
    request's headers are in; the body clock from then until its body is in, its
    deadline moving one second later for each MIN_BODY_RATE bytes that arrive, and, for
    a streamed body, to API_BODY_TIMEOUT after its last whole line at the latest.
    """

    limits: ClassVar[ApiLimits] = DEFAULT_LIMITS

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        state = self.connection_state(transport)
        # uvicorn copies app_state into each request's scope["state"]: a copy of its own
        # gives this connection's requests what is known of their peer, and the hook a
        # streamed body's reader calls for each whole line (`_limits.read_lines`).
        self.app_state = {**self.app_state, **state, PROGRESS_KEY: self._body_progress}
        self._guard: Any = None  # the TimerHandle of the clock running
        self._served: Any = None  # the request served whose head was taken in
        self._head_bytes = 0  # of the head being parsed
        self._body_start = 0.0
        self._body_bytes = 0
        self._body_line = 0.0  # when the last whole line of a streamed body came
        self._arm(self.limits.header_timeout, self._head_late)

    def connection_state(self, transport: Any) -> dict[str, Any]:
        """What each request on this connection finds in its `scope["state"]` besides
        the app's (none here)."""
        return {}

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._body_bytes += len(data)
        super().data_received(data)
        if self.transport.is_closing():
            return
        cycle = self.cycle
        scope = self.scope
        if scope is not None and (cycle is None or cycle.scope is not scope):
            # A request's head has begun and is not in yet (httptools parses it as it
            # comes, h11 only once it is whole, under a cap of its own).
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                self._refuse(
                    431,
                    "The request's head is too large.",
                    f"the request line and headers are over {MAX_HEAD} bytes",
                )
                return
        else:
            self._head_bytes = 0
        self._settle()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if not self.transport.is_closing():
            self._settle()

    # -- the clocks -----------------------------------------------------------------------

    def _settle(self) -> None:
        """Run the clock of where the connection is: a head awaited, or the body of the
        request served arriving (none while its app runs)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            if self._served is not None or self._guard is None:
                self._served = None
                self._arm(self.limits.header_timeout, self._head_late)
            return
        if cycle is self._served or getattr(self, "pipeline", None):
            return  # known, or waiting behind the request served (httptools)
        self._served = cycle
        self._disarm()
        if not self._head_taken(cycle) or not cycle.more_body:
            return
        self._body_start = time.monotonic()
        self._body_bytes = 0
        self._body_line = 0.0
        self._arm(self.limits.body_timeout, self._body_late)

    def _head_taken(self, cycle: Any) -> bool:
        """Whether a request, its head in and its app not yet run, is served: one that
        asks to switch protocols is answered on HTTP/1.1, and its connection closed
        after it (httptools parses nothing more of it); with a body, which httptools
        drops, it is refused."""
        headers = cycle.scope["headers"]
        if not any(name == b"upgrade" for name, _ in headers):
            return True
        if any(
            (name == b"content-length" and value.strip() != b"0") or name == b"transfer-encoding"
            for name, value in headers
        ):
            self._refuse(
                400,
                "The request asks to switch protocols.",
                "this API speaks HTTP/1.1 only: send the request without its Upgrade header",
            )
            return False
        cycle.keep_alive = False
        return True

    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._guard = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        guard = getattr(self, "_guard", None)
        if guard is not None:
            guard.cancel()
            self._guard = None

    def _head_late(self) -> None:
        self._guard = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return  # a request is in hand: its body's clock, or none, applies
        self._cut_off(
            f"the request's headers did not arrive within API_HEADER_TIMEOUT = "
            f"{self.limits.header_timeout:g} s"
        )

    def _body_late(self) -> None:
        self._guard = None
        cycle = self.cycle
        if cycle is not self._served or not cycle.more_body or cycle.response_complete:
            return
        deadline = max(
            self._body_start + self.limits.body_timeout + self._body_bytes / MIN_BODY_RATE,
            self._body_line + self.limits.body_timeout,
        )
        left = deadline - time.monotonic()
        if left > 0:
            self._arm(left, self._body_late)
            return
        self._cut_off(
            f"the request body did not arrive within API_BODY_TIMEOUT = "
            f"{self.limits.body_timeout:g} s (and 1 s more per {MIN_BODY_RATE} bytes; a "
            "streamed body: of its last whole line)"
        )

    def _body_progress(self) -> None:
        """A whole line of a streamed body came: its clock runs from here again."""
        self._body_line = time.monotonic()

    def _cut_off(self, reason: str) -> None:
        self._refuse(408, "The request did not arrive in time.", reason)

    def _refuse(self, status: int, title: str, reason: str) -> None:
        """Answer `status`, close, and tell the app of the request in hand (if any) that
        its client is gone. Nothing is answered once its answer has begun, nor, for a
        timeout, on a kept connection between requests (a client may have just sent
        one: it would take the 408 for that one's answer)."""
        if self.transport.is_closing():
            return
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            answer = not cycle.response_started
            cycle.disconnected = True  # the app's sends are dropped from now on
        else:
            answer = cycle is None or status != 408
        if answer:
            self.transport.write(_problem(status, title, reason))
        _log.info("closed a connection from %s: %s", self._peer(), reason)
        self.transport.close()
        if cycle is not None:
            cycle.message_event.set()

    def _peer(self) -> str:
        client = self.client
        return f"{client[0]}:{client[1]}" if client else "a local client"


_PROBLEMS: Final = {
    400: ("Bad Request", "bad-request", "BadRequest"),
    408: ("Request Timeout", "request-timeout", "RequestTimeout"),
    431: ("Request Header Fields Too Large", "request-head-too-large", "RequestHeadTooLarge"),
}


def _problem(status: int, title: str, reason: str) -> bytes:
    phrase, slug, error = _PROBLEMS[status]
    body = json.dumps(
        {
            "type": f"urn:htgrid:problem:{slug}",
            "title": title,
            "status": status,
            "detail": reason,
            "error": error,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "content-type: application/problem+json\r\n"
        "connection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def guarded_protocol(
    limits: ApiLimits,
    base: type[GuardedProtocol] = GuardedProtocol,
    http: type[asyncio.Protocol] = HTTP_PROTOCOL,
) -> type[GuardedProtocol]:
    """`base` (the guard, or a subclass of it) on uvicorn's protocol `http`, with
    `limits` (uvicorn makes one protocol object per connection from it)."""
    made = type(base.__name__, (base, http), {"limits": limits})
    return cast(type[GuardedProtocol], made)


class ProblemResponse(JSONResponse):
    """A problem document (RFC 9457), written as ASCII JSON: a detail may quote what a
    client sent, a lone surrogate included, which UTF-8 cannot carry."""

    media_type = "application/problem+json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")
