"""The gt2 and gt5 grid types (`gt2 host[:port]/jobmanager-NAME`): jobs on Globus GRAM
job managers through the gt GAHP (`htgrid gahp gram`)."""

from __future__ import annotations

from htgrid.grid.gram._ids import GramJobId, GramResourceName
from htgrid.grid.gram._job import DEFAULT_GRAM_GAHP, GT2, GramJob, gram_grid_type
from htgrid.grid.gram._resource import GramResource
from htgrid.grid.gram._table import GramEvent, GramState

__all__ = [
    "DEFAULT_GRAM_GAHP",
    "GT2",
    "GramEvent",
    "GramJob",
    "GramJobId",
    "GramResource",
    "GramResourceName",
    "GramState",
    "gram_grid_type",
]
