"""One negotiation cycle, as a pure function: idle jobs x slot ads -> matches.

The steps are condor_negotiator's (docs/admin-manual/cm-configuration.rst, "Negotiation"):

1. Idle jobs group into autoclusters per submitter (`_signature`); slot ads group into
   classes alike to every job. A representative of each is matched for all.
2. Submitters go in order of effective priority, each up to its slice of the pie: the
   pool's total slot weight times (1/EUP) over the sum of 1/EUP of the submitters with
   work, less what it already uses. Slots left over go round again ("pie spins") among
   those still wanting, until nothing more matches.
3. Within a submitter, autoclusters go in job order (JobPrio, then submission); a job
   takes the best candidate by NEGOTIATOR_PRE_JOB_RANK, its own Rank, then
   NEGOTIATOR_POST_JOB_RANK (ties: the order the collector listed the ads).
4. A static slot is gone once matched. A partitionable slot gives the job RequestCpus,
   RequestMemory and RequestDisk and stays for the next job with what is left. An ad
   with `WantAdRevaluate = True` (a grid site) stays too, with `CurMatches` raised by
   one in the negotiator's copy, so its Requirements (`CurMatches < 10`) see it.

Only unclaimed slots (or ads without a State, such as grid sites) are offered: this
negotiator does not preempt (NEGOTIATOR_CONSIDER_PREEMPTION = False).

A job or ad whose evaluation raises is left out (`_guard`): the job is reported in the
result's `failures` for the queue to hold, the ad in `bad_machines`; the cycle goes on.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from copy import copy
from typing import NoReturn

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.fast import rank as job_rank
from htgrid.classad.fast import requirements_hold
from htgrid.classad.syntax import node_of
from htgrid.negotiator._ads import (
    attr_value,
    job_id,
    matchable,
    number,
    rank_value,
    request_of,
    slot_weight,
    submitter_of,
)
from htgrid.negotiator._expand import Expansion, dollar_attributes, expand, history_updates
from htgrid.negotiator._guard import Side, culprit, label, usable
from htgrid.negotiator._model import (
    NO_MATCH,
    SUBMITTER_LIMIT,
    CycleResult,
    MachineFailure,
    Match,
    NegotiatorConfig,
    Rejection,
    SubmitterCycle,
)
from htgrid.negotiator._priorities import PriorityTable
from htgrid.negotiator._signature import Grouping, RefCache, group_signatures
from htgrid.queue import JobId
from htgrid.queue.faults import JobFailure, daemon_fault, problem

__all__ = ["negotiate"]

_JOB_ROOTS = ("Requirements", "Rank", "RequestCpus", "RequestMemory", "RequestDisk")
_MACHINE_ROOTS = (
    "Requirements", "Rank", "State", "SlotWeight", "Cpus", "Memory", "Disk",
    "PartitionableSlot", "WantAdRevaluate", "CurMatches",
)  # fmt: skip


class _Slot:
    __slots__ = ("ad", "alive", "cls", "index", "mutable", "pslot")

    def __init__(self, ad: ClassAd, index: int) -> None:
        self.ad = ad
        self.index = index
        self.alive = True
        self.cls: _Class | None = None
        self.pslot = attr_value(ad, "partitionableslot") is True
        self.mutable = self.pslot or attr_value(ad, "wantadrevaluate") is True


class _Class:
    """Slots alike to every job; `pos` is the next member not yet handed out."""

    __slots__ = ("members", "pos", "rep")

    def __init__(self, members: list[_Slot]) -> None:
        self.members = members
        self.rep = members[0].ad
        self.pos = 0
        for slot in members:
            slot.cls = self

    def peek(self) -> _Slot | None:
        while self.pos < len(self.members):
            slot = self.members[self.pos]
            if slot.alive and slot.cls is self:
                return slot
            self.pos += 1
        return None


class _BadJob(Exception):
    """The autocluster's next job failed and is recorded as such: go on without it."""


