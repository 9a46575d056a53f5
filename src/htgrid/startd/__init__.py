"""The execute node (HTCondor's condor_startd and condor_starter): `htgrid startd`.

It advertises one partitionable slot with the host's cpus, memory, disk and GPUs; the
schedd claims dynamic slots of it over the node's API (`StartdClient`) and runs jobs
there, each in a scratch sandbox with its files transferred in and out. See `_daemon`
for the node's life, `_states` for its state machines and `_api` for the claim protocol.
"""

from htgrid.startd._config import StartdConfig
from htgrid.startd._errors import (
    CallerRefused,
    ClaimNotFound,
    ClaimRefused,
    ClaimStateError,
    StartdError,
    StartdProtocolError,
    StartdUnavailable,
)
from htgrid.startd._states import ClaimState, Outcome, OutcomeKind, Resources, SlotState
from htgrid.startd._wire import ClaimGrant, ClaimStatus
from htgrid.startd.client import StartdClient, socket_of

__all__ = [
    "CallerRefused",
    "ClaimGrant",
    "ClaimNotFound",
    "ClaimRefused",
    "ClaimState",
    "ClaimStateError",
    "ClaimStatus",
    "Outcome",
    "OutcomeKind",
    "Resources",
    "SlotState",
    "StartdClient",
    "StartdConfig",
    "StartdError",
    "StartdProtocolError",
    "StartdUnavailable",
    "socket_of",
]
