"""The grid manager: grid universe jobs from the queue to GAHP servers and back.

* `run_gridmanager(home)` / `htgrid gridmanager`: the process (see `manager` for the
  contract with the queue daemon that supervises it).
* `explain_grid_job(ad)`: where a grid job stands and why (for `htgrid q -better-analyze`).
* Grid types plug in through `GridType` (`manager.GRID_TYPES`); `batch` is the first.

Imports go one way: classad, submit, queue and gahp, never the back ends (GAHP servers
are other processes, reached only through the protocol).
"""

from __future__ import annotations

from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import (
    AlreadyRunning,
    BadTransition,
    GahpUnavailable,
    GridError,
    UnsupportedGridJob,
)
from htgrid.grid._gridids import BatchJobId, BatchResourceName, grid_type_of
from htgrid.grid._gridtype import GridType
from htgrid.grid._resource import Resource, ResourceState, ResourceStats
from htgrid.grid.batch import (
    BATCH,
    TRANSITIONS,
    BatchEvent,
    BatchJob,
    BatchResource,
    BatchState,
    RemoteStatus,
    build_submit_ad,
)
from htgrid.grid.explain import explain_grid_job
from htgrid.grid.manager import ADOPTABLE, GRID_TYPES, GridManager, run_gridmanager

__all__ = [
    "ADOPTABLE",
    "BATCH",
    "GRID_TYPES",
    "TRANSITIONS",
    "AlreadyRunning",
    "BadTransition",
    "BatchEvent",
    "BatchJob",
    "BatchJobId",
    "BatchResource",
    "BatchResourceName",
    "BatchState",
    "GahpUnavailable",
    "GridError",
    "GridManager",
    "GridManagerConfig",
    "GridType",
    "RemoteStatus",
    "Resource",
    "ResourceState",
    "ResourceStats",
    "UnsupportedGridJob",
    "build_submit_ad",
    "explain_grid_job",
    "grid_type_of",
    "run_gridmanager",
]
