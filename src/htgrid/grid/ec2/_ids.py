"""The ec2 type's GridResource and GridJobId (ec2job.cpp's formats).

GridResource   ec2 <service-url>
GridJobId      ec2 <service-url> <client-token>                phase 1 (before EC2_VM_START)
               ec2 <service-url> <client-token> <instance-id>  phase 2
"""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import OneWordResource, grid_job_id_words
from htgrid.grid._gridtype import Remote
from htgrid.grid._values import as_str

__all__ = ["Ec2JobId", "active_lines", "parse_resource", "remote_of"]


def parse_resource(grid_resource: str) -> OneWordResource:
    """Read `ec2 <service-url>`; UnsupportedGridJob naming what is wrong."""
    where = OneWordResource.parse(grid_resource, "ec2", "ec2 <service-url>", "service URL")
    if "://" not in where.word:
        raise UnsupportedGridJob(
            f"GridResource {grid_resource!r}: {where.word!r} is not a URL (https://host/...)"
        )
    return where


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
        words = grid_job_id_words(text, ("ec2",), (3, 4))
        if words is None:
            return None
        return cls(words[1], words[2], words[3] if len(words) == 4 else None)


def remote_of(ad: ClassAd) -> Remote | None:
    """How explanations name an ec2 job's start (its client token) and instance."""
    ec2 = Ec2JobId.parse(ad.get("GridJobId"))
    if ec2 is None:
        return None
    return Remote(ec2.client_token, ec2.instance_id, "instance", "client token", "EC2")


def active_lines(ad: ClassAd) -> list[str]:
    """What a started ec2 job adds to its explanation: the instance's public name."""
    vm_name = as_str(ad.get("EC2RemoteVirtualMachineName"))
    return [f"Its public DNS name is {vm_name}."] if vm_name else []
