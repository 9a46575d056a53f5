"""The azure type's GridResource and GridJobId (azurejob.cpp's formats).

    GridResource   azure <subscription>
    GridJobId      azure <vm-name>            committed before AZURE_VM_CREATE

The VM's id is kept in AzureVmId, as HTCondor does, once the create answered.
"""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._gridids import OneWordResource, grid_job_id_words
from htgrid.grid._gridtype import Remote
from htgrid.grid._values import as_str

__all__ = ["AzureJobId", "parse_resource", "remote_of"]


def parse_resource(grid_resource: str) -> OneWordResource:
    """Read `azure <subscription>`; UnsupportedGridJob naming what is wrong."""
    return OneWordResource.parse(
        grid_resource, "azure", "azure <subscription>", "Azure subscription"
    )


@dataclass(frozen=True, slots=True)
class AzureJobId:
    """An azure GridJobId: the VM's name (its id is kept in AzureVmId, as HTCondor does)."""

    name: str

    def __str__(self) -> str:
        return f"azure {self.name}"

    @classmethod
    def parse(cls, text: object) -> AzureJobId | None:
        """The id in a GridJobId value; None when it is absent or not an azure id."""
        words = grid_job_id_words(text, ("azure",), (2,))
        return None if words is None else cls(words[1])


def remote_of(ad: ClassAd) -> Remote | None:
    """How explanations name an azure job's VM: by its name, known before the create."""
    azure = AzureJobId.parse(ad.get("GridJobId"))
    if azure is None:
        return None
    # AzureVmId is set once the create answered ("" when the VM was found by name).
    created = as_str(ad.get("AzureVmId")) is not None
    return Remote(azure.name, azure.name if created else None, "VM", "VM name", "Azure")
