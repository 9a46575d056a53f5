"""The arc type's GridResource and GridJobId (arcjob.cpp's formats).

    GridResource   arc <service-url>       https://ce.example.org:443/arex/rest/1.0, or
                                           only its host (the rest filled in, see
                                           htgrid.gahp.commands.arc.service_url);
                   nordugrid <host>        the manual's older form, run the same way
    GridJobId      arc <service-url> <ARC job id>      written once ARC_JOB_NEW answered

Before the submit, ArcJobName (the job's name at the CE, a fresh tag) is committed: a
submit whose answer was lost is found again by it.
"""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import grid_job_id_words, is_tag
from htgrid.grid._gridtype import Remote
from htgrid.grid._values import as_str

__all__ = ["ArcJobId", "ArcResourceName", "remote_of"]


@dataclass(frozen=True, slots=True)
class ArcResourceName:
    """An ARC CE as a GridResource names it: its service URL (as written)."""

    url: str

    @property
    def key(self) -> str:
        return f"arc {self.url}"

    @classmethod
    def parse(cls, grid_resource: str) -> ArcResourceName:
        """Read `arc <url>` or `nordugrid <host>`; UnsupportedGridJob naming what is wrong."""
        words = grid_resource.split()
        if not words or words[0].lower() not in ("arc", "nordugrid"):
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not an arc resource")
        if len(words) != 2:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected 'arc <service URL>'"
                + (" (the ARC CE's URL is missing)" if len(words) < 2 else "")
            )
        return cls(words[1])


@dataclass(frozen=True, slots=True)
class ArcJobId:
    """An arc GridJobId: the CE's URL and the ARC job id."""

    url: str
    job_id: str

    def __str__(self) -> str:
        return f"arc {self.url} {self.job_id}"

    @classmethod
    def parse(cls, text: object) -> ArcJobId | None:
        words = grid_job_id_words(text, ("arc",), (3,))
        return None if words is None else cls(words[1], words[2])


def remote_of(ad: ClassAd) -> Remote | None:
    """How explanations name an ARC job: by its ARC id, or the name it was submitted under."""
    grid = ArcJobId.parse(ad.get("GridJobId"))
    name = as_str(ad.get("ArcJobName"))
    if grid is None and not is_tag(name):
        return None
    return Remote(
        name or "", None if grid is None else grid.job_id, "ARC job", "job name", "ARC CE"
    )
