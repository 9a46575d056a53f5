"""The client's asynchronous requests, from request id to result.

The client's line level writes a request line and matches its return line (S, E or F) first
in, first out; a `Dispatcher` does what the grid manager does above that: numbers requests
(`RequestIds`), keeps at most `max_pending` at the server and queues the rest (new work
behind work under way), lowers the limit on `F Threads limit reached`, and hands each
RESULTS line to its caller by request id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from htgrid.gahp._codec import Reply, Result, encode_request
from htgrid.gahp._errors import GahpError, GahpRequestRefused, GahpServerExited, LocalGahpError
from htgrid.gahp._ids import RequestIds
from htgrid.gahp._session import Lanes, Pending, Waiter

__all__ = ["Dispatcher"]

# The client's logger: an admin's logging configuration names the client, not its parts.
log = logging.getLogger("htgrid.gahp.client")


class Dispatcher:
    """The asynchronous requests of one GAHP client.

    `send` writes a request's line and returns the wait for its return line; `accepting`
    says whether the server still takes requests (nothing is sent once it does not).
    """

    def __init__(
        self,
        max_pending: int,
        send: Callable[[Pending], Waiter],
        accepting: Callable[[], bool],
        pid: int | None = None,
    ) -> None:
        self._max_pending = max_pending
        self._send = send
        self._accepting = accepting
        self._pid = pid
        self._ids = RequestIds()
        self._requests: dict[int, Pending] = {}
        self._queue: Lanes[Pending] = Lanes()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Requests at the server whose results have not come back."""
        return self._in_flight

    @property
    def max_pending(self) -> int:
        """The current in-flight limit (lowered when the server says it is overloaded)."""
        return self._max_pending

    def submit(self, name: str, args: Sequence[str], *, later: bool = False) -> Pending:
        """Number a request, queue it and send what there is room for; await its `result`.

        A `later` request (new work, a submit) waits behind the others still queued.
        """
        request_id = self._ids.allocate()
        try:
            line = encode_request(name, args, request_id)
        except LocalGahpError:
            self._ids.release(request_id)
            raise
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        pending = Pending(request_id, name, line, future, later=later)
        self._requests[request_id] = pending
        self._queue.append(pending, later=later)
        self.pump()
        return pending

    def pump(self) -> None:
        """Send queued requests while there is room."""
        while self._queue and self._in_flight < self._max_pending and self._accepting():
            pending = self._queue.popleft()
            if pending.abandoned:
                self._forget(pending)
                continue
            try:
                self._issue(pending)
            except GahpError:
                return

    def abandon(self, pending: Pending) -> None:
        """The caller gave up on `pending` (a timeout or a cancellation)."""
        pending.abandoned = True
        if self._queue.remove(pending):
            self._forget(pending)
        elif pending.at_server:
            # The id stays reserved until the result arrives (the grid manager's rule).
            pending.at_server = False
            self._in_flight -= 1
            self.pump()

    def result(self, result: Result) -> None:
        """One line of a RESULTS answer: the result of the request with its id."""
        pending = self._requests.get(result.request_id)
        if pending is None:
            # Unknown ids are dropped, as the grid manager does.
            return
        self._forget(pending)
        if pending.at_server:
            self._in_flight -= 1
        if not pending.result.done():
            pending.result.set_result(result.fields)

    def fail(self, death: GahpServerExited) -> None:
        """The server is gone: every request still awaited fails with `death`."""
        for pending in list(self._requests.values()):
            if not pending.result.done() and not pending.abandoned:
                pending.result.set_exception(death)
        self._requests.clear()
        self._queue.clear()
        self._in_flight = 0

    def _issue(self, pending: Pending) -> None:
        waiter = self._send(pending)
        pending.at_server = True
        self._in_flight += 1
        waiter.future.add_done_callback(lambda future: self._returned(pending, future))

    def _returned(self, pending: Pending, future: asyncio.Future[Reply]) -> None:
        """The return line of an asynchronous request arrived."""
        if future.cancelled() or future.exception() is not None:
            return
        reply = future.result()
        if reply.ok:
            return
        if pending.at_server:  # an abandoned request was taken off the count already
            self._in_flight -= 1
            pending.at_server = False
        if pending.abandoned:
            # Nobody awaits its result: no result comes for a refused request either.
            self._forget(pending)
            self.pump()
            return
        if reply.args[:1] == ("Threads limit reached",) and self._in_flight > 0:
            # As the grid manager: lower the limit to what the server holds and send this
            # one first when a result frees a slot.
            self._max_pending = min(self._max_pending, self._in_flight)
            log.info("GAHP server %s overloaded; at most %d requests", self._pid, self._max_pending)
            self._queue.appendleft(pending, later=pending.later)
            return
        self._forget(pending)
        if not pending.result.done():
            pending.result.set_exception(
                GahpRequestRefused(pending.command, reply.code.value, reply.reason)
            )
        # The slot it held is free: requests queued behind it (one put back when the server
        # was overloaded while this one was still counted) must not wait for a result that
        # nothing in flight will bring.
        self.pump()

    def _forget(self, pending: Pending) -> None:
        self._requests.pop(pending.request_id, None)
        self._ids.release(pending.request_id)
