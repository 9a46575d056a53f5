"""The execute node's two state machines, and the values they carry.

The partitionable slot (the whole machine) has HTCondor's slot State:

    from \\ to     Owner  Unclaimed  Drained
    Owner            .       yes        yes     (START is false: it takes no jobs now)
    Unclaimed       yes       .         yes     (it takes claims, carving dynamic slots)
    Drained          .        .          .      (shutting down: no new claims)

Each claim is a dynamic slot carved from it, and moves through:

    from \\ to   Claimed Starting Running Suspended Retiring Vacating Killing Ended Released
    Claimed        .       yes      .        .         .        .        .      .     yes
    Starting       .        .      yes       .         .       yes      yes    yes     .
    Running        .        .       .       yes       yes      yes      yes    yes     .
    Suspended      .        .      yes       .        yes      yes      yes    yes     .
    Retiring       .        .       .       yes        .       yes      yes    yes     .
    Vacating       .        .       .        .         .        .       yes    yes     .
    Killing        .        .       .        .         .        .        .     yes     .
    Ended         yes       .       .        .         .        .        .      .     yes
    Released       .        .       .        .         .        .        .      .      .

(Starting to Ended: it could not start; Ended to Claimed: the claim is reused.) While the
job runs, the node's policy (`_policy`: WANT_SUSPEND, SUSPEND, CONTINUE, PREEMPT,
WANT_VACATE, KILL, MAXJOBRETIREMENTTIME) moves it between Running, Suspended (its
processes stopped), Retiring (PREEMPT was true: the job may run out its retirement
time) and the two ways of preempting it: Vacating (its soft kill signal) and Killing
(SIGKILL). A suspended claim preempted before (`Claim.preempted`) continues to Retiring.

A dynamic slot advertises the State and Activity `SLOT_OF` gives its claim's state: it
is Claimed/Idle until the schedd activates it, Claimed/Busy while the job is set up and
runs, Claimed/Suspended and Claimed/Retiring as the policy says, Preempting/Vacating or
Preempting/Killing while the job is stopped, and Claimed/Idle again once the job's
end waits for the schedd to collect it. The schedd may then reuse the claim for another
job of the same user that fits it (HTCondor's claim reuse: no negotiation in between),
or release it, which deletes the dynamic slot and returns its resources to the
partitionable slot.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from htgrid.startd._errors import ClaimStateError

__all__ = [
    "ACTIVE",
    "CLAIM_TRANSITIONS",
    "SLOT_OF",
    "SLOT_TRANSITIONS",
    "ClaimState",
    "Outcome",
    "OutcomeKind",
    "Resources",
    "SlotState",
    "check_claim_move",
]


class SlotState(enum.Enum):
    """The partitionable slot's `State`."""

    OWNER = "Owner"
    UNCLAIMED = "Unclaimed"
    DRAINED = "Drained"


SLOT_TRANSITIONS: Final[Mapping[SlotState, frozenset[SlotState]]] = {
    SlotState.OWNER: frozenset({SlotState.UNCLAIMED, SlotState.DRAINED}),
    SlotState.UNCLAIMED: frozenset({SlotState.OWNER, SlotState.DRAINED}),
    SlotState.DRAINED: frozenset(),
}


class ClaimState(enum.Enum):
    """Where one claim (one dynamic slot) is."""

    CLAIMED = "claimed"  # resources held for the schedd, no job yet
    STARTING = "starting"  # the job ad arrived: sandbox, input files, process
    RUNNING = "running"
    SUSPENDED = "suspended"  # SUSPEND was true: the job's processes are stopped
    RETIRING = "retiring"  # PREEMPT was true: the job runs out its retirement time
    VACATING = "vacating"  # the job is being killed (KillSig, then SIGKILL)
    KILLING = "killing"  # ... hard: SIGKILL (KILL was true, or its vacate time is over)
    ENDED = "ended"  # the job is over; its outcome waits for the schedd
    RELEASED = "released"  # the dynamic slot is gone


_PREEMPTING: Final = frozenset({ClaimState.VACATING, ClaimState.KILLING, ClaimState.ENDED})

