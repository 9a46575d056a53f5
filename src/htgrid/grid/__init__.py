"""The grid manager: grid universe jobs from the queue to GAHP servers and back.

* `run_gridmanager(home)` / `htgrid gridmanager`: the process (see `manager` for the
  contract with the queue daemon that supervises it).
* `explain_grid_job(ad)`: where a grid job stands and why (for `htgrid q -better-analyze`).
* Grid types plug in through `GridType` (`GRID_TYPES`): one sub-package each, `batch`
  (the blahp's batch systems), `condor` (HTCondor-C), `ec2` and `azure`, with its jobs,
  its resource, its state table and its GridResource and GridJobId formats. The core
  here (the job's task, `Resource`, the queue and user-log writers) names none.

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
from htgrid.grid._gridtype import GridType
from htgrid.grid._registry import GRID_TYPES, grid_type_of, resource_name
from htgrid.grid._resource import Resource, ResourceState, ResourceStats
from htgrid.grid._run import run_gridmanager
from htgrid.grid.explain import explain_grid_job
from htgrid.grid.manager import ADOPTABLE, GridManager, Publish

__all__ = [
    "ADOPTABLE",
    "GRID_TYPES",
    "AlreadyRunning",
    "BadTransition",
    "GahpUnavailable",
    "GridError",
    "GridManager",
    "GridManagerConfig",
    "GridType",
    "Publish",
    "Resource",
    "ResourceState",
    "ResourceStats",
    "UnsupportedGridJob",
    "explain_grid_job",
    "grid_type_of",
    "resource_name",
    "run_gridmanager",
]
