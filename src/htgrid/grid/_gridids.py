"""What every grid type's ids share: reading GridResource, submission tags, status names.

Each type declares its own GridResource and GridJobId formats in its folder (`batch/_ids`,
`condor/_ids`, `ec2/_ids`, `azure/_ids`) and reaches them through its `GridType`; these
helpers know no type.

A submission tag is the idempotency key of one submission, committed to the job ad before
anything is sent (HTCondor's sandbox id plays that part): a submit whose answer was lost
is looked up by it. Unlike the sandbox id it is fresh for every submission, so a released
job is never mistaken for its earlier run.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol, TypeGuard

from htgrid.grid._errors import UnsupportedGridJob

__all__ = [
    "JOB_STATUS_NAMES",
    "OneWordResource",
    "ResourceName",
    "grid_job_id_words",
    "is_tag",
    "new_tag",
]

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

_TAG = re.compile(r"htgrid_[0-9]+_[0-9]+_[0-9a-f]+")


class ResourceName(Protocol):
    """A GridResource as its type reads it."""

    @property
    def key(self) -> str:
        """The resource's name: one Resource object per key."""
        ...


def new_tag(cluster: int, proc: int) -> str:
    """A fresh submission tag: the job's id and 48 random bits (no two submissions share one)."""
    tag = f"htgrid_{cluster}_{proc}_{secrets.token_hex(6)}"
    assert _TAG.fullmatch(tag)  # the GAHPs keep such tags unchanged
    return tag


def is_tag(value: object) -> TypeGuard[str]:
    """Whether `value` is a submission tag `new_tag` could have made."""
    return isinstance(value, str) and _TAG.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class OneWordResource:
    """A GridResource of one word after its type's name (`ec2 <service-url>`,
    `azure <subscription>`)."""

    gtype: str
    word: str

    @property
    def key(self) -> str:
        return f"{self.gtype} {self.word}"

    @classmethod
    def parse(cls, grid_resource: str, gtype: str, usage: str, missing: str) -> OneWordResource:
        """Read `<gtype> <word>`; UnsupportedGridJob naming what is wrong (`usage` the
        expected form, `missing` what the word is)."""
        words = grid_resource.split()
        if not words or words[0].lower() != gtype:
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not an {gtype} resource")
        if len(words) != 2:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected {usage!r}"
                + (f" (the {missing} is missing)" if len(words) < 2 else "")
            )
        return cls(gtype, words[1])


def grid_job_id_words(
    text: object, names: Collection[str], counts: Collection[int]
) -> list[str] | None:
    """The words of a GridJobId of one type (its first word in `names`, `counts` words);
    None when `text` is absent or something else."""
    if not isinstance(text, str):
        return None
    words = text.split()
    if len(words) not in counts or words[0].lower() not in names:
        return None
    return words
