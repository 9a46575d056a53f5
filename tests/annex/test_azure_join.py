"""End to end on Azure: annexes' scale sets (in the fake ARM) boot, their VMs (run by the
harness from their real custom data) read their token from Key Vault with the scale
set's managed identity, join the pool and run the job aimed at the annex; an idle VM
shuts itself down and deletes itself from its scale set through ARM (its identity may);
the master keeps the annex ads; at the lease's end the node deletes its VM on its own,
and the runbook's job deletes the scale set and the rest. One pool for all of it: each
pool start costs seconds of the suite."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    runbook_arm,
)
from .conftest import keeping_pool

__all__ = ["arm", "azure"]


@pytest.fixture
def pool(azure: Any, tmp_path: Path) -> Iterator[PersonalPool]:
    # After `azure`: the master's refreshes of the annex ads see the fake ARM.
    with keeping_pool(tmp_path / "pool") as running:
        yield running


@pytest.fixture
def harness(azure: Any) -> Iterator[AzureHarness]:
    cloud = Path(tempfile.mkdtemp(prefix="hz", dir="/tmp"))
    cloud.chmod(0o755)
    try:
        with AzureHarness(cloud, azure) as running:
            yield running
    finally:
        shutil.rmtree(cloud, ignore_errors=True)


def _create(pool: PersonalPool, name: str, *args: str) -> None:
    config = [item for knob in join.NODE for item in ("--config", knob)]
    status, _, err = run_cli(
        pool.home, "annex", "create", name, "--cloud", "azure", "--image-ids", IMAGE,
        "--pool", pool.collector, "--count", "1", *config, *args,
    )  # fmt: skip
    assert status == 0, err


def _vm_of(harness: AzureHarness, annex: str) -> str:
    (vm,) = [i for i in harness.booted() if i.startswith(f"{annex}-")]
    return vm


@pytest.mark.timeout(400)
def test_azure_annexes_join_run_their_job_idle_away_and_end_with_their_lease(
    pool: PersonalPool, harness: AzureHarness, azure: Any, tmp_path: Path
) -> None:
    harness.extra_env["HTGRID_ANNEX_POLL"] = "0.5"  # the nodes read the lease this often
    # Behind NAT, as cloud VMs often are: schedds reach it through the pool's broker.
    _create(pool, "az", "--lifetime", "30m", "--config", "PRIVATE_NETWORK_NAME=cloud")
    _create(pool, "idle", "--lifetime", "1h", "--idle", "3")
    try:
        (slot,) = wait_for(
            lambda: join._ads(pool, "Machine", 'AnnexName == "az"'), timeout=90, what="joined"
        )
    except TimeoutError:
        pytest.fail(join._diagnose(harness))  # type: ignore[arg-type]
    vm = _vm_of(harness, "az")
    assert slot["AzureVMName"] == vm and slot["Machine"] == f"{vm.replace('_', '-')}.az.annex"
    assert f"CCBID={pool.collector}#{slot['Machine']}" in slot["MyAddress"], slot["MyAddress"]

    try:
        ad = join._run_shown(pool, "az", tmp_path / "aimed", {slot["Machine"]})
    except TimeoutError:
        pytest.fail(join._diagnose(harness))  # type: ignore[arg-type]
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert ad["LastRemoteHost"].endswith(".az.annex") and "CCBID=" in ad["StartdIpAddr"]
    # The collector took every update and removal from the node.
    assert "refuse" not in harness.log(vm), harness.log(vm)

    # The idle VM's node stopped and deleted its VM (a VM shut down from inside stays
    # allocated, and billed): no sweeper ran, and it is gone from ARM.
    idle = wait_for(lambda: _vm_of(harness, "idle"), timeout=60, what="the idle VM booted")
    wait_for(
        lambda: idle not in azure.annex_leftovers()["instances"],
        timeout=90,
        what="the idle VM deleted by its own node",
    )
    wait_for(lambda: "asked Azure to delete this VM" in harness.log(idle), timeout=30)
    assert "the node exited" in harness.log(idle)
    (deleted,) = azure.requests("POST", r"/virtualMachineScaleSets/idle-[0-9a-f]+/delete$")
    assert deleted.body == {"instanceIds": [idle.rsplit("_", 1)[1]]}

    # The master keeps the ads of both (recorded with their cloud and resource group).
    assert sorted((r.name, r.cloud, r.group) for r in records(pool.home)) == [
        ("az", "azure", "htgrid-annex"),
        ("idle", "azure", "htgrid-annex"),
    ]
    wait_for(
        lambda: (
            {(a["Name"], a["Joined"]) for a in join._ads(pool, "Annex")} == {("az", 1), ("idle", 0)}
        ),
        timeout=30,
        what="the annex ads refreshed by the master",
    )
    status, out, err = run_cli(pool.home, "annex", "status", "az", "--cloud", "azure")
    assert status == 0, err
    assert "1 joined" in out

    # az's lease ends (as its node reads it, moved near): the node stops and deletes its
    # VM on its own, the first layer; then the lease's job, as Automation starts it at
    # the schedule's time, deletes the scale set, the secrets and the schedules.
    end = int(time.time()) + 2
    cloud().put("az", "lease", str(end))
    wait_for(
        lambda: vm not in azure.annex_leftovers()["instances"],
        timeout=60,
        interval=0.05,
        what="the VM deleted by its own node at the lease's end",
    )
    node_took = time.time() - end
    assert "the lease has ended" in harness.log(vm)
    (az,) = [e for e in lease_events(azure) if e["AnnexName"] == "az"]
    due = [json.loads(p["event"]) for _, p in azure.jobs_due(az["LeaseExpiration"])]
    assert az in due and az not in [
        json.loads(p["event"]) for _, p in azure.jobs_due(az["LeaseExpiration"] - 1)
    ]
    started = time.monotonic()
    done = rb.handler(az, runbook_arm(azure, az), az["LeaseExpiration"])
    runbook_took = time.monotonic() - started
    assert done["expired"] and len(done["deleted"]) == 1
    print(
        f"\nlease enforcement on Azure (harness): the node deleted its VM {node_took:.2f} s "
        f"after the lease's end; the lease's job, started at the schedule's time (the "
        f"lease's end), deleted the scale set and the rest in {runbook_took:.2f} s"
    )
    wait_for(lambda: vm not in harness.running(), timeout=30, what="the VM's processes gone")
    wait_for(
        lambda: (
            [a["Name"] for a in join._ads(pool, "Annex")] == ["idle"]
            and [r.name for r in records(pool.home)] == ["idle"]
        ),
        timeout=30,
        what="az's ad and record gone",
    )
    assert run_cli(pool.home, "annex", "shutdown", "idle", "--cloud", "azure")[0] == 0
    assert azure.annex_leftovers() == NOTHING
