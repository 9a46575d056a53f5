"""The client's conversation state: its life cycle (one Enum, one transition table) and
the records of requests waiting for return lines and results."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from htgrid.gahp._codec import Reply, Result

__all__ = ["TRANSITIONS", "Batch", "ClientState", "Pending", "WaitKind", "Waiter"]


class ClientState(enum.Enum):
    """The client's life."""

    STARTING = "starting"  # spawned; reading the banner and doing the handshake
    READY = "ready"  # requests flow
    CLOSING = "closing"  # QUIT sent, waiting for the process to exit
    CLOSED = "closed"  # exited after QUIT
    DEAD = "dead"  # the server went away (or was killed) without being asked to


TRANSITIONS: dict[ClientState, frozenset[ClientState]] = {
    ClientState.STARTING: frozenset({ClientState.READY, ClientState.CLOSING, ClientState.DEAD}),
    ClientState.READY: frozenset({ClientState.CLOSING, ClientState.DEAD}),
    ClientState.CLOSING: frozenset({ClientState.CLOSED, ClientState.DEAD}),
    ClientState.CLOSED: frozenset(),
    ClientState.DEAD: frozenset(),
}


class WaitKind(enum.Enum):
    """What a return line answers, when that changes how the reader goes on."""

    PLAIN = "plain"
    RESULTS = "results"  # `S <n>` is followed by n result lines
    PREFIX = "prefix"  # after `S`, every line carries the prefix


@dataclass(slots=True)
class Waiter:
    """A request line written whose return line has not been read yet."""

    command: str
    future: asyncio.Future[Reply]
    deadline: float
    kind: WaitKind = WaitKind.PLAIN


@dataclass(slots=True)
class Pending:
    """An asynchronous request, from allocation of its id to its result."""

    request_id: int
    command: str
    line: bytes  # the request line, encoded once
    result: asyncio.Future[tuple[str, ...]]
    at_server: bool = False  # counted in the in-flight total
    abandoned: bool = False  # the caller gave up; keep the id until the result comes


@dataclass(slots=True)
class Batch:
    """A RESULTS answer being read."""

    waiter: Waiter
    left: int
    results: list[Result] = field(default_factory=list)
