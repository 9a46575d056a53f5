"""The arc grid type (`arc <url>`, and the older `nordugrid <host>`): jobs on a NorduGrid
ARC CE through its REST interface and the ARC GAHP."""

from __future__ import annotations

from htgrid.grid.arc._ids import ArcJobId, ArcResourceName
from htgrid.grid.arc._job import ARC, ArcJob, arc_grid_type
from htgrid.grid.arc._resource import ArcResource
from htgrid.grid.arc._table import ArcEvent, ArcState

__all__ = [
    "ARC",
    "ArcEvent",
    "ArcJob",
    "ArcJobId",
    "ArcResource",
    "ArcResourceName",
    "ArcState",
    "arc_grid_type",
]
