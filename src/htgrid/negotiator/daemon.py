"""The negotiator daemon: a cycle every NEGOTIATOR_INTERVAL against a job source and
the collector, with user priorities kept between cycles.

It depends on two small protocols the lead connects: `JobSource` (the queue daemon:
idle jobs in, match decisions out) and `MachineSource` (slot and site ads; the
collector, through `CollectorMachines`). Each cycle:

1. reads the idle jobs and the machine ads;
2. lays over the ads the matches it made that their owners have not advertised yet
   (a static slot is "Matched", a partitionable slot smaller, a site's CurMatches
   higher) until the ad is refreshed after the match or `pending_lifetime` passes;
3. ages the user priorities to now with the slots each submitter has in use (claimed
   slots' RemoteUser, plus its pending matches);
4. runs `negotiate()` in a worker thread (it is CPU work) and reports the result;
5. advertises a Negotiator ad (LastNegotiationCycle* as condor_negotiator does).

A pool with no room for any job skips steps 1's job read and 4 but once a minute (the
negotiator shares the schedd's process, and a full pool's cycles were a fifth of it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable, Sequence
from copy import copy
from dataclasses import dataclass, replace
from typing import Final, Protocol

import anyio.to_thread

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient, KeptAds
from htgrid.errors import HTGridError
from htgrid.negotiator._ads import matchable, slot_weight
from htgrid.negotiator._cycle import negotiate
from htgrid.negotiator._guard import label, usable
from htgrid.negotiator._model import (
    CycleResult,
    MachineFailure,
    Match,
    NegotiatorConfig,
    ResourceRequest,
)
from htgrid.negotiator._priorities import PriorityTable
from htgrid.queue.faults import daemon_fault, problem

__all__ = [
    "ROOM_ATTRIBUTES",
    "Clock",
    "CollectorMachines",
    "JobSource",
    "MachineSource",
    "Negotiator",
    "SystemClock",
]

_log = logging.getLogger("htgrid.negotiator")


class JobSource(Protocol):
    """The queue daemon, as the negotiator sees it."""

    async def idle_jobs(self) -> Sequence[ClassAd]:
        """The idle jobs (JobStatus 1) that may run now, with ClusterId and ProcId."""

    async def report(self, result: CycleResult) -> None:
        """Take a cycle's decisions: for each match, record `match.job_updates` in the
        job and start it at `match.machine` (with `match.job_ad(job)`, the macros filled;
        an `expansion.error` holds the job instead); for each rejection, set
        LastRejMatchReason and LastRejMatchTime; hold each job of `result.failures`
        (the cycle could not evaluate it)."""


class MachineSource(Protocol):
    """Where slot and grid-site ads come from."""

    async def machine_ads(self) -> Sequence[ClassAd]:
        """Every slot and site ad of the pool (MyType "Machine"), claimed ones too."""

    async def room_ads(self) -> Sequence[ClassAd]:
        """The same ads with at least `ROOM_ATTRIBUTES`: whether the pool has room."""


class Clock(Protocol):
    """Where time comes from; tests pass one they move by hand."""

    def time(self) -> float:
        """Seconds since the epoch."""

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""


class SystemClock:
    """The wall clock and asyncio's sleep."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class CollectorMachines:
    """`MachineSource` over a collector: its Machine ads, constraint optional. The ads
    are kept decoded between cycles (`KeptAds`): only those that changed are read."""

    def __init__(self, client: CollectorClient, constraint: str | None = None) -> None:
        self.client = client
        self.constraint = constraint  # NEGOTIATOR_SLOT_CONSTRAINT
        self._kept = KeptAds(client, "Machine", constraint)
        self._room = KeptAds(client, "Machine", constraint, ROOM_ATTRIBUTES)

    async def machine_ads(self) -> Sequence[ClassAd]:
        return await self._kept.ads()

    async def room_ads(self) -> Sequence[ClassAd]:
        return await self._room.ads()


