"""The daemons' HTTP serving: `GuardedProtocol`, uvicorn's HTTP/1.1 protocol with the
clocks of `_limits`, and `ProblemResponse`, how every API sends a problem document.

`GuardedProtocol` is the one place htgrid relies on uvicorn's internals (uvicorn 0.47 to
0.54; tests/net_remote/test_uvicorn_adapter.py fails if they change): it subclasses
`H11Protocol` and uses its connection's `transport`, `loop`, `client`, `app_state` and
`cycle` (a `RequestResponseCycle`: `more_body`, `response_started`, `response_complete`,
`disconnected`, `message_event`), and extends `connection_made`, `connection_lost`,
`data_received`, `handle_events` and `on_response_complete`. uvicorn offers no public
way to time a request's arrival, nor to give a connection's requests what the kernel
says of its peer. Subclasses add to each request's `scope["state"]` through
`connection_state`, not through uvicorn's `app_state`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, ClassVar, cast

from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from htgrid.net._limits import MIN_BODY_RATE, PROGRESS_KEY
from htgrid.pool import DEFAULT_LIMITS, ApiLimits

__all__ = ["GuardedProtocol", "ProblemResponse", "guarded_protocol"]

_log = logging.getLogger("htgrid.net")


class GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing connections whose requests come too slowly.

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

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        cycle = self.cycle
        if cycle is not before and cycle is not None and not cycle.response_complete:
            # A request's headers are in: its body's clock starts.
            self._disarm()
            if cycle.more_body:
                self._body_start = time.monotonic()
                self._body_bytes = 0
                self._body_line = 0.0
                self._arm(self.limits.body_timeout, self._body_late)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request's cycle
        cycle = self.cycle
        if not self.transport.is_closing() and (cycle is None or cycle.response_complete):
            self._arm(self.limits.header_timeout, self._head_late)

    # -- the clocks -----------------------------------------------------------------------

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
        if cycle is None or not cycle.more_body or cycle.response_complete:
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
        """Answer 408 (unless an answer has begun), close, and tell the app it is gone."""
        if self.transport.is_closing():
            return
        cycle = self.cycle
        started = cycle is not None and cycle.response_started
        if cycle is not None:
            cycle.disconnected = True  # the app's sends are dropped from now on
        if not started:
            self.transport.write(_timeout_response(reason))
        _log.info("closed a connection from %s: %s", self._peer(), reason)
        self.transport.close()
        if cycle is not None:
            cycle.message_event.set()

    def _peer(self) -> str:
        client = self.client
        return f"{client[0]}:{client[1]}" if client else "a local client"


def _timeout_response(reason: str) -> bytes:
    body = json.dumps(
        {
            "type": "urn:htgrid:problem:request-timeout",
            "title": "The request did not arrive in time.",
            "status": 408,
            "detail": reason,
            "error": "RequestTimeout",
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/problem+json\r\n"
        "connection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def guarded_protocol(
    limits: ApiLimits, base: type[GuardedProtocol] = GuardedProtocol
) -> type[GuardedProtocol]:
    """`base` with `limits` (uvicorn makes one protocol object per connection from it)."""
    return cast(type[GuardedProtocol], type(base.__name__, (base,), {"limits": limits}))


class ProblemResponse(JSONResponse):
    """A problem document (RFC 9457), written as ASCII JSON: a detail may quote what a
    client sent, a lone surrogate included, which UTF-8 cannot carry."""

    media_type = "application/problem+json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")
