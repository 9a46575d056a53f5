"""End to end on Azure: an annex's scale set (in the fake ARM) boots, its instances (run by
the harness from their real custom data) read their token from Key Vault with the scale
set's managed identity, join the pool, run the job aimed at the annex, show in the annex
ad, and go at the lease's end with the scale set the runbook deletes."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import Annexes, AnnexSpec
from htgrid.annex import azure_runbook as rb
from htgrid.annex.keep import records
from htgrid.testing import PersonalPool, run_cli, wait_for

from . import test_join as join
from ._azure_cloud import (
    IMAGE,
    NOTHING,
    AzureHarness,
    arm,
    azure,
    cloud,
    lease_events,
    run_jobs,
    runbook_arm,
    sweeper_event,
)
from .conftest import keeping_pool

__all__ = ["arm", "azure", "pool"]

pool = join.pool


@pytest.fixture
def harness(azure: Any) -> Iterator[AzureHarness]:
    cloud = Path(tempfile.mkdtemp(prefix="hz", dir="/tmp"))
    cloud.chmod(0o755)
    try:
        with AzureHarness(cloud, azure) as running:
            yield running
    finally:
        shutil.rmtree(cloud, ignore_errors=True)


@pytest.mark.timeout(400)
def test_an_azure_annex_joins_runs_its_job_and_ends_with_its_lease(
    pool: PersonalPool, harness: AzureHarness, azure: Any, tmp_path: Path
) -> None:
    config = [item for knob in join.NODE for item in ("--config", knob)]
    status, _, err = run_cli(
        pool.home, "annex", "create", "az", "--cloud", "azure", "--image-ids", IMAGE,
        "--pool", pool.collector, "--count", "1", "--lifetime", "30m", *config,
    )  # fmt: skip
    assert status == 0, err
    try:
        (slot,) = wait_for(
            lambda: join._ads(pool, "Machine", 'AnnexName == "az"'), timeout=90, what="joined"
        )
    except TimeoutError:
        pytest.fail(join._diagnose(harness))  # type: ignore[arg-type]
    (vm,) = harness.booted()
    assert slot["AzureVMName"] == vm and slot["Machine"] == f"{vm.replace('_', '-')}.az.annex"

    aimed = join._submit(pool, tmp_path / "aimed", "-annex", "az")
    try:
        ad = wait_for(lambda: join._history(pool, aimed), timeout=120, interval=0.2)
    except TimeoutError:
        pytest.fail(join._diagnose(harness))  # type: ignore[arg-type]
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert ad["LastRemoteHost"].endswith(".az.annex")

    status, out, err = run_cli(pool.home, "annex", "status", "az", "--cloud", "azure")
    assert status == 0, err
    assert "1 joined" in out
    (annex,) = join._ads(pool, "Annex")
    assert annex["Cloud"] == "azure" and annex["Joined"] == 1

    # The lease's end: the runbook's job deletes the scale set; its VM goes with it.
    (event,) = lease_events(azure)
    run_jobs(azure, event["LeaseExpiration"])
    wait_for(lambda: not harness.running(), timeout=30, what="the instance's processes gone")
    assert azure.annex_leftovers() == NOTHING


@pytest.mark.timeout(300)
def test_an_idle_azure_instance_stops_itself_and_the_sweeper_deletes_it(
    pool: PersonalPool, harness: AzureHarness, azure: Any
) -> None:
    status, _, err = run_cli(
        pool.home, "annex", "create", "idle", "--cloud", "azure", "--image-ids", IMAGE,
        "--pool", pool.collector, "--count", "1", "--lifetime", "1h", "--idle", "3",
    )  # fmt: skip
    assert status == 0, err
    wait_for(lambda: harness.booted(), timeout=60, what="the instance booted")
    wait_for(lambda: not harness.running(), timeout=90, what="the idle node shut down")
    (vm,) = harness.booted()
    assert "the node exited" in harness.log(vm)
    # Stopped from inside, Azure keeps the VM (and bills it): the sweeper deletes it.
    assert azure.annex_leftovers()["instances"] == [vm]
    event = sweeper_event(azure)
    done = rb.handler(event, runbook_arm(azure, event), time.time())
    assert done["stopped"] == [vm] and azure.annex_leftovers()["instances"] == []
    assert len(lease_events(azure)) == 1  # the annex itself lives on, under its lease


@pytest.fixture
def kept(azure: Any, tmp_path: Path) -> Iterator[PersonalPool]:
    # After `azure`: the master's refreshes see the fake ARM's environment.
    with keeping_pool(tmp_path / "pool") as running:
        yield running


@pytest.mark.timeout(120)
def test_the_pool_keeps_an_azure_annex_ad_until_the_annex_is_gone(
    kept: PersonalPool, azure: Any
) -> None:
    pool = kept
    annexes = Annexes(cloud(), pool.home, pool=pool.collector)
    annexes.create(AnnexSpec("kept", count=2, lifetime=3600, image_ids=(IMAGE,), join=False))
    assert [(r.name, r.cloud, r.group) for r in records(pool.home)] == [
        ("kept", "azure", "htgrid-annex")
    ]
    wait_for(lambda: [len(a["InstanceIds"]) for a in join._ads(pool, "Annex")] == [2], 30)
    # The lease's job ends the annex: its ad goes, and so does its record.
    (event,) = lease_events(azure)
    run_jobs(azure, event["LeaseExpiration"])
    wait_for(lambda: join._ads(pool, "Annex") == [] and records(pool.home) == [], 30)
