"""`explain_grid_job` for every grid type the grid manager runs: each type's explanation
comes from its GridType, so none is left out."""

from __future__ import annotations

from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.grid import GRID_TYPES, explain_grid_job

# One GridResource per grid type, as a user writes it.
RESOURCES = {
    "batch": "batch slurm",
    "condor": "condor schedd@pool 127.0.0.1:9618",
    "ec2": "ec2 https://ec2.us-east-1.amazonaws.com",
    "azure": "azure 0123456789abcdef",
    "arc": "arc https://ce.example.org/arex",
    "gt2": "gt2 ce.example.org/jobmanager-pbs",
}


def _ad(resource: str, **attrs: Any) -> ClassAd:
    ad = ClassAd()
    for name, value in {
        "JobUniverse": 9,
        "GridResource": resource,
        "JobStatus": 1,
        **attrs,
    }.items():
        ad[name] = value
    return ad


def test_every_grid_type_has_an_example_here() -> None:
    assert set(RESOURCES) == set(GRID_TYPES)


@pytest.mark.parametrize("gtype", sorted(RESOURCES))
def test_every_grid_type_is_explained(gtype: str) -> None:
    lines = explain_grid_job(_ad(RESOURCES[gtype]))
    assert lines[0] == f"Grid job for {RESOURCES[gtype]!r}."
    assert lines[1].startswith("Not submitted yet: the grid manager submits it")


def test_an_azure_job_names_its_vm() -> None:
    resource = RESOURCES["azure"]
    naming = explain_grid_job(_ad(resource, Managed="External", GridJobId="azure htgrid-4-0-ab"))
    assert naming[1].startswith("Being submitted with VM name htgrid-4-0-ab: the VM name is")
    running = explain_grid_job(
        _ad(
            resource,
            JobStatus=2,
            Managed="External",
            GridJobId="azure htgrid-4-0-ab",
            AzureVmId="/subscriptions/0123456789abcdef/virtualMachines/htgrid-4-0-ab",
            GridJobSubmitTime=1_700_000_000,
            GridJobStatus="running",
        )
    )
    assert running[1].startswith(f"Submitted to {resource!r} as VM htgrid-4-0-ab at 2023-11-")
    assert running[2] == "Azure last reported it running."
    removing = explain_grid_job(
        _ad(
            resource, JobStatus=3, Managed="External", GridJobId="azure htgrid-4-0-ab", AzureVmId=""
        )
    )
    assert removing[1] == (
        "Removed: the grid manager cancels VM htgrid-4-0-ab; the job leaves the queue once "
        "Azure confirms."
    )


def test_an_arc_job_names_its_name_at_the_ce_then_its_arc_id() -> None:
    resource = RESOURCES["arc"]
    naming = explain_grid_job(
        _ad(resource, Managed="External", ArcJobName="htgrid_4_0_0123456789ab")
    )
    assert naming[1].startswith("Being submitted with job name htgrid_4_0_0123456789ab")
    running = explain_grid_job(
        _ad(
            resource,
            JobStatus=2,
            Managed="External",
            ArcJobName="htgrid_4_0_0123456789ab",
            GridJobId=f"{resource} AbCdEf123",
            GridJobSubmitTime=1_700_000_000,
            GridJobStatus="RUNNING",
        )
    )
    assert running[1].startswith(f"Submitted to {resource!r} as ARC job AbCdEf123 at 2023-11-")
    assert running[2] == "ARC CE last reported it RUNNING."


def test_an_ec2_job_names_ec2_as_it_is_written() -> None:
    removing = explain_grid_job(
        _ad(
            RESOURCES["ec2"],
            JobStatus=3,
            Managed="External",
            GridJobId=f"{RESOURCES['ec2']} token-1 i-0123",
        )
    )
    assert removing[1] == (
        "Removed: the grid manager cancels instance i-0123; the job leaves the queue once "
        "EC2 confirms."
    )


def test_a_gram_job_names_its_job_contact() -> None:
    resource = "gt5 ce.example.org/jobmanager-pbs"
    contact = "https://ce.example.org:40000/123/456/"
    running = explain_grid_job(
        _ad(
            resource,
            JobStatus=2,
            Managed="External",
            GridJobId=f"{resource} {contact}",
            GridJobSubmitTime=1_700_000_000,
            GridJobStatus="ACTIVE",
        )
    )
    assert running[1].startswith(f"Submitted to {resource!r} as GRAM job {contact} at 2023-11-")
    assert running[2] == "GRAM last reported it ACTIVE."
    removing = explain_grid_job(
        _ad(resource, JobStatus=3, Managed="External", GridJobId=f"{resource} {contact}")
    )
    assert removing[1] == (
        f"Removed: the grid manager cancels GRAM job {contact}; the job leaves the queue once "
        "GRAM confirms."
    )
