"""The negotiator's configuration and what a cycle produces (frozen values)."""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.negotiator._expand import Expansion, Updates, apply_updates
from htgrid.queue import JobId
from htgrid.queue.faults import JobFailure

__all__ = [
    "DEFAULT_POST_JOB_RANK",
    "DEFAULT_PRE_JOB_RANK",
    "CycleResult",
    "MachineFailure",
    "Match",
    "NegotiatorConfig",
    "Rejection",
    "ResourceRequest",
    "SubmitterCycle",
]

# HTCondor's defaults (25.x): prefer slots whose Rank likes the job, then unclaimed
# slots, then the smallest that fits (to keep big slots for big jobs) ...
DEFAULT_PRE_JOB_RANK = (
    "(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) - (100000 * Cpus) - Memory"
)
# ... and, after the job's own Rank, faster machines and lower slot numbers.
DEFAULT_POST_JOB_RANK = (
    "(RemoteOwner =?= UNDEFINED) * (ifthenElse(isUndefined(KFlops), 1000, Kflops)"
    " - SlotID - 1.0e10*(Offline=?=True))"
)

NO_MATCH = "no match found"
SUBMITTER_LIMIT = "submitter limit exceeded"


@dataclass(frozen=True, slots=True)
class NegotiatorConfig:
    """The negotiator's knobs, named after HTCondor's configuration variables."""

    # NEGOTIATOR_PRE_JOB_RANK / NEGOTIATOR_POST_JOB_RANK: evaluated with the slot as MY
    # and the job as TARGET; candidates sort by PRE, then the job's Rank, then POST.
    # None leaves a step out.
    pre_job_rank: str | None = DEFAULT_PRE_JOB_RANK
    post_job_rank: str | None = DEFAULT_POST_JOB_RANK
    # NEGOTIATOR_IGNORE_USER_PRIORITIES: no fair-share limits (grid matchmaking sets it,
    # as one site ad then takes many jobs in a cycle).
    ignore_user_priorities: bool = False
    # NEGOTIATOR_USE_SLOT_WEIGHTS: a slot counts its SlotWeight (default its Cpus)
    # toward shares; otherwise every slot counts 1.
    use_slot_weights: bool = True
    # SIGNIFICANT_ATTRIBUTES beyond those the expressions reach (rarely needed).
    significant_attributes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """What a job takes from a partitionable slot: its dynamic slot's size."""

    cpus: int
    memory: int  # MB
    disk: int  # KB


@dataclass(frozen=True, slots=True)
class Match:
    """One job matched to one slot or grid site."""

    job_id: JobId
    submitter: str
    machine: str  # the matched ad's Name
    machine_ad: ClassAd  # the ad as the negotiator matched it (read-only)
    weight: float  # what the match counts toward the submitter's share
    request: ResourceRequest | None  # set when carved from a partitionable slot
    expansion: Expansion
    history: Updates  # NumJobMatches, LastMatchTime, LastMatchName0..N

    @property
    def job_updates(self) -> Updates:
        """(attribute, expression) pairs the queue records in the job for this match."""
        return self.history + self.expansion.recorded

    def job_ad(self, job: ClassAd) -> ClassAd:
        """The job as it runs at the match: updates recorded and `$$()` macros filled."""
        return apply_updates(job, self.job_updates, self.expansion.expanded)


@dataclass(frozen=True, slots=True)
class Rejection:
    """An idle job the cycle did not match, and why (HTCondor's LastRejMatchReason)."""

    job_id: JobId
    submitter: str
    reason: str


@dataclass(frozen=True, slots=True)
class SubmitterCycle:
    """One submitter in a cycle: priority, share of the pool and what it got."""

    name: str
    effective_priority: float
    share: float  # fraction of the pool due at the first spin
    limit: float  # slot weight allowed at the first spin (inf when priorities are ignored)
    matched: int
    weight: float


@dataclass(frozen=True, slots=True)
class MachineFailure:
    """A slot or site ad left out of a cycle: evaluating it failed."""

    name: str  # its Name, or its place in the list when it has none
    problem: str


@dataclass(frozen=True, slots=True)
class CycleResult:
    """Everything one negotiation cycle decided."""

    matches: tuple[Match, ...]
    rejections: tuple[Rejection, ...]
    submitters: tuple[SubmitterCycle, ...]
    autoclusters: int
    machine_classes: int
    spins: int
    pool_weight: float
    #: Jobs left out because handling them failed: the queue holds them (`held` False).
    failures: tuple[JobFailure, ...] = ()
    #: Ads left out for the same reason.
    bad_machines: tuple[MachineFailure, ...] = ()
