"""GridResource and GridJobId as HTCondor writes them (reference §5.2).

    GridResource   batch <lrms> [user@host ...]          (legacy: pbs, lsf, sge, nqs, ...)
    GridJobId      batch <lrms> <tag>                    phase 1: committed before submitting
                   batch <lrms> <tag> <blah job id>      phase 2: the batch system's id known

The tag plays the part of HTCondor's sandbox id: the idempotency key of one submission,
sent as the batch job's ClientJobId. Unlike the sandbox id it is fresh for every
submission, so a released job is never mistaken for its earlier run.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from htgrid.grid._errors import UnsupportedGridJob

__all__ = [
    "BATCH_TYPES",
    "JOB_STATUS_NAMES",
    "BatchJobId",
    "BatchResourceName",
    "grid_type_of",
    "new_tag",
]

#: First GridResource words the batch type answers to (infnbatchjob.cpp's list).
BATCH_TYPES = frozenset({"batch", "blah", "pbs", "lsf", "sge", "nqs", "naregi"})

#: HTCondor's JobStatus names, as GridJobStatus holds them (getJobStatusString).
JOB_STATUS_NAMES = {
    1: "IDLE",
    2: "RUNNING",
    3: "REMOVED",
    4: "COMPLETED",
    5: "HELD",
    6: "TRANSFERRING_OUTPUT",
    7: "SUSPENDED",
}

_TAG = re.compile(r"[A-Za-z0-9_.+#:@-]+")


def grid_type_of(grid_resource: str) -> str:
    """The grid type a GridResource names: its first word, lower case ("" if none)."""
    words = grid_resource.split()
    if not words:
        return ""
    first = words[0].lower()
    return "batch" if first in BATCH_TYPES else first


@dataclass(frozen=True, slots=True)
class BatchResourceName:
    """A batch GridResource: the batch system and what follows it."""

    lrms: str
    args: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The resource's name: one resource object per key."""
        return " ".join(("batch", self.lrms, *self.args))

    @classmethod
    def parse(cls, grid_resource: str) -> BatchResourceName:
        """Read `batch <lrms> [args]` or a legacy `<lrms> [args]`; UnsupportedGridJob if bad."""
        words = grid_resource.split()
        if not words or words[0].lower() not in BATCH_TYPES:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not a batch resource")
        if words[0].lower() in ("batch", "blah"):
            words = words[1:]
        if not words:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} names no batch system")
        lrms, args = words[0].lower(), tuple(words[1:])
        if args:
            # HTCondor reaches such a batch system through a blahp started over ssh.
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: remote batch systems (batch {lrms} "
                "user@host) are not supported; run the grid manager on a submit host of "
                f"the {lrms} cluster"
            )
        return cls(lrms, args)


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
        if not isinstance(text, str):
            return None
        words = text.split()
        if len(words) not in (3, 4) or words[0].lower() not in BATCH_TYPES:
            return None
        return cls(words[1].lower(), words[2], words[3] if len(words) == 4 else None)


def new_tag(cluster: int, proc: int) -> str:
    """A fresh submission tag: the job's id and 48 random bits (no two submissions share one)."""
    tag = f"htgrid_{cluster}_{proc}_{secrets.token_hex(6)}"
    assert _TAG.fullmatch(tag)  # the batch GAHP keeps such tags unchanged
    return tag
