"""What an execute node tells its collector: its slot ads, and the released slots' removal.

The ads go every UPDATE_INTERVAL and soon after each change: at once when resources
were claimed or given back (the negotiator waits for them), no sooner than
`_ACTIVITY_GAP` (a second) after the last update when only a claim's activity changed
(a job started or ended). HTCondor's startd sends the changes of a second in one update
(a change arms a one-second timer); its activity changes here go at once after a quiet
second, and a node running short jobs updates its collector once a second, not four
times (those updates were a fifth of a node's CPU in bench/remote_nodes.py). A released
slot's removal the collector refuses is asked for again at a few updates, then given up.

HTCondor's startd sends every ad whole at each update. This node sends whole only the
ads whose content changed since the collector last took them (or that it never took),
and refreshes the others: their names and what every update changes (the sequence,
the clock, the load), for the version the collector gave the ad it holds
(`AdStore.refresh`), which keeps them alive there as a whole update would. A
collector that no longer holds that version (it restarted, or the ad expired or was
removed) refuses the refresh, and the ad goes whole at once, in a second request. A
collector of before these refreshes gets every ad whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from htgrid._aio import wait_event
from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient, CollectorRefused, UpdateResult
from htgrid.errors import HTGridError
from htgrid.startd._ads import SlotMembers, slot_members, slot_state

if TYPE_CHECKING:
    from htgrid.startd._daemon import Startd

__all__ = ["Advertiser"]

_log = logging.getLogger("htgrid.startd")

_SETTLE: Final = 1.1
_UPDATE: Final = "UPDATE_STARTD_AD"
#: A claim's job started or ended: advertised no sooner than this after the last update.
_ACTIVITY_GAP: Final = 1.0
# A released slot's removal the collector refuses is asked for at this many updates,
# then no more (it leaves the collector as its ad expires there).
_REMOVAL_TRIES: Final = 3


class Advertiser:
    """The updates of one node's ads to its collector (`run`, until cancelled)."""

    def __init__(
        self, startd: Startd, clock: Callable[[], float], refused: Callable[[], None]
    ) -> None:
        self._startd = startd
        self._clock = clock
        self._refused_node = refused  # the pool refuses this node before it joined
        self._dirty = asyncio.Event()
        self._urgent = False  # resources moved since the last advertisement
        # The advertisement due for a claim's activity change, if one is; when (the loop's
        # time) the last one began.
        self._activity: asyncio.TimerHandle | None = None
        self._advertised = 0.0
        self.joined = False  # an update of its ads was taken by the collector
        self._refused: dict[str, int] = {}  # removals the collector refused: how often
        # The collector's epoch, and by slot name the ad it took last and its version.
        self._epoch = ""
        self._taken: dict[str, tuple[SlotMembers, int]] = {}
        self._changes = True  # the collector takes refreshes (not an older htgrid's)

    def changed(self) -> None:
        """Resources were claimed or given back: advertise at once, for the negotiator."""
        self._urgent = True
        self._dirty.set()

    def active(self) -> None:
        """A claim's activity changed (its job started or ended), no resources moved:
        advertised at once, but no sooner than `_ACTIVITY_GAP` after the last update, the
        changes of all claims in one. A node running short jobs on reused claims would
        otherwise update the collector (and the negotiator) many times a second."""
        if self._activity is None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, self._advertised + _ACTIVITY_GAP - loop.time())
            self._activity = loop.call_later(delay, self._dirty.set)

    def soon(self) -> None:
        """Advertise at the next turn (the ads' fixed part changed: a reconfig)."""
        self._dirty.set()

    async def run(self, collector: CollectorClient) -> None:
        failing = False
        pool = self._startd.pool
        while True:
            self._dirty.clear()
            settle, self._urgent = self._urgent, False
            if self._activity is not None:  # this update carries it
                self._activity.cancel()
                self._activity = None
            self._advertised = asyncio.get_running_loop().time()
            try:
                await self.advertise(collector)
                if failing:
                    _log.info("the collector at %s answers again", pool)
                failing, self.joined = False, True
            except CollectorRefused as exc:
                if not self.joined:  # it cannot join this pool: say why, and stop
                    _log.error("the pool at %s refuses this execute node: %s", pool, exc)
                    self._refused_node()
                    return
                if not failing:
                    _log.warning("the collector at %s refuses the ads: %s", pool, exc)
                failing = True
            except HTGridError as exc:
                if not failing:
                    _log.warning("cannot advertise to the collector at %s: %s", pool, exc)
                failing = True
            # After a change, one more update a second later: the collector stamps
            # LastHeardFrom in whole seconds, and the negotiator trusts an ad for a match
            # only once it was heard from after the match (an update in the same second
            # as the match would not count, and the slot would look smaller for minutes).
            wait = _SETTLE if settle else self._startd.config.update_interval
            await wait_event(self._dirty, wait)
            await asyncio.sleep(0.05)  # changes come in bursts: one update for them all

    async def advertise(self, collector: CollectorClient) -> None:
        """One update: the slots' ads, then the released slots' removal."""
        slots, ctx = self._startd.slots, self._startd.ctx
        slots.move(slot_state(ctx, slots))
        ctx.sequence += 1
        released, slots.released = slots.released, []
        try:
            await self._send(collector, slot_members(ctx, slots, self._clock()))
        except HTGridError:
            slots.released[:0] = released  # try again next time
            raise
        if not released:
            return
        queries = [
            ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": name}) for name in released
        ]
        if len(queries) > 1:
            try:
                await collector.invalidate("INVALIDATE_STARTD_ADS", queries)  # one request
            except CollectorRefused:
                pass  # it removes none then: asked one by one below, to know which it refuses
            except HTGridError:
                slots.released[:0] = released
                raise
            else:
                for name in released:
                    self._refused.pop(name, None)
                return
        for at, (name, query) in enumerate(zip(released, queries, strict=True)):
            try:
                await collector.invalidate("INVALIDATE_STARTD_ADS", query)
            except CollectorRefused as exc:
                self._removal_refused(name, exc)
            except HTGridError:
                slots.released[:0] = released[at:]  # not reached: try again next time
                raise
            else:
                self._refused.pop(name, None)

    async def _send(self, collector: CollectorClient, ads: list[SlotMembers]) -> None:
        """The slots' ads: whole those whose content the collector does not have, the
        others refreshed; those whose refresh it refuses, whole next."""
        if not self._changes:
            await collector.advertise_members(_UPDATE, [a.whole() for a in ads])
            return
        whole: list[SlotMembers] = []
        fresh: list[SlotMembers] = []
        for ad in ads:
            taken = self._taken.get(ad.name)
            (fresh if taken is not None and ad.same(taken[0]) else whole).append(ad)
        refreshes = [(self._taken[a.name][1], a.refresh()) for a in fresh]
        answer = await collector.advertise_changes(
            _UPDATE, self._epoch, [a.whole() for a in whole], refreshes
        )
        if answer is None:
            _log.info(
                "the collector at %s takes every ad whole (an older htgrid)", self._startd.pool
            )
            self._changes = False
            await collector.advertise_members(_UPDATE, [a.whole() for a in ads])
            return
        self._taken = {}  # the released slots' go
        refused = self._took(answer, whole + fresh)
        lost = [a for a in fresh if a.name in refused]
        if lost:
            answer = await collector.advertise_changes(
                _UPDATE, self._epoch, [a.whole() for a in lost], []
            )
            if answer is not None:
                self._took(answer, lost)

    def _took(self, answer: tuple[str, list[UpdateResult]], ads: list[SlotMembers]) -> set[str]:
        """Note what the collector took of `ads`; the names of those it did not."""
        self._epoch, results = answer
        refused = set()
        for ad, result in zip(ads, results, strict=True):
            if result.accepted and result.version:
                self._taken[ad.name] = (ad, result.version)
            else:
                self._taken.pop(ad.name, None)
                refused.add(ad.name)
        return refused

    def _removal_refused(self, name: str, exc: CollectorRefused) -> None:
        """The collector refuses to remove the ad of `name`: asked again at the next
        updates, `_REMOVAL_TRIES` times in all, then given up (an answer that will not
        change must not be asked for at every update, for ever)."""
        pool = self._startd.pool
        tries = self._refused.get(name, 0) + 1
        if tries < _REMOVAL_TRIES:
            self._refused[name] = tries
            self._startd.slots.released.append(name)
            _log.warning(
                "the collector at %s refuses to remove the ad of %s: %s (asked again at "
                "the next update)",
                pool,
                name,
                exc,
            )
            return
        self._refused.pop(name, None)
        _log.error(
            "the collector at %s refused to remove the ad of %s %d times: %s; no longer "
            "asked: it stays there until it expires",
            pool,
            name,
            tries,
            exc,
        )
