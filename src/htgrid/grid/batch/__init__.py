"""The batch grid type (`batch <lrms>`: Slurm, PBS, SGE, LSF, fork) through the blahp's GAHP."""

from __future__ import annotations

from htgrid.grid.batch._ids import BatchJobId, BatchResourceName
from htgrid.grid.batch._job import BATCH, BatchJob
from htgrid.grid.batch._resource import BatchResource, build_submit_ad, remote_attrs
from htgrid.grid.batch._table import TRANSITIONS, BatchEvent, BatchState

__all__ = [
    "BATCH",
    "TRANSITIONS",
    "BatchEvent",
    "BatchJob",
    "BatchJobId",
    "BatchResource",
    "BatchResourceName",
    "BatchState",
    "build_submit_ad",
    "remote_attrs",
]
