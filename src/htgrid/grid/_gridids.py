"""GridResource and GridJobId as HTCondor writes them (reference §5.2).

    GridResource   batch <lrms> [user@host ...]          (legacy: pbs, lsf, sge, nqs, ...)
    GridJobId      batch <lrms> <tag>                    phase 1: committed before submitting
                   batch <lrms> <tag> <blah job id>      phase 2: the batch system's id known

    GridResource   ec2 <service-url>
    GridJobId      ec2 <service-url> <client-token>                phase 1 (before EC2_VM_START)
                   ec2 <service-url> <client-token> <instance-id>  phase 2 (ec2job.cpp's format)

    GridResource   azure <subscription>
    GridJobId      azure <vm-name>            committed before AZURE_VM_CREATE (azurejob.cpp's)

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
    "AzureJobId",
    "AzureResourceName",
    "BatchJobId",
    "BatchResourceName",
    "Ec2JobId",
    "Ec2ResourceName",
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


@dataclass(frozen=True, slots=True)
class Ec2ResourceName:
    """An ec2 GridResource: the service URL (`ec2 https://ec2.us-east-1.amazonaws.com`)."""

    service_url: str

    @property
    def key(self) -> str:
        return f"ec2 {self.service_url}"

    @classmethod
    def parse(cls, grid_resource: str) -> Ec2ResourceName:
        """Read `ec2 <service-url>`; UnsupportedGridJob naming what is wrong."""
        words = grid_resource.split()
        if not words or words[0].lower() != "ec2":
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not an ec2 resource")
        if len(words) != 2:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected 'ec2 <service-url>'"
                + (" (the service URL is missing)" if len(words) < 2 else "")
            )
        url = words[1]
        if "://" not in url:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: {url!r} is not a URL (https://host/...)"
            )
        return cls(url)


@dataclass(frozen=True, slots=True)
class Ec2JobId:
    """An ec2 GridJobId: the client token, and the instance id once known."""

    service_url: str
    client_token: str
    instance_id: str | None = None

    def __str__(self) -> str:
        text = f"ec2 {self.service_url} {self.client_token}"
        return text if self.instance_id is None else f"{text} {self.instance_id}"

    @classmethod
    def parse(cls, text: object) -> Ec2JobId | None:
        """The id in a GridJobId value; None when it is absent or not an ec2 id."""
        if not isinstance(text, str):
            return None
        words = text.split()
        if len(words) not in (3, 4) or words[0].lower() != "ec2":
            return None
        return cls(words[1], words[2], words[3] if len(words) == 4 else None)


def new_tag(cluster: int, proc: int) -> str:
    """A fresh submission tag: the job's id and 48 random bits (no two submissions share one)."""
    tag = f"htgrid_{cluster}_{proc}_{secrets.token_hex(6)}"
    assert _TAG.fullmatch(tag)  # the batch GAHP keeps such tags unchanged
    return tag


@dataclass(frozen=True, slots=True)
class AzureResourceName:
    """An azure GridResource: the subscription (`azure 0123...cdef`)."""

    subscription: str

    @property
    def key(self) -> str:
        return f"azure {self.subscription}"

    @classmethod
    def parse(cls, grid_resource: str) -> AzureResourceName:
        """Read `azure <subscription>`; UnsupportedGridJob naming what is wrong."""
        words = grid_resource.split()
        if not words or words[0].lower() != "azure":
            raise UnsupportedGridJob(f"GridResource {grid_resource!r} is not an azure resource")
        if len(words) != 2:
            raise UnsupportedGridJob(
                f"GridResource {grid_resource!r}: expected 'azure <subscription>'"
                + (" (the Azure subscription is missing)" if len(words) < 2 else "")
            )
        return cls(words[1])


@dataclass(frozen=True, slots=True)
class AzureJobId:
    """An azure GridJobId: the VM's name (its id is kept in AzureVmId, as HTCondor does)."""

    name: str

    def __str__(self) -> str:
        return f"azure {self.name}"

    @classmethod
    def parse(cls, text: object) -> AzureJobId | None:
        """The id in a GridJobId value; None when it is absent or not an azure id."""
        if not isinstance(text, str):
            return None
        words = text.split()
        if len(words) != 2 or words[0].lower() != "azure":
            return None
        return cls(words[1])