class _Autocluster:
    __slots__ = ("heap", "jobs", "rejected", "rep", "seen", "submitter")

    def __init__(self, submitter: str, jobs: list[tuple[JobId, ClassAd]]) -> None:
        self.submitter = submitter
        self.jobs = jobs  # pending, best first (popped from the end: kept reversed)
        self.rep = jobs[-1][1]
        self.rejected = False
        self.heap: list[tuple[float, float, float, int, int, _Class]] | None = None
        self.seen = 0  # how many of the cycle's new classes the heap has looked at


class _Cycle:
    """The state of one cycle; `run()` does the work."""

    def __init__(
        self,
        jobs: Iterable[ClassAd],
        machines: Sequence[ClassAd],
        priorities: PriorityTable,
        config: NegotiatorConfig,
        now: float,
    ) -> None:
        self.config = config
        self.priorities = priorities
        self.now = now
        self.refs = RefCache()
        self.pre = ExprTree(config.pre_job_rank) if config.pre_job_rank else None
        self.post = ExprTree(config.post_job_rank) if config.post_job_rank else None
        self.failures: list[JobFailure] = []
        self.bad_machines: list[MachineFailure] = []
        self.jobs = self._usable_jobs(list(jobs))
        self.machines = self._usable_machines(list(machines))
        self.pool_weight = sum(slot_weight(m, config.use_slot_weights) for m in self.machines)
        self.new_classes: list[_Class] = []
        self.matches: list[Match] = []
        self.serial = 0  # tie-breaker inside heap entries

    # -- leaving bad ads out ------------------------------------------------------------

    def _usable_jobs(self, jobs: list[ClassAd]) -> list[ClassAd]:
        def check(job: ClassAd) -> None:
            job_id(job, 0), submitter_of(job), attr_value(job, "jobprio")

        good, bad = usable(jobs, check)
        for position, job, exc in bad:
            self.job_failed(job, position, exc)
        return good

    def _usable_machines(self, machines: list[ClassAd]) -> list[ClassAd]:
        def check(ad: ClassAd) -> None:
            matchable(ad), slot_weight(ad, self.config.use_slot_weights)
            for key in ("partitionableslot", "wantadrevaluate", "name"):
                attr_value(ad, key)

        good, bad = usable(machines, check)
        for position, ad, exc in bad:
            self.machine_failed(ad, position, exc)
        return good

    def job_failed(self, job: ClassAd, position: int, exc: Exception) -> None:
        try:
            jid = job_id(job, position)
        except Exception as again:
            if daemon_fault(again):
                raise
            jid = JobId(0, position)
        self.failures.append(JobFailure(jid, problem(exc), held=False, error=exc))

    def machine_failed(self, ad: ClassAd, position: int, exc: Exception) -> None:
        self.bad_machines.append(MachineFailure(label(ad, position), problem(exc)))

    def _signatures(self, offered: list[ClassAd]) -> tuple[list[ClassAd], Grouping]:
        """The grouping of jobs and `offered` ads, without those that cannot be grouped;
        the ads kept."""
        exprs = [node_of(e) for e in (self.pre, self.post) if e is not None]
        job_roots = (*_JOB_ROOTS, *self.config.significant_attributes)

        def grouped(jobs: list[ClassAd], machines: list[ClassAd]) -> Grouping:
            return group_signatures(jobs, machines, job_roots, _MACHINE_ROOTS, exprs, self.refs)

        try:
            return offered, grouped(self.jobs, offered)
        except Exception as exc:
            if daemon_fault(exc):
                raise
        # One ad spoils the grouping of all: find it by grouping each alone (rare).
        jobs, bad_jobs = usable(self.jobs, lambda job: grouped([job], []))
        offered, bad_ads = usable(offered, lambda ad: grouped([], [ad]))
        for position, job, error in bad_jobs:
            self.job_failed(job, position, error)
        for position, ad, error in bad_ads:
            self.machine_failed(ad, position, error)
        self.jobs = jobs
        return offered, grouped(jobs, offered)

    # -- grouping -----------------------------------------------------------------------

    def group(self) -> tuple[dict[str, list[_Autocluster]], list[_Class]]:
        offered, grouping = self._signatures([m for m in self.machines if matchable(m)])
        classes: dict[object, list[_Slot]] = {}
        for i, (ad, key) in enumerate(zip(offered, grouping.machines, strict=True)):
            classes.setdefault(key, []).append(_Slot(ad, i))
        keyed: dict[tuple[str, object], list[tuple[tuple[int, int, int], JobId, ClassAd]]] = {}
        for position, (job, sig) in enumerate(zip(self.jobs, grouping.jobs, strict=True)):
            jid = job_id(job, position)
            prio = attr_value(job, "jobprio")
            order = (-prio if type(prio) is int else 0, jid.cluster, jid.proc)
            keyed.setdefault((submitter_of(job), sig), []).append((order, jid, job))
        by_submitter: dict[str, list[tuple[tuple[int, int, int], _Autocluster]]] = {}
        for (submitter, _), members in keyed.items():
            members.sort(key=lambda m: m[0], reverse=True)
            ac = _Autocluster(submitter, [(jid, job) for _, jid, job in members])
            by_submitter.setdefault(submitter, []).append((members[-1][0], ac))
        ordered = {
            s: [ac for _, ac in sorted(acs, key=lambda p: p[0])] for s, acs in by_submitter.items()
        }
        return ordered, [_Class(members) for members in classes.values()]

    # -- matching -----------------------------------------------------------------------

    def evaluate(self, ac: _Autocluster, cls: _Class) -> tuple[float, float, float] | None:
        """The sort key of `cls` for `ac`'s jobs, or None when they do not match.

        _BadJob when evaluating the autocluster's next job failed (it is taken out and
        recorded); a class whose ad failed is left out (None).
        """
        job, machine = ac.rep, cls.rep
        side = Side.JOB
        try:
            if not requirements_hold(job, machine):
                return None
            side = Side.MACHINE
            if not requirements_hold(machine, job):
                return None
            side = Side.JOB
            if cls.members[0].pslot and request_of(job, machine) is None:
                return None
            side = Side.MACHINE
            pre = -rank_value(self.pre, machine, job)
            side = Side.JOB
            rank = -job_rank(job, machine)
            side = Side.MACHINE
            return (pre, rank, -rank_value(self.post, machine, job))
        except Exception as exc:
            if daemon_fault(exc):
                raise
            if culprit(job, machine, side) is Side.JOB:
                self.drop_next(ac, exc)  # raises _BadJob
            for slot in cls.members:  # the ad is left out of the rest of the cycle
                slot.alive = False
            self.machine_failed(machine, cls.members[0].index, exc)
            return None

    def drop_next(self, ac: _Autocluster, exc: Exception) -> NoReturn:
        """The autocluster's next job failed: record it, and raise _BadJob."""
        jid, _ = ac.jobs.pop()
        self.failures.append(JobFailure(jid, problem(exc), held=False, error=exc))
        if ac.jobs:  # the next job stands for the rest: what they match is looked at anew
            ac.rep = ac.jobs[-1][1]
            ac.heap, ac.seen = None, 0
        raise _BadJob

    def push(self, ac: _Autocluster, cls: _Class, key: tuple[float, float, float]) -> None:
        slot = cls.peek()
        if slot is not None and ac.heap is not None:
            self.serial += 1
            heapq.heappush(ac.heap, (*key, slot.index, self.serial, cls))

    def candidates(
        self, ac: _Autocluster, classes: list[_Class]
    ) -> list[tuple[float, float, float, int, int, _Class]]:
        """`ac`'s heap of classes that match it, brought up to date with new classes."""
        if ac.heap is None:
            ac.heap = []
            for cls in classes:
                key = self.evaluate(ac, cls)
                if key is not None:
                    self.push(ac, cls, key)
        while ac.seen < len(self.new_classes):
            cls = self.new_classes[ac.seen]
            ac.seen += 1
            if cls.peek() is not None:
                key = self.evaluate(ac, cls)
                if key is not None:
                    self.push(ac, cls, key)
        return ac.heap

    def best(self, ac: _Autocluster, classes: list[_Class], *, take: bool = True) -> _Slot | None:
        """The best slot left for `ac`'s next job: taken out of its class, or only
        looked at (`take=False`)."""
        heap = self.candidates(ac, classes)
        while heap:
            entry = heapq.heappop(heap)
            pre, rank, post, index, _, cls = entry
            slot = cls.peek()
            if slot is None:
                continue
            if slot.index != index:  # the class moved on: queue it by its next member
                self.push(ac, cls, (pre, rank, post))
                continue
            if not take:
                heapq.heappush(heap, entry)
                return slot
            cls.pos += 1
            self.push(ac, cls, (pre, rank, post))
            return slot
        return None

    def prepare(self, ac: _Autocluster, slot: _Slot, jid: JobId, job: ClassAd) -> Match:
        """The match of `job` to `slot`, not yet taken (_BadJob if the job fails)."""
        ad = slot.ad
        try:
            request = request_of(job, ad) if slot.pslot else None
            weight = slot_weight(ad, self.config.use_slot_weights)
            if request is not None:
                weight = float(request.cpus) if self.config.use_slot_weights else 1.0
            name = attr_value(ad, "name")
            name = name if isinstance(name, str) else ""
            dollars = dollar_attributes(job)
            expansion = expand(job, ad, dollars) if dollars else Expansion()
            history = history_updates(job, name, self.now)
        except Exception as exc:
            if daemon_fault(exc):
                raise
            self.drop_next(ac, exc)
        return Match(jid, ac.submitter, name, ad, weight, request, expansion, history)

    def take(self, slot: _Slot, match: Match) -> float:
        """Take the slot for `match`; the weight the match counts."""
        ad, request, weight = slot.ad, match.request, match.weight
        self.matches.append(match)
        if not slot.mutable or (slot.pslot and request is None):
            slot.alive = False
            return weight
        # The slot stays, changed: it leaves its class for one of its own.
        changed = copy(ad)
        if request is not None:
            for attr, used in (("Cpus", request.cpus), ("Memory", request.memory)):
                changed[attr] = int(number(ad.get(attr)) or 0) - used
            disk = number(ad.get("Disk"))
            if disk is not None:
                changed["Disk"] = int(disk) - request.disk
        if ad.get("WantAdRevaluate") is True:
            current = ad.get("CurMatches")
            changed["CurMatches"] = (current if type(current) is int else 0) + 1
        slot.ad = changed
        slot.alive = not slot.pslot or (number(changed.get("Cpus")) or 0) > 0
        if slot.alive:
            self.new_classes.append(_Class([slot]))
        return weight

    def weight_of(self, slot: _Slot, match: Match) -> float:
        """What matching to `slot` counts toward the submitter's share."""
        if not self.config.use_slot_weights:
            return 1.0
        if slot.pslot and match.request is not None:
            return float(match.request.cpus)
        return slot_weight(slot.ad)

    def negotiate_submitter(
        self,
        autoclusters: list[_Autocluster],
        limit: float,
        classes: list[_Class],
        rounding: bool,
    ) -> float:
        """Match the submitter's jobs while its limit lasts; the weight matched.

        A match must fit in the limit, except when `rounding`: then the submitter may
        go past it once (its fraction of a slot made whole).
        """
        used = 0.0
        for ac in autoclusters:
            while ac.jobs and not ac.rejected and used < limit:
                try:
                    slot = self.best(ac, classes, take=False)
                    if slot is None:
                        ac.rejected = True
                        break
                    jid, job = ac.jobs[-1]
                    match = self.prepare(ac, slot, jid, job)
                except _BadJob:
                    continue  # that job is out: the next one of the autocluster
                if not rounding and used + self.weight_of(slot, match) > limit + 1e-9:
                    return used
                self.best(ac, classes)  # the same slot, now taken
                ac.jobs.pop()
                used += self.take(slot, match)
            if used >= limit:
                break
        return used

    # -- the pie ------------------------------------------------------------------------

    def run(self) -> CycleResult:
        by_submitter, classes = self.group()
        got = dict.fromkeys(by_submitter, 0.0)
        counts = dict.fromkeys(by_submitter, 0)
        first: dict[str, tuple[float, float]] = {}
        spins = 0
        rounding = False

        def pending(s: str) -> bool:
            return any(ac.jobs and not ac.rejected for ac in by_submitter[s])

        active = [s for s in by_submitter if pending(s)]
        while active:
            spins += 1
            eup = {s: max(self.priorities.effective(s), 1e-9) for s in active}
            norm = sum(1.0 / p for p in eup.values())
            limits = {}
            for s in active:
                share = (1.0 / eup[s]) / norm
                if self.config.ignore_user_priorities:
                    limits[s] = math.inf
                else:
                    in_use = self.priorities[s].resources_in_use
                    limits[s] = share * self.pool_weight - in_use - got[s]
                first.setdefault(s, (share, limits[s]))
            if rounding:
                # Slots left over for want of a whole share go to the largest fractions.
                active.sort(key=lambda s: (-limits[s], eup[s], s))
            else:
                active.sort(key=lambda s: (eup[s], s))
            made = 0
            for s in active:
                if limits[s] <= 0:
                    continue
                before = len(self.matches)
                got[s] += self.negotiate_submitter(by_submitter[s], limits[s], classes, rounding)
                counts[s] += len(self.matches) - before
                made += len(self.matches) - before
            active = [s for s in active if pending(s)]
            if not made and rounding:
                break
            rounding = not made
        for acs in by_submitter.values():
            for ac in acs:
                # Jobs left because the submitter's share ran out, not the pool?
                while ac.jobs and not ac.rejected:
                    try:
                        heap = self.candidates(ac, classes)
                    except _BadJob:
                        continue
                    ac.rejected = not any(entry[-1].peek() is not None for entry in heap)
                    break
        return self.result(by_submitter, got, counts, first, len(classes), spins)

    def result(
        self,
        by_submitter: dict[str, list[_Autocluster]],
        got: dict[str, float],
        counts: dict[str, int],
        first: dict[str, tuple[float, float]],
        n_classes: int,
        spins: int,
    ) -> CycleResult:
        rejections = [
            Rejection(jid, ac.submitter, NO_MATCH if ac.rejected else SUBMITTER_LIMIT)
            for acs in by_submitter.values()
            for ac in acs
            for jid, _ in reversed(ac.jobs)
        ]
        submitters = tuple(
            SubmitterCycle(
                s,
                self.priorities.effective(s),
                first.get(s, (0.0, 0.0))[0],
                first.get(s, (0.0, 0.0))[1],
                counts[s],
                got[s],
            )
            for s in sorted(by_submitter, key=lambda s: (self.priorities.effective(s), s))
        )
        return CycleResult(
            tuple(self.matches),
            tuple(rejections),
            submitters,
            sum(len(acs) for acs in by_submitter.values()),
            n_classes + len(self.new_classes),
            spins,
            self.pool_weight,
            tuple(self.failures),
            tuple(self.bad_machines),
        )


def negotiate(
    jobs: Iterable[ClassAd],
    machines: Sequence[ClassAd],
    priorities: PriorityTable | None = None,
    config: NegotiatorConfig | None = None,
    *,
    now: float,
) -> CycleResult:
    """Run one negotiation cycle of idle `jobs` against `machines` (slot and site ads).

    Nothing is modified: the negotiator's working copies of partitionable slots and
    re-evaluated ads live in the result's matches. `now` stamps LastMatchTime.
    """
    cycle = _Cycle(jobs, machines, priorities or PriorityTable(), config or NegotiatorConfig(), now)
    return cycle.run()
