"""The partitionable slot's books: its state, and the claims (dynamic slots) carved from it.

Everything here is owned by the startd's event loop; nothing blocks. A claim's `version`
grows with each change of state, and `wait_change` is what a schedd's long poll awaits.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from htgrid._aio import wait_event
from htgrid.classad import ClassAd
from htgrid.queue import JobId
from htgrid.startd._errors import ClaimNotFound, ClaimRefused, ClaimStateError
from htgrid.startd._states import (
    SLOT_OF,
    SLOT_TRANSITIONS,
    ClaimState,
    Outcome,
    Resources,
    SlotState,
    check_claim_move,
)
from htgrid.startd._wire import ClaimStatus

if TYPE_CHECKING:
    from htgrid.startd._starter import Starter

#: Keep-alives missed before the schedd of a job with no lease is taken as cut off (the
#: schedd takes the node as cut off after as many unanswered).
ALIVES_MISSED: Final = 2

__all__ = ["ALIVES_MISSED", "Claim", "Slots", "has_lease", "job_lease", "request_of"]


def job_lease(job: ClassAd, default: float) -> float:
    """How long a claim running `job` lasts without word from its schedd: the job's
    JobLeaseDuration when it names one (HTCondor's claim takes it at activation), else
    `default` (ALIVE_INTERVAL * MAX_CLAIM_ALIVES_MISSED)."""
    value = job.get("JobLeaseDuration")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def has_lease(job: ClassAd) -> bool:
    """Whether `job` names a lease (JobLeaseDuration above 0). A job with none (0, or
    undefined) is not waited for when its schedd is cut off: as HTCondor's starter,
    which ends it once its shadow's connection is lost, the node ends it once its
    schedd's keep-alives stop (`Claim.limit`)."""
    value = job.get("JobLeaseDuration")
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def request_of(job: ClassAd, slot: ClassAd, gpus_free: tuple[str, ...]) -> Resources:
    """What the job asks for (RequestCpus/Memory/Disk/GPUs), evaluated against the slot."""
    asked = []
    for attr, default in (
        ("RequestCpus", 1),
        ("RequestMemory", 0),
        ("RequestDisk", 0),
        ("RequestGPUs", 0),
    ):
        value = job.lookup(attr).eval(job, slot) if attr in job else None
        number = value if isinstance(value, int | float) and type(value) in (int, float) else None
        asked.append(default if number is None else max(0, math.ceil(number)))
    cpus, memory, disk, gpus = asked
    if gpus > len(gpus_free):
        raise ClaimRefused(f"the job asks for {gpus} GPUs; {len(gpus_free)} are free")
    return Resources(cpus, memory, disk, gpus_free[:gpus])


@dataclass(eq=False)
class Claim:
    """One claim: a dynamic slot held for a schedd, and the job it runs."""

    claim_id: str
    slot_id: int  # the N of slot1_N
    name: str
    resources: Resources
    job_ad: ClassAd
    schedd: str
    lease: float
    renewed: float  # monotonic time of the last word from the schedd
    entered: float  # wall time the current state began
    state: ClaimState = ClaimState.CLAIMED
    version: int = 0
    outcome: Outcome | None = None
    transfer_input: bool = False
    starter: Starter | None = None
    job_start: float | None = None
    watchers: int = 0  # long polls waiting on it now
    uses: int = 0  # jobs it ran before this one (claim reuse)
    # The input sandbox's tar that came with the last activation (a small one's), which
    # the next job may name again ("input_again") rather than send once more.
    last_input: bytes | None = None
    # CLAIM_WORKLIFE: seconds from the grant after which the claim takes no further job
    # (None: no limit); `closing` is decided as each job ends, HTCondor's "Start" answer
    # to its shadow's deactivation, and told to the schedd with the claim's status.
    worklife: float | None = None
    granted: float = 0.0  # wall time the claim was granted
    closing: bool = False
    # The job runs with no lease (`has_lease`); when the last keep-alive came (monotonic),
    # and how often they come: the schedd's ALIVE_INTERVAL, as it says (an older
    # schedd's: the longest time seen between two).
    no_lease: bool = False
    alive_at: float | None = None
    alive_every: float = 0.0
    # The node's policy on the running job (`_policy`): when the slot's State (Claimed,
    # Preempting) began (wall time; `entered` is its Activity's), how often the job was
    # suspended, since when it is (None: it is not) and how long it was in all before;
    # whether PREEMPT was true for it (its retirement, which nothing undoes).
    state_entered: float = 0.0
    suspensions: int = 0
    suspended_since: float | None = None
    suspended_total: float = 0.0
    preempted: bool = False
    suspended_version: int = 0  # `version` as the job was last suspended or continued
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def job_id(self) -> JobId | None:
        cluster, proc = self.job_ad.get("ClusterId"), self.job_ad.get("ProcId")
        if type(cluster) is int and type(proc) is int:
            return JobId(cluster, proc)
        return None

    def limit(self) -> float:
        """How long the claim lasts without word from its schedd: its lease; once it
        took a job with no lease (until its next job), `ALIVES_MISSED` of its schedd's
        keep-alives, once two told how often they come."""
        if self.no_lease and self.state is not ClaimState.CLAIMED and self.alive_every > 0:
            return min(self.lease, ALIVES_MISSED * self.alive_every)
        return self.lease

    def cut_off(self, now: float) -> bool:
        """Whether the schedd was silent past `limit()` (`now`: monotonic)."""
        return now - self.renewed > self.limit()

    def worn_out(self, now: float) -> bool:
        """Whether the claim is idle past its CLAIM_WORKLIFE (`now`: wall time): readied
        for another job after one it ran, none activated since. HTCondor's startd
        releases such a claim by itself ("idle claim shutting down due to
        CLAIM_WORKLIFE"); a claim never activated is not counted (its activations are
        none), nor one whose job ended (the schedd has yet to collect that end; told
        `closing`, it releases the claim itself)."""
        at = self.wears_out()
        return at is not None and now > at

    def wears_out(self) -> float | None:
        """When (wall time) the claim is `worn_out` if it stays as it is; None: never."""
        if self.worklife is None or self.state is not ClaimState.CLAIMED or self.uses == 0:
            return None
        return self.granted + self.worklife

    def move(self, new: ClaimState, now: float) -> None:
        """Change state as the table allows (ClaimStateError otherwise); wake long polls."""
        check_claim_move(self.claim_id, self.state, new)
        if new is ClaimState.ENDED and self.worklife is not None:
            self.closing = self.closing or now - self.granted >= self.worklife
        if self.suspended_since is not None:  # left the Suspended activity
            self.suspended_total += max(0.0, now - self.suspended_since)
            self.suspended_since = None
        if new is ClaimState.SUSPENDED:
            self.suspensions += 1
            self.suspended_since = now
        elif new is ClaimState.CLAIMED:  # reused: the next job starts afresh
            self.suspensions, self.suspended_total, self.preempted = 0, 0.0, False
        if SLOT_OF[new][0] != SLOT_OF[self.state][0]:
            self.state_entered = now
        suspension = ClaimState.SUSPENDED in (new, self.state)
        self.state = new
        self.entered = now
        self.touch()
        if suspension:
            self.suspended_version = self.version

    def run_time(self, now: float) -> float:
        """How long the job has run (`now`: wall time), its suspensions not counted:
        what its retirement time is measured against."""
        if self.job_start is None:
            return 0.0
        stopped = self.suspended_total
        if self.suspended_since is not None:
            stopped += max(0.0, now - self.suspended_since)
        return max(0.0, now - self.job_start - stopped)

    def touch(self) -> None:
        """Something the schedd should see changed: wake whoever waits for it."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def status(self) -> ClaimStatus:
        ended = self.state is ClaimState.ENDED and self.starter is not None
        job = self.job_id if self.state is not ClaimState.CLAIMED else None
        return ClaimStatus(
            self.claim_id,
            self.name,
            self.state,
            self.version,
            self.transfer_input and self.state is ClaimState.STARTING,
            self.outcome,
            self.starter.output_inline if ended and self.starter is not None else None,
            None if job is None else str(job),
            self.closing,
            self.suspensions,
            self.suspended_version,
        )

    async def wait_change(self, version: int, timeout: float) -> None:
        """Return once the claim is past `version`, or after `timeout` seconds."""
        if self.version != version or timeout <= 0:
            return
        await wait_event(self._changed, timeout)


class Slots:
    """The partitionable slot: its state, what is free, and its claims."""

    def __init__(
        self,
        offered: Resources,
        hostname: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.offered = offered
        self.hostname = hostname
        self.state = SlotState.UNCLAIMED
        self.entered = clock()
        self.claims: dict[str, Claim] = {}
        self.released: list[str] = []  # dynamic slot names gone since the last advertisement
        self._clock = clock
        self._monotonic = monotonic
        self._next = 1

    @property
    def name(self) -> str:
        return f"slot1@{self.hostname}"

    @property
    def free(self) -> Resources:
        free = self.offered
        for claim in self.claims.values():
            free = free.minus(claim.resources)
        return free

    def move(self, new: SlotState) -> None:
        """Change the partitionable slot's state (unchanged states are fine)."""
        if new is self.state:
            return
        if new not in SLOT_TRANSITIONS[self.state]:
            raise ClaimStateError(f"{self.name} is {self.state.value}: not {new.value}")
        self.state = new
        self.entered = self._clock()

    def carve(
        self,
        claim_id: str,
        request: Resources,
        job_ad: ClassAd,
        schedd: str,
        lease: float,
        *,
        worklife: float | None = None,
    ) -> Claim:
        """A new claim of `request` (ClaimRefused when the slot cannot give it), taking
        jobs for `worklife` seconds (CLAIM_WORKLIFE; None: no limit)."""
        if self.state is not SlotState.UNCLAIMED:
            raise ClaimRefused(f"{self.name} is {self.state.value}: it takes no claims now")
        if claim_id in self.claims:
            raise ClaimRefused(f"claim id {claim_id} is in use")
        free = self.free
        if request.cpus < 1 or not free.fits(request):
            raise ClaimRefused(
                f"{self.name} has {free.cpus} cpus, {free.memory} MB and {free.disk} KB free; "
                f"the job asks for {request.cpus}, {request.memory} MB and {request.disk} KB"
            )
        slot_id, now = self._next, self._clock()
        self._next += 1
        claim = Claim(
            claim_id=claim_id,
            slot_id=slot_id,
            name=f"slot1_{slot_id}@{self.hostname}",
            resources=request,
            job_ad=job_ad,
            schedd=schedd,
            lease=lease,
            renewed=self._monotonic(),
            entered=now,
            worklife=worklife,
            granted=now,
            state_entered=now,
        )
        self.claims[claim_id] = claim
        return claim

    def get(self, claim_id: str, *, renew: bool = True) -> Claim:
        """The claim (ClaimNotFound when there is none: released, expired, or a restart);
        its lease renewed unless `renew` is false (a read no word of the schedd's asked)."""
        claim = self.claims.get(claim_id)
        if claim is None:
            raise ClaimNotFound(
                f"no claim {claim_id} here: it was released or expired, or the execute node "
                "restarted"
            )
        now = self._monotonic()
        if claim.cut_off(now):
            # Run out, if not yet ended (a request that waited, say in a stopped node's
            # socket, must not revive it): its job is being killed, and the claim is not
            # found once it is gone.
            raise ClaimStateError(f"claim {claim_id}'s lease ran out: it is being ended")
        if renew:
            claim.renewed = now  # every word from the schedd renews the lease
        return claim

    def renew(self, claim_ids: list[str], every: float | None = None) -> list[str]:
        """A keep-alive from a schedd for all its claims here, sent each `every` seconds
        (its ALIVE_INTERVAL): each one's lease starts again; the ids of those this node
        does not have (released, expired, or a restart) or whose lease ran out already
        are returned."""
        now = self._monotonic()
        unknown = []
        for claim_id in claim_ids:
            claim = self.claims.get(claim_id)
            if claim is None or claim.cut_off(now):
                unknown.append(claim_id)  # gone, or run out (being ended)
            else:
                claim.renewed = now
                if every is not None:
                    # As said: a gap measured across a stall of this node (stopped, or
                    # starved of CPU) would stretch the time a job with no lease lasts.
                    claim.alive_every = every
                elif claim.alive_at is not None:  # an older schedd: as seen
                    claim.alive_every = max(claim.alive_every, now - claim.alive_at)
                claim.alive_at = now
        return unknown

    def release(self, claim: Claim) -> None:
        """Delete the dynamic slot; its resources return to the partitionable slot."""
        claim.move(ClaimState.RELEASED, self._clock())
        self.claims.pop(claim.claim_id, None)
        self.released.append(claim.name)

    def next_due(self) -> float | None:
        """Seconds until the first claim's lease runs out or it wears out (`worn_out`),
        if they stay as they are; None when there is no claim."""
        now, wall = self._monotonic(), self._clock()
        due = [c.renewed + c.limit() - now for c in self.claims.values()]
        due += [at - wall for c in self.claims.values() if (at := c.wears_out()) is not None]
        return min(due, default=None)

    def expired(self) -> list[Claim]:
        """The claims whose lease ran out without a word from their schedd."""
        now = self._monotonic()
        return [c for c in self.claims.values() if c.cut_off(now)]
