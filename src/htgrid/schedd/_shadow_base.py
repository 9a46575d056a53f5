"""What every shadow shares: its settings, why it stops a job, HTCondor's reasons, the
errors that end a run on its claim, what a shadow needs of its manager (`ShadowHost`),
and the small rules about claims and jobs the manager applies too."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from htgrid._privsep import OwnerPolicy
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.negotiator import Match, Updates
from htgrid.net.server import SizeLimit
from htgrid.queue import JobId, JobQueue, JobStatus
from htgrid.queue.faults import JobFailure
from htgrid.startd import ClaimGrant, ClaimState, Resources

if TYPE_CHECKING:
    from htgrid.schedd._shadow_files import InputTars
    from htgrid.schedd._shadow_run import ShadowRun

__all__ = [
    "ACTIVATED",
    "CUT",
    "DISCONNECTED",
    "LEASE_MARGIN",
    "NOT_SUPPORTED",
    "RESTARTED",
    "RUNNING",
    "VANILLA",
    "Evicted",
    "GaveUp",
    "ShadowHost",
    "ShadowSettings",
    "StopReason",
    "Unreachable",
    "after_stop",
    "claimed_slot",
    "lease_valid",
    "no_lease",
    "reconnect_delay",
    "reconnected_slot",
    "vacate_time",
]

_NO_INPUT_LIMIT: Final = SizeLimit("MAX_TRANSFER_INPUT_MB")
_NO_OUTPUT_LIMIT: Final = SizeLimit("MAX_TRANSFER_OUTPUT_MB")
# Beyond a claim's lease and its job's vacate time: the node's lease check runs every
# half second, and a killed job takes a moment to be gone.
LEASE_MARGIN: Final = 5.0
# HTCondor's reasons (its shadow's and its schedd's), as users and their tools know them.
CUT: Final = "Socket between submit and execute hosts closed unexpectedly"
# HTCondor's shadow's 024 for a job with no lease that lost its node: no reconnection.
NOT_SUPPORTED: Final = "Reconnect is not supported"
RESTARTED: Final = "Local schedd and job shadow died, schedd now running again"
RUNNING: Final = (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED)
VANILLA: Final = 5
# What a disconnected job carries until it is reconnected to or given up on.
DISCONNECTED: Final = ("JobDisconnectedDate", "JobLeaseExpiration", "DisconnectReason")
# A claim's states once it was activated for a job (`ClaimStatus.job` names it): the job
# ran there, or runs still.
ACTIVATED: Final = frozenset(ClaimState) - {ClaimState.CLAIMED, ClaimState.RELEASED}


@dataclass(frozen=True, slots=True)
class ShadowSettings:
    """What every shadow of one daemon shares."""

    schedd_name: str
    spool: Path  # the daemon's spool: transfer files and spooled sandboxes go under it
    alive_interval: float = 60.0
    lease: float = 360.0
    vacate_grace: float = 10.0  # beyond a job's own vacate time, at shutdown
    policy: OwnerPolicy | None = None  # as whom jobs' files are touched (None: the daemon)
    # The certificate and key the schedd presents to execute nodes on other hosts (the
    # pool CA's: they take claims from the pool's daemons only); None: local nodes only.
    identity: tuple[Path, Path] | None = None
    fsync: bool = True  # the claim records on disk before each claim is used
    # MAX_TRANSFER_INPUT_MB and _OUTPUT_MB: a job's own MaxTransferInputMB and
    # MaxTransferOutputMB (-1: none) stand in for them, as in HTCondor.
    max_input: SizeLimit = _NO_INPUT_LIMIT
    max_output: SizeLimit = _NO_OUTPUT_LIMIT
    # RECONNECT_BACKOFF_FACTOR and _CEILING: the waits between a shadow's attempts to
    # reconnect to a job (`reconnect_delay`).
    reconnect_factor: float = 2.0
    reconnect_ceiling: float = 300.0

    @property
    def transfers(self) -> Path:
        return self.spool / "transfer"

    def spooled(self, job_id: JobId) -> Path:
        """Where an evicted job's output waits for its next run (ON_EXIT_OR_EVICT)."""
        return self.spool / "sandboxes" / str(job_id)


class StopReason(enum.Enum):
    """Why the schedd stops a job it runs on an execute node."""

    HOLD = "hold"
    REMOVE = "remove"
    SHUTDOWN = "vacate"


class Evicted(HTGridError):
    """The claim is lost: the node restarted, vanished or dropped it."""


class Unreachable(Evicted):
    """The node does not answer: the job may still run there."""


class GaveUp(HTGridError):
    """A disconnected run was given up on (024): the job is back to idle, its claim
    forgotten."""


class NotStarted(HTGridError):
    """The node did not take the job's activation (refused it, or lost the claim), or
    the job was held or removed as it was activated: it never started (no 001), and
    stays as it is."""


