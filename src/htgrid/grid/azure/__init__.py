"""The azure grid type (`azure <subscription>`: one VM per job) through the Azure GAHP."""

from __future__ import annotations

from htgrid.grid.azure._ids import AzureJobId
from htgrid.grid.azure._job import AZURE, AzureJob, azure_grid_type
from htgrid.grid.azure._resource import AzureResource
from htgrid.grid.azure._table import AzureEvent, AzureState

__all__ = [
    "AZURE",
    "AzureEvent",
    "AzureJob",
    "AzureJobId",
    "AzureResource",
    "AzureState",
    "azure_grid_type",
]
