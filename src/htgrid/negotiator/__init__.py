"""The negotiator (HTCondor's condor_negotiator): matchmaking and fair share.

`negotiate()` is one cycle as a pure function of idle jobs, slot and grid-site ads, user
priorities and configuration; `Negotiator` runs cycles against a job source and the
collector; `analyze` explains why a job does not match (condor_q -better-analyze).
"""

from htgrid.negotiator._ads import slot_weight, submitter_of
from htgrid.negotiator._cycle import negotiate
from htgrid.negotiator._expand import (
    Expansion,
    Updates,
    apply_updates,
    dollar_attributes,
    expand,
    history_updates,
)
from htgrid.negotiator._model import (
    DEFAULT_POST_JOB_RANK,
    DEFAULT_PRE_JOB_RANK,
    CycleResult,
    Match,
    NegotiatorConfig,
    Rejection,
    ResourceRequest,
    SubmitterCycle,
)
from htgrid.negotiator._priorities import (
    DEFAULT_HALFLIFE,
    DEFAULT_PRIO_FACTOR,
    MIN_PRIORITY,
    PriorityTable,
    UserPriority,
)
from htgrid.negotiator._signature import RefCache, group_signatures

__all__ = [
    "DEFAULT_HALFLIFE",
    "DEFAULT_POST_JOB_RANK",
    "DEFAULT_PRE_JOB_RANK",
    "DEFAULT_PRIO_FACTOR",
    "MIN_PRIORITY",
    "CycleResult",
    "Expansion",
    "Match",
    "NegotiatorConfig",
    "PriorityTable",
    "RefCache",
    "Rejection",
    "ResourceRequest",
    "SubmitterCycle",
    "Updates",
    "UserPriority",
    "apply_updates",
    "dollar_attributes",
    "expand",
    "group_signatures",
    "history_updates",
    "negotiate",
    "slot_weight",
    "submitter_of",
]