@dataclass(frozen=True, slots=True)
class _Pending:
    at: float  # the match; then the node's answer to its claim (`claim_answered`)
    submitter: str
    weight: float
    request: ResourceRequest | None
    match: Match | None = None


#: What a cycle reads of each ad to learn whether the pool has room (`_has_room`, with
#: the matches not yet claimed laid over it). A full pool's slots change with each job
#: they run: decoding them whole for each cycle's look took a fifth of a busy schedd's
#: process, which the negotiator shares.
ROOM_ATTRIBUTES: Final = (
    "Name",
    "MyAddress",
    "State",
    "PartitionableSlot",
    "Cpus",
    "Memory",
    "Disk",
    "WantAdRevaluate",
    "CurMatches",
    "LastHeardFrom",
)
#: How often a pool with no room for any job is negotiated whole, at most (HTCondor's
#: default NEGOTIATOR_INTERVAL): its idle jobs' LastRejMatchReason, a new job's too.
_FULL_POOL_INTERVAL: Final = 60.0
#: The result of a cycle that found no room: nothing matched, nothing rejected anew.
_FULL: Final = CycleResult((), (), (), 0, 0, 0, 0.0)


def _has_room(ad: ClassAd) -> bool:
    """Whether the slot (or grid site) could take a job now: offered at all, and not a
    partitionable slot with no cpu left."""
    if not matchable(ad):
        return False
    if ad.get("PartitionableSlot") is not True:
        return True
    cpus = ad.get("Cpus")
    return not isinstance(cpus, int | float) or cpus > 0


def _key(ad: ClassAd) -> tuple[str, str]:
    name, address = ad.get("Name"), ad.get("MyAddress")
    return (name if isinstance(name, str) else "", address if isinstance(address, str) else "")


def _number(value: object) -> int:
    return int(value) if isinstance(value, int | float) and type(value) in (int, float) else 0


