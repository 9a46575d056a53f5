"""The client's conversation state: its life cycle (one Enum, one transition table) and
the records of requests waiting for return lines and results."""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from htgrid.gahp._codec import Reply, Result

__all__ = ["TRANSITIONS", "Batch", "ClientState", "Lanes", "Pending", "WaitKind", "Waiter"]

_T = TypeVar("_T")


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
    size: int = 0  # of the request line, in bytes


@dataclass(slots=True)
class Pending:
    """An asynchronous request, from allocation of its id to its result."""

    request_id: int
    command: str
    line: bytes  # the request line, encoded once
    result: asyncio.Future[tuple[str, ...]]
    at_server: bool = False  # counted in the in-flight total
    abandoned: bool = False  # the caller gave up; keep the id until the result comes
    later: bool = False  # new work (a submit): waits behind the requests of work under way


class Lanes(Generic[_T]):
    """A queue in two lanes: items of the `later` lane leave only when the first is empty.

    A grid manager with a thousand submits queued still sends the stage-in of a job whose
    submit was answered at once: work under way finishes before new work starts.
    """

    def __init__(self) -> None:
        self._first: deque[_T] = deque()
        self._later: deque[_T] = deque()

    def append(self, item: _T, *, later: bool = False) -> None:
        (self._later if later else self._first).append(item)

    def appendleft(self, item: _T, *, later: bool = False) -> None:
        (self._later if later else self._first).appendleft(item)

    def popleft(self) -> _T:
        return self._first.popleft() if self._first else self._later.popleft()

    def peek(self) -> _T:
        """The item `popleft` would take, left in place."""
        return self._first[0] if self._first else self._later[0]

    def remove(self, item: _T) -> bool:
        """Take `item` out; whether it was queued."""
        for lane in (self._first, self._later):
            if item in lane:
                lane.remove(item)
                return True
        return False

    def clear(self) -> None:
        self._first.clear()
        self._later.clear()

    def __iter__(self) -> Iterator[_T]:
        return itertools.chain(self._first, self._later)

    def __len__(self) -> int:
        return len(self._first) + len(self._later)


@dataclass(slots=True)
class Batch:
    """A RESULTS answer being read."""

    waiter: Waiter
    left: int
    results: list[Result] = field(default_factory=list)
