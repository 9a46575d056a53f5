"""The execute node (HTCondor's condor_startd and condor_starter): `htgrid startd`.

It advertises one partitionable slot with the host's cpus, memory, disk and GPUs; the
schedd claims dynamic slots of it over the node's API (`StartdClient`) and runs jobs
there, each in a scratch sandbox with its files transferred in and out. See `_daemon`
for the node's life, `_states` for its state machines and `_api` for the claim protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.startd._claims import job_lease, request_of
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
from htgrid.startd._wire import TLS_CERTIFICATE, ClaimGrant, ClaimStatus
from htgrid.startd.client import StartdClient, host_port_of, socket_of

if TYPE_CHECKING:
    from htgrid.startd._run import run_startd
    from htgrid.startd._transfer import (
        TransferError,
        input_entries,
        input_size,
        pack,
        unpack_output,
        unpack_to,
    )

#: The node itself, and the sandbox transfer its starter shares with the schedd's
#: shadows, load when first asked for (they bring the daemons' HTTP side with them).
_LAZY: Final = {
    "run_startd": "_run",
    "TransferError": "_transfer",
    "input_entries": "_transfer",
    "input_size": "_transfer",
    "pack": "_transfer",
    "unpack_output": "_transfer",
    "unpack_to": "_transfer",
}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = [
    "TLS_CERTIFICATE",
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
    "TransferError",
    "host_port_of",
    "input_entries",
    "input_size",
    "job_lease",
    "pack",
    "request_of",
    "run_startd",
    "socket_of",
    "unpack_output",
    "unpack_to",
]