CLAIM_TRANSITIONS: Final[Mapping[ClaimState, frozenset[ClaimState]]] = {
    ClaimState.CLAIMED: frozenset({ClaimState.STARTING, ClaimState.RELEASED}),
    ClaimState.STARTING: frozenset({ClaimState.RUNNING}) | _PREEMPTING,
    ClaimState.RUNNING: frozenset({ClaimState.SUSPENDED, ClaimState.RETIRING}) | _PREEMPTING,
    ClaimState.SUSPENDED: frozenset({ClaimState.RUNNING, ClaimState.RETIRING}) | _PREEMPTING,
    ClaimState.RETIRING: frozenset({ClaimState.SUSPENDED}) | _PREEMPTING,
    ClaimState.VACATING: frozenset({ClaimState.KILLING, ClaimState.ENDED}),
    ClaimState.KILLING: frozenset({ClaimState.ENDED}),
    ClaimState.ENDED: frozenset({ClaimState.CLAIMED, ClaimState.RELEASED}),
    ClaimState.RELEASED: frozenset(),
}
#: The states of a claim whose job's process may run (or be stopped): the policy's.
ACTIVE: Final = frozenset(
    {ClaimState.STARTING, ClaimState.RUNNING, ClaimState.SUSPENDED, ClaimState.RETIRING}
)

# (State, Activity) a dynamic slot advertises for its claim's state.
SLOT_OF: Final[Mapping[ClaimState, tuple[str, str]]] = {
    ClaimState.CLAIMED: ("Claimed", "Idle"),
    ClaimState.STARTING: ("Claimed", "Busy"),
    ClaimState.RUNNING: ("Claimed", "Busy"),
    ClaimState.SUSPENDED: ("Claimed", "Suspended"),
    ClaimState.RETIRING: ("Claimed", "Retiring"),
    ClaimState.VACATING: ("Preempting", "Vacating"),
    ClaimState.KILLING: ("Preempting", "Killing"),
    ClaimState.ENDED: ("Claimed", "Idle"),
    ClaimState.RELEASED: ("Unclaimed", "Idle"),
}


def check_claim_move(claim_id: str, old: ClaimState, new: ClaimState) -> None:
    """Raise ClaimStateError unless the table allows `old` -> `new`."""
    if new not in CLAIM_TRANSITIONS[old]:
        raise ClaimStateError(f"claim {claim_id} is {old.value}: it cannot become {new.value}")


@dataclass(frozen=True, slots=True)
class Resources:
    """What a slot has: cpus, memory (MB), disk (KB) and GPUs (their ids)."""

    cpus: int
    memory: int
    disk: int
    gpus: tuple[str, ...] = ()

    def fits(self, other: Resources) -> bool:
        """Whether `other` fits in this (GPUs by count)."""
        return (
            other.cpus <= self.cpus
            and other.memory <= self.memory
            and other.disk <= self.disk
            and len(other.gpus) <= len(self.gpus)
        )

    def minus(self, other: Resources) -> Resources:
        return Resources(
            self.cpus - other.cpus,
            self.memory - other.memory,
            self.disk - other.disk,
            tuple(g for g in self.gpus if g not in other.gpus),
        )


class OutcomeKind(enum.Enum):
    """How a job's run on the execute node ended."""

    EXITED = "exited"  # the process ended by itself (an exit code or a signal)
    EVICTED = "evicted"  # stopped by the execute node or the schedd before it ended
    FAILED = "failed"  # could not start, or its files could not be transferred


@dataclass(frozen=True, slots=True)
class Outcome:
    """The end of a job's run, as the startd reports it to the schedd."""

    kind: OutcomeKind
    exit_code: int | None = None
    signal: int | None = None
    user_cpu: float = 0.0
    sys_cpu: float = 0.0
    wall: float = 0.0
    max_rss_kb: int = 0
    disk_kb: int = 0
    output: bool = False  # an output sandbox waits at GET /v1/claims/{id}/output
    reason: str = ""  # FAILED: why (the HoldReason); EVICTED: why, if the node knows
    hold_code: int = 0  # EVICTED: the VacateReasonCode
    hold_subcode: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "user_cpu": self.user_cpu,
            "sys_cpu": self.sys_cpu,
            "wall": self.wall,
            "max_rss_kb": self.max_rss_kb,
            "disk_kb": self.disk_kb,
            "output": self.output,
            "reason": self.reason,
            "hold_code": self.hold_code,
            "hold_subcode": self.hold_subcode,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Outcome:
        """The outcome a JSON object describes (KeyError/ValueError/TypeError if it is not one)."""

        def opt_int(name: str) -> int | None:
            value = obj.get(name)
            return None if value is None else int(value)

        return cls(
            kind=OutcomeKind(obj["kind"]),
            exit_code=opt_int("exit_code"),
            signal=opt_int("signal"),
            user_cpu=float(obj.get("user_cpu", 0.0)),
            sys_cpu=float(obj.get("sys_cpu", 0.0)),
            wall=float(obj.get("wall", 0.0)),
            max_rss_kb=int(obj.get("max_rss_kb", 0)),
            disk_kb=int(obj.get("disk_kb", 0)),
            output=bool(obj.get("output", False)),
            reason=str(obj.get("reason", "")),
            hold_code=int(obj.get("hold_code", 0)),
            hold_subcode=int(obj.get("hold_subcode", 0)),
        )
