"""The batch type's GridResource and GridJobId, as HTCondor writes them (reference §5.2).

    GridResource   batch <lrms> [[user@]host[:port] [--rgahp-...]]   (legacy: pbs, lsf, sge, ...)
                   (a host: the batch system there, over ssh: `_remote`)
    GridJobId      batch <lrms> <tag>                    phase 1: committed before submitting
                   batch <lrms> <tag> <blah job id>      phase 2: the batch system's id known

The tag (`_gridids.new_tag`) is sent as the batch job's ClientJobId.
"""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import grid_job_id_words
from htgrid.grid._gridtype import Remote
from htgrid.grid.batch._remote import RemoteHost

__all__ = ["ALIASES", "BatchJobId", "BatchResourceName", "remote_of"]

#: First GridResource words the batch type answers to (infnbatchjob.cpp's list).
ALIASES = frozenset({"blah", "pbs", "lsf", "sge", "nqs", "naregi"})
_NAMES = ALIASES | {"batch"}


@dataclass(frozen=True, slots=True)
class BatchResourceName:
    """A batch GridResource: the batch system and what follows it."""

    lrms: str
    args: tuple[str, ...] = ()
    #: The host the batch system is reached on over ssh; None: this one.
    remote: RemoteHost | None = None

    @property
    def key(self) -> str:
        """The resource's name: one resource object per key."""
        return " ".join(("batch", self.lrms, *self.args))

    @classmethod
    def parse(cls, grid_resource: str) -> BatchResourceName:
        """Read `batch <lrms> [args]` or a legacy `<lrms> [args]`; UnsupportedGridJob if bad."""
        words = grid_resource.split()
        if not words or words[0].lower() not in _NAMES:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not a batch resource")
        if words[0].lower() in ("batch", "blah"):
            words = words[1:]
        if not words:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} names no batch system")
        lrms, args = words[0].lower(), tuple(words[1:])
        # A batch system on another host: its GAHP is started there over ssh (BOSCO).
        remote = RemoteHost.parse(args, grid_resource) if args else None
        return cls(lrms, args, remote)


@dataclass(frozen=True, slots=True)
class BatchJobId:
    """A batch GridJobId: the submission's tag, and the batch job id once known."""

    lrms: str
    tag: str
    blah_id: str | None = None

    def __str__(self) -> str:
        text = f"batch {self.lrms} {self.tag}"
        return text if self.blah_id is None else f"{text} {self.blah_id}"

    @classmethod
    def parse(cls, text: object) -> BatchJobId | None:
        """The id in a GridJobId value; None when it is absent or not a batch id."""
        words = grid_job_id_words(text, _NAMES, (3, 4))
        if words is None:
            return None
        return cls(words[1].lower(), words[2], words[3] if len(words) == 4 else None)


def remote_of(ad: ClassAd) -> Remote | None:
    """How explanations name a batch job's submission (its tag) and batch job."""
    batch = BatchJobId.parse(ad.get("GridJobId"))
    if batch is None:
        return None
    return Remote(batch.tag, batch.blah_id, "batch job", "tag", "The batch system")
