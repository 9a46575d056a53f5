"""Grid types plug in here: one `GridType` value per type, chosen by GridResource's first word.

Adding a type (condor, ec2, azure) means a new module with its own state Enum and
transition table, a Resource subclass (ping, bulk status), a GridJob subclass (the
actions), and a GridType value listed in `manager.GRID_TYPES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from htgrid.classad import ClassAd
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._job import GridJob, Services
from htgrid.grid._resource import Resource
from htgrid.queue import JobId

__all__ = ["GahpFactory", "GridType"]

#: Gives the (shared) GAHP server for a key, started with `argv` when first used.
GahpFactory = Callable[[str, Sequence[str]], GahpHandle]


@dataclass(frozen=True, slots=True)
class GridType:
    """How the grid manager runs the jobs of one grid type."""

    #: The first word of GridResource (after alias folding, see _gridids.grid_type_of).
    name: str
    #: GridResource -> the resource's name (one Resource per name); UnsupportedGridJob if
    #: this grid manager cannot run it.
    resource_key: Callable[[str], str]
    #: Build the resource for a name.
    new_resource: Callable[[str, GahpFactory, Services], Resource]
    #: Build a job object for an adopted job ad.
    new_job: Callable[[JobId, ClassAd, Any, Services], GridJob[Any, Any]]