class Negotiator:
    """Runs negotiation cycles; `priorities` carries the accountant between them."""

    def __init__(
        self,
        jobs: JobSource,
        machines: MachineSource,
        *,
        config: NegotiatorConfig | None = None,
        priorities: PriorityTable | None = None,
        clock: Clock | None = None,
        interval: float = 60.0,
        pending_lifetime: float = 300.0,
        collector: CollectorClient | None = None,
        name: str = "htgrid negotiator",
    ) -> None:
        self.jobs = jobs
        self.machines = machines
        self.config = config or NegotiatorConfig()
        self.priorities = priorities or PriorityTable()
        self.clock: Clock = clock or SystemClock()
        self.interval = interval  # NEGOTIATOR_INTERVAL
        self.pending_lifetime = pending_lifetime
        self.collector = collector
        self.name = name
        self.started = int(self.clock.time())
        self.cycles = 0
        self._whole_cycle = -math.inf  # when a cycle last read and matched the idle jobs
        self._idle = 0  # how many idle jobs that cycle read
        self._pending: dict[tuple[str, str], list[_Pending]] = {}
        self._bad_ads: dict[str, str] = {}  # ads left out of cycles: logged once each
        self.failing: str | None = None  # why the last cycle failed as a whole, if it did

    def _overlay(self, machines: Sequence[ClassAd], now: float) -> list[ClassAd]:
        """The ads with this negotiator's not-yet-advertised matches laid over them."""
        out = []
        for ad in machines:
            key = _key(ad)
            pending = self._pending.get(key)
            if pending:
                heard = ad.get("LastHeardFrom")
                if type(heard) not in (int, float):  # classad.Value.Undefined is an int enum
                    heard = None
                fresh = [
                    p
                    for p in pending
                    if now - p.at < self.pending_lifetime
                    and not (isinstance(heard, int | float) and heard >= p.at)
                ]
                if fresh:
                    self._pending[key] = fresh
                    ad = _with_pending(ad, fresh)
                else:
                    del self._pending[key]
            out.append(ad)
        return out

    def _usage(self, machines: Sequence[ClassAd]) -> dict[str, float]:
        usage: dict[str, float] = {}
        for ad in machines:
            if ad.get("State") in ("Claimed", "Preempting"):
                user = ad.get("RemoteUser") or ad.get("RemoteOwner")
                if isinstance(user, str):
                    usage[user] = usage.get(user, 0.0) + slot_weight(
                        ad, self.config.use_slot_weights
                    )
        for pending in self._pending.values():
            for p in pending:
                usage[p.submitter] = usage.get(p.submitter, 0.0) + p.weight
        return usage

    async def cycle(self) -> CycleResult:
        """One negotiation cycle, reported to the job source. A pool with no room for
        any job (every slot claimed, every partitionable slot carved whole) is
        negotiated whole only every `_FULL_POOL_INTERVAL` (the idle jobs' reasons kept
        fresh); the cycles between read only what says there is no room (`room_ads`),
        no job, and match nothing. The accountant's usage is brought up to date by the
        whole cycles, as HTCondor's is at its default interval (a minute)."""
        started = time.monotonic()
        now = self.clock.time()
        if now - self._whole_cycle < _FULL_POOL_INTERVAL:
            room = self._overlay(self._readable(await self.machines.room_ads()), now)
            if room and not any(_has_room(ad) for ad in room):
                # The negotiator shares the schedd's process: reading and matching every
                # idle job against a full pool took a fifth of a busy schedd's loop.
                self.cycles += 1
                _log.info(
                    "cycle %d: no slot has room among %d ads: no job read, in %.2fs",
                    self.cycles,
                    len(room),
                    time.monotonic() - started,
                )
                await self._advertise(_FULL, now, time.monotonic() - started, self._idle)
                return _FULL
        machines = self._overlay(self._readable(await self.machines.machine_ads()), now)
        self.priorities = self.priorities.advanced(now, self._usage(machines))
        self._whole_cycle = now
        jobs = list(await self.jobs.idle_jobs())
        priorities, config = self.priorities, self.config
        result = await anyio.to_thread.run_sync(
            lambda: negotiate(jobs, machines, priorities, config, now=now)
        )
        await self.jobs.report(result)
        self._log_bad_ads(result.bad_machines)
        matched: dict[str, float] = {}
        for match in result.matches:
            self._remember(match, now)
            matched[match.submitter] = matched.get(match.submitter, 0.0) + match.weight
        self.priorities = self.priorities.with_usage_added(matched, now)
        self.cycles += 1
        _log.info(
            "cycle %d: %d idle jobs, %d ads, %d matches in %.2fs",
            self.cycles,
            len(jobs),
            len(machines),
            len(result.matches),
            time.monotonic() - started,
        )
        self._idle = len(jobs)
        await self._advertise(result, now, time.monotonic() - started, len(jobs))
        return result

    async def _advertise(self, result: CycleResult, now: float, duration: float, idle: int) -> None:
        """The Negotiator ad of a cycle (a full pool's too: it must not expire there)."""
        if self.collector is None:
            return
        ad = self._own_ad(result, now, duration, idle)
        try:
            await self.collector.advertise("UPDATE_NEGOTIATOR_AD", [ad])
        except HTGridError as err:
            _log.warning("could not advertise to the collector: %s", err)

    def _readable(self, machines: Sequence[ClassAd]) -> list[ClassAd]:
        """The ads whose attributes read here can be evaluated; the others left out."""
        weights = self.config.use_slot_weights

        def check(ad: ClassAd) -> None:
            _key(ad), slot_weight(ad, weights)
            for name in ("LastHeardFrom", "State", "RemoteUser", "RemoteOwner"):
                ad.get(name)

        good, bad = usable(machines, check)
        self._log_bad_ads(
            MachineFailure(label(ad, position), problem(exc)) for position, ad, exc in bad
        )
        return good

    def _log_bad_ads(self, bad: Iterable[MachineFailure]) -> None:
        for failure in bad:
            if self._bad_ads.get(failure.name) != failure.problem:
                self._bad_ads[failure.name] = failure.problem
                _log.error(
                    "the ad of %s is left out of negotiation: %s", failure.name, failure.problem
                )

    def _remember(self, match: Match, now: float) -> None:
        key = _key(match.machine_ad)
        self._pending.setdefault(key, []).append(
            _Pending(now, match.submitter, match.weight, match.request, match)
        )

    def claim_answered(self, match: Match, granted: bool) -> None:
        """The node answered the claim of `match` (a cycle's): refused (or unanswered,
        the claim then given back), the slot is as its ad says; granted, its ad counts
        the claim only once heard from after now. An ad the node sent between the match
        and the claim, which came late under load, showed the slot's resources still
        free: the next cycle matched them again, and the node refused those claims."""
        pending = self._pending.get(_key(match.machine_ad), [])
        for i, p in enumerate(pending):
            if p.match is match:
                if granted:
                    pending[i] = replace(p, at=self.clock.time())
                else:
                    del pending[i]
                return

    def _own_ad(self, result: CycleResult, now: float, duration: float, idle: int) -> ClassAd:
        """The Negotiator ad, with condor_negotiator's LastNegotiationCycle* attributes."""
        ad = ClassAd()
        ad["MyType"] = "Negotiator"
        ad["Name"] = self.name
        ad["DaemonStartTime"] = self.started
        ad["UpdateSequenceNumber"] = self.cycles
        ad["UpdateInterval"] = int(self.interval)
        ad["LastNegotiationCycleTime0"] = int(now)
        ad["LastNegotiationCycleDuration0"] = round(duration, 3)
        ad["LastNegotiationCycleMatches0"] = len(result.matches)
        ad["LastNegotiationCycleRejections0"] = len(result.rejections)
        ad["LastNegotiationCycleActiveSubmitterCount0"] = len(result.submitters)
        ad["LastNegotiationCycleNumIdleJobs0"] = idle
        ad["LastNegotiationCycleSlotShareIter0"] = result.spins
        ad["LastNegotiationCycleNumAutoclusters0"] = result.autoclusters
        return ad

    async def run(self) -> None:
        """Cycle every `interval` seconds until cancelled; a failed cycle is logged."""
        while True:
            began = self.clock.time()
            await self.guarded_cycle()
            await self.clock.sleep(self.interval - (self.clock.time() - began))

    async def guarded_cycle(self) -> CycleResult | None:
        """`cycle`, or None when it failed: logged (once while it fails alike), and the
        next cycle comes as usual. Only the daemon's own faults propagate."""
        try:
            result = await self.cycle()
        except Exception as err:
            if daemon_fault(err) and not isinstance(err, HTGridError):
                raise
            why = problem(err)
            if why != self.failing:
                self.failing = why
                trace = not isinstance(err, HTGridError)
                _log.error("negotiation cycle failed: %s", why, exc_info=err if trace else None)
            return None
        self.failing = None
        return result


def _with_pending(ad: ClassAd, pending: list[_Pending]) -> ClassAd:
    """The ad as it will be once its owner reports `pending` matches."""
    out = copy(ad)
    if ad.get("WantAdRevaluate") is True:
        out["CurMatches"] = _number(ad.get("CurMatches")) + len(pending)
    elif ad.get("PartitionableSlot") is True:
        for p in pending:
            if p.request is not None:
                out["Cpus"] = _number(out.get("Cpus")) - p.request.cpus
                out["Memory"] = _number(out.get("Memory")) - p.request.memory
                if isinstance(out.get("Disk"), int | float):
                    out["Disk"] = _number(out.get("Disk")) - p.request.disk
    else:
        out["State"] = "Matched"  # the startd's state between match and claim
    return out
