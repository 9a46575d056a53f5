"""One long poll a schedd holds on a node for the ends of all its claims there.

    POST /v1/watch  {"watch": token, "seq": n, "claims": {claim_id: version}, "wait": seconds}
                    -> {"claims": {claim_id: {"status": {...}} | {"code": n, "problem": {...}}}}

A shadow per claim polling its own claim cost a request (and a connection held) a
claim: ten slots, ten polls waiting on the node, each answered, and made again, on every
change of its claim. Here a schedd's poll names the claims it follows (and the version
of each it knows) and is answered once one of them has ENDED (its outcome there), is
RELEASED or gone, or its lease ran out, or its job was suspended or continued since the
version named (the schedd records that too): with every one of them that has, in one
answer. Other changes short of an end (STARTING to RUNNING) wake nobody.

`token` is a random string of the schedd's, sent only where its claim ids go. A claim
activated with it (`activate`'s `watch`) joins the schedd's poll waiting then, so a job
started while the poll waits is followed without a poll made again; the claim id stays
the capability: an answer only carries claims named by their id, in the poll or in an
activation. A poll with the token of one still waiting answers that one (what it has,
perhaps nothing): the schedd asks anew when it follows a claim the waiting poll does not.
Polls carry a growing `seq`: one that arrives after a newer one (on another connection)
is answered at once, with nothing, and leaves the newer one waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid.errors import HTGridError
from htgrid.startd._errors import StartdError, status_of, to_problem
from htgrid.startd._states import ClaimState
from htgrid.startd._wire import ClaimStatus

__all__ = ["ClaimWatches", "PollCounts"]

#: A watch not polled for this long is forgotten (its schedd restarted with a new token).
_STALE: Final = 1800.0

ClaimStatusFn = Callable[[str, float, int], Awaitable[ClaimStatus]]
Ended = ClaimStatus | HTGridError


def _over(status: ClaimStatus) -> bool:
    return status.state is ClaimState.RELEASED or (
        status.state is ClaimState.ENDED and status.outcome is not None
    )


@dataclass
class PollCounts:
    """The node's long polls, for its health: how many wait now, the most that ever
    waited at once, and how many were answered (per claim, and node-wide); and the
    requests of the API it served in all."""

    requests: int = 0
    open: int = 0
    peak: int = 0
    claim: int = 0
    watch: int = 0

    def opened(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)

    def to_json(self) -> dict[str, int]:
        return {"open": self.open, "peak": self.peak, "claim": self.claim, "watch": self.watch}


@dataclass
class _Watch:
    # Claims activated with the token and not yet answered for: the version then.
    activated: dict[str, int] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    generation: int = 0
    seq: int = -1  # the newest poll's
    used: float = 0.0


class ClaimWatches:
    """The node-wide polls of the schedds on one listener, by token."""

    def __init__(
        self, status: ClaimStatusFn, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._status = status
        self._monotonic = monotonic
        self._watches: dict[str, _Watch] = {}

    def activated(self, token: str, claim_id: str, version: int) -> None:
        """The claim was activated with `token`: the schedd's poll follows it."""
        watch = self._watch(token)
        watch.activated[claim_id] = version
        watch.wake.set()

    async def poll(
        self, token: str, named: dict[str, int], wait: float, seq: int | None = None
    ) -> dict[str, Ended]:
        """The claims (`named`, and those activated with `token`) that are over, as
        soon as one is, or when `wait` has passed or a newer poll of `token` came (a
        greater `seq`; without one, any poll that came later)."""
        watch = self._watch(token)
        if seq is not None:
            if seq <= watch.seq:
                return {}  # overtaken by a newer poll already
            watch.seq = seq
        watch.generation += 1
        generation = watch.generation
        watch.wake.set()  # answers an older poll of the token
        watch.wake = asyncio.Event()
        deadline = self._monotonic() + wait
        versions = {**watch.activated, **named}
        follow: dict[str, asyncio.Task[Ended | None]] = {}
        ended: dict[str, Ended] = {}
        try:
            while True:
                for claim_id, version in versions.items():
                    if claim_id not in follow:
                        task = asyncio.create_task(self._end(claim_id, version, deadline))
                        follow[claim_id] = task
                for claim_id, task in follow.items():
                    if task.done() and (result := task.result()) is not None:
                        ended[claim_id] = result
                left = deadline - self._monotonic()
                if ended or left <= 0 or watch.generation != generation:
                    break
                woken = asyncio.create_task(watch.wake.wait())
                try:
                    await asyncio.wait(
                        {woken, *follow.values()},
                        timeout=left,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    woken.cancel()
                if watch.wake.is_set() and watch.generation == generation:
                    watch.wake = asyncio.Event()  # an activation: follow it too
                    versions = {**watch.activated, **versions}
        finally:
            for task in follow.values():
                task.cancel()
            watch.used = self._monotonic()
        for claim_id in ended:
            watch.activated.pop(claim_id, None)
        return ended

    async def _end(self, claim_id: str, version: int, deadline: float) -> Ended | None:
        """The claim once it is over (or the error naming it gone), or its job was
        suspended or continued since `version`; None at `deadline`."""
        known = version
        while True:
            try:
                status = await self._status(claim_id, deadline - self._monotonic(), version)
            except StartdError as exc:
                return exc
            if _over(status) or status.suspended_version > known:
                return status
            if self._monotonic() >= deadline:
                return None
            version = status.version

    def _watch(self, token: str) -> _Watch:
        now = self._monotonic()
        watch = self._watches.get(token)
        if watch is None:
            for old, stale in list(self._watches.items()):
                if now - stale.used > _STALE:
                    del self._watches[old]
            watch = self._watches[token] = _Watch(used=now)
        watch.used = now
        return watch


def ended_to_json(ended: dict[str, Ended]) -> dict[str, Any]:
    """A watch's answer: each claim's status, or the problem its request would have had."""
    claims: dict[str, Any] = {}
    for claim_id, result in ended.items():
        if isinstance(result, ClaimStatus):
            claims[claim_id] = {"status": result.to_json()}
        else:
            claims[claim_id] = {"code": status_of(result), "problem": to_problem(result)}
    return {"claims": claims}
