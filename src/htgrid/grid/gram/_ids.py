"""The gt2/gt5 types' GridResource and GridJobId (globusjob.cpp's formats).

GridResource   gt2 <resource contact>      host[:port][/service][:subject], e.g.
               gt5 <resource contact>      ce.example.org/jobmanager-fork
GridJobId      gt2 <resource contact> <job contact>      written once the job manager
                                                         took the request (uncommitted)
"""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import grid_job_id_words
from htgrid.grid._gridtype import Remote

__all__ = ["GramJobId", "GramResourceName", "remote_of"]

TYPES = ("gt2", "gt5")


@dataclass(frozen=True, slots=True)
class GramResourceName:
    """A GRAM job manager as a GridResource names it: the type and its contact."""

    kind: str
    contact: str

    @property
    def key(self) -> str:
        return f"{self.kind} {self.contact}"

    @classmethod
    def parse(cls, grid_resource: str) -> GramResourceName:
        """Read `gt2 <contact>` or `gt5 <contact>`; UnsupportedGridJob naming what is wrong."""
        words = grid_resource.split()
        if not words or words[0].lower() not in TYPES:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not a gt2/gt5 resource")
        if len(words) != 2:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected '{words[0]} host[:port]/jobmanager-NAME'"
                + (" (the resource contact is missing)" if len(words) < 2 else "")
            )
        return cls(words[0].lower(), words[1])


@dataclass(frozen=True, slots=True)
class GramJobId:
    """A gt2/gt5 GridJobId: the type, the resource contact and the job contact."""

    kind: str
    resource: str
    contact: str

    def __str__(self) -> str:
        return f"{self.kind} {self.resource} {self.contact}"

    @classmethod
    def parse(cls, text: object) -> GramJobId | None:
        words = grid_job_id_words(text, TYPES, (3,))
        return None if words is None else cls(words[0].lower(), words[1], words[2])


def remote_of(ad: ClassAd) -> Remote | None:
    """How explanations name a GRAM job: by its job contact."""
    grid = GramJobId.parse(ad.get("GridJobId"))
    if grid is None:
        return None
    return Remote(grid.contact, grid.contact, "GRAM job", "job contact", "GRAM")