class ShadowHost(Protocol):
    """What a shadow needs of its manager."""

    settings: ShadowSettings
    input_tars: InputTars  # the small input tars packed, for the next jobs

    async def write(self, fn: Callable[[JobQueue], Any]) -> Any: ...

    async def read(self, fn: Callable[[JobQueue], Any]) -> Any: ...

    async def record_claim(self, run: ShadowRun) -> None:
        """Write `run`'s claim (for its current job) down, on disk, before it is used."""
        ...

    async def forget_claim(self, run: ShadowRun) -> None:
        """`run`'s claim is released: its record goes."""
        ...

    def release_later(self, run: ShadowRun) -> None:
        """The node did not release `run`'s claim: asked again in the background."""
        ...

    def claim_answered(self, match: Match, granted: bool) -> None:
        """The node answered the claim of `match` (granted or not)."""
        ...

    def hold_lease(self, run: ShadowRun) -> None:
        """Keep `run`'s claim on a node of another host alive (`run.link` set)."""
        ...

    def drop_lease(self, run: ShadowRun) -> None: ...

    async def disconnected(self, run: ShadowRun, why: str, reason: str, deadline: float) -> None:
        """`run`'s node does not answer (`why`): its job Running, disconnected (022 with
        HTCondor's `reason`) until `deadline`, when its lease has surely run out there."""
        ...

    async def reconnected(self, run: ShadowRun) -> None:
        """`run`'s node answers again and runs its job on (023)."""
        ...

    async def gave_up(self, run: ShadowRun, reason: str, *, forget: bool = True) -> None:
        """The schedd gives `run` up (024 with `reason`): its job back to idle, the
        claim's record gone (unless not to `forget` it: the node still has the claim)."""
        ...

    def idle_scan(
        self, run: ShadowRun, *, fresh: bool = False
    ) -> Callable[[JobQueue], list[ClassAd] | None]:
        """What reads the idle jobs that may run next on `run`'s claim (on the queue
        thread, with the write that records the end of its job); it reads nothing
        (None) while jobs read before may do, unless `fresh`."""
        ...

    async def scanned(self, run: ShadowRun) -> None:
        """Once a read of the idle jobs of `run`'s owner under way, if any, came."""
        ...

    def exhausted(self, run: ShadowRun) -> bool:
        """Whether another read of the idle jobs of `run`'s owner would find none that
        `next_job` has not seen (the last found them all, and none came since)."""
        ...

    def next_job(
        self, run: ShadowRun, ads: list[ClassAd] | None
    ) -> tuple[JobId, ClassAd, Updates] | None:
        """An idle job of `ads` (or of those read before: None) to run on `run`'s claim
        next (now counted as `run`'s), or None."""
        ...

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    def failed(self, failure: JobFailure) -> None:
        """A job the shadow failed on for a reason of its own (logged once)."""
        ...


def claimed_slot(machine_ad: ClassAd, grant: ClaimGrant) -> ClassAd:
    """The claimed dynamic slot, as the next job on it is matched against."""
    ad = copy(machine_ad)
    have = grant.resources
    for name, value in (
        ("Cpus", have.cpus),
        ("Memory", have.memory),
        ("Disk", have.disk),
        ("GPUs", len(have.gpus)),
    ):
        ad[name] = value
    ad["Name"] = grant.slot
    ad["State"], ad["Activity"] = "Claimed", "Idle"
    return ad


def reconnected_slot(ads: list[ClassAd], name: str) -> tuple[ClassAd, Resources] | None:
    """The claimed dynamic slot `name` among a node's slot ads, as the next job on it is
    matched against (`claimed_slot`'s for a claim reconnected to), and what it holds."""
    for ad in ads:
        if ad.get("Name") != name:
            continue
        have = [ad.get(attr) for attr in ("Cpus", "Memory", "Disk")]
        cpus, memory, disk = (n if type(n) is int else -1 for n in have)
        if min(cpus, memory, disk) < 0:
            return None
        gpus = ad.get("AssignedGPUs")
        ids = (
            tuple(g.strip() for g in gpus.split(",") if g.strip()) if isinstance(gpus, str) else ()
        )
        slot = copy(ad)
        slot["State"], slot["Activity"] = "Claimed", "Idle"
        return slot, Resources(cpus, memory, disk, ids)
    return None


def vacate_time(ad: ClassAd) -> float:
    """How long the node gives the job to stop before killing it (JobMaxVacateTime)."""
    vacate = ad.get("JobMaxVacateTime")
    if isinstance(vacate, int | float) and not isinstance(vacate, bool) and vacate >= 0:
        return float(vacate)
    return 10.0


def reconnect_delay(attempts: int, settings: ShadowSettings) -> float:
    """The wait before the next attempt to reconnect to a job after `attempts` ones
    failed, as HTCondor's shadow waits: none before the first, then
    RECONNECT_BACKOFF_FACTOR ** (attempts + 2) seconds (rounded up), at most
    RECONNECT_BACKOFF_CEILING. The caller bounds it by what is left of the lease."""
    if attempts <= 0:
        return 0.0
    try:
        delay = float(math.ceil(settings.reconnect_factor ** (attempts + 2)))
    except OverflowError:
        return settings.reconnect_ceiling
    return min(delay, settings.reconnect_ceiling)


def no_lease(ad: ClassAd) -> bool:
    """Whether the job runs with no lease (JobLeaseDuration 0, or none: HTCondor's
    shadow supports no reconnection for it, nor its schedd at a restart): it is never
    reconnected to, it runs again."""
    duration = ad.get("JobLeaseDuration")
    return not isinstance(duration, int | float) or isinstance(duration, bool) or duration <= 0


def lease_valid(ad: ClassAd, now: float) -> bool:
    """Whether a job found Running at a restart may be reconnected to, as HTCondor's
    schedd decides: it has a lease (not `no_lease`), and its JobLeaseDuration has not
    passed since its LastJobLeaseRenewal. One with no renewal recorded (started by an
    older daemon) is tried."""
    if no_lease(ad):
        return False
    duration: float = ad["JobLeaseDuration"]  # a number: `no_lease` says so
    renewed = ad.get("LastJobLeaseRenewal")
    if not isinstance(renewed, int | float) or isinstance(renewed, bool):
        return True
    return now - renewed < duration


def after_stop(q: JobQueue, jid: JobId) -> str:
    """A job no longer running that was removed meanwhile leaves the queue."""
    status = JobStatus(q.get(jid)["JobStatus"])
    if status == JobStatus.REMOVED:
        q.destroy(jid)
        return "removed"
    return status.label.lower()
