"""The condor grid type (HTCondor-C: `condor <schedd> <pool>`) through the condor GAHP."""

from __future__ import annotations

from htgrid.grid.condor._ids import CondorJobId, CondorResourceName
from htgrid.grid.condor._job import CONDOR, CondorJob, condor_type
from htgrid.grid.condor._resource import CondorResource
from htgrid.grid.condor._table import CondorEvent, CondorState

__all__ = [
    "CONDOR",
    "CondorEvent",
    "CondorJob",
    "CondorJobId",
    "CondorResource",
    "CondorResourceName",
    "CondorState",
    "condor_type",
]
