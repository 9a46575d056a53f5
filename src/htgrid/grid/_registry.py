"""The grid types this grid manager runs: each declares itself in its own folder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from htgrid.errors import HTGridError
from htgrid.grid._gridtype import GridType
from htgrid.grid.arc import ARC
from htgrid.grid.azure import AZURE
from htgrid.grid.batch import BATCH
from htgrid.grid.condor import CONDOR
from htgrid.grid.ec2 import EC2
from htgrid.grid.gram import GT2

__all__ = ["GRID_TYPES", "grid_type_of", "resource_name"]

#: The grid types, by the first word of GridResource.
GRID_TYPES: Mapping[str, GridType[Any]] = {
    gtype.name: gtype for gtype in (BATCH, EC2, AZURE, CONDOR, ARC, GT2)
}
_ALIASES = {alias: gtype.name for gtype in GRID_TYPES.values() for alias in gtype.aliases}


def grid_type_of(grid_resource: str) -> str:
    """The grid type a GridResource names: its first word, lower case ("" if none), with
    a type's aliases (`pbs` for batch) folded into its name."""
    words = grid_resource.split()
    if not words:
        return ""
    first = words[0].lower()
    return _ALIASES.get(first, first)


def resource_name(grid_resource: str) -> str | None:
    """The name of the grid manager's resource for a GridResource (its Grid ad's Name),
    None when no grid type takes it."""
    gtype = GRID_TYPES.get(grid_type_of(grid_resource))
    if gtype is None:
        return None
    try:
        return gtype.resource_key(grid_resource)
    except HTGridError:
        return None
