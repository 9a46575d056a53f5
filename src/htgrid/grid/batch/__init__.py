"""The batch grid type (`batch <lrms> [user@host]`: Slurm, PBS, SGE, LSF, fork, here or over
ssh) through the blahp's GAHP."""

from __future__ import annotations

from htgrid.grid.batch._ids import BatchJobId, BatchResourceName
from htgrid.grid.batch._job import BATCH, BatchJob
from htgrid.grid.batch._remote import RemoteHost, Sandbox, remote_submit_ad
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
    "RemoteHost",
    "Sandbox",
    "build_submit_ad",
    "remote_attrs",
    "remote_submit_ad",
]
