"""Azure grid jobs end to end: queue -> grid manager -> `htgrid gahp azure` -> the Azure SDK
-> the fake ARM over TLS (tests/backends/azure/arm_server.py), and back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import pytest

from htgrid.grid import GRID_TYPES, GridManager, GridManagerConfig
from htgrid.grid.azure._job import azure_grid_type
from htgrid.queue import JobAction, JobId, JobStatus

from ._azure_arm import (
    SUBSCRIPTION,
    ArmServer,
    Logged,
    arm,
    auth_file,
    gahp_argv,
    gahp_env,
    ssh_key_file,
    write_auth_file,
)
from ._harness import FAST, ROOT, Grid, unset, wait_for

__all__ = ["arm", "auth_file", "ssh_key_file"]  # the ARM server's fixtures, shared

RESOURCE = f"azure {SUBSCRIPTION}"
IMAGE = "Canonical:ubuntu-24_04-lts:server:latest"
VM_PATH = "/providers/Microsoft.Compute/virtualMachines"
VM_TYPE = "Microsoft.Compute/virtualMachines"


@pytest.fixture(autouse=True)
def gahp_environment(arm: ArmServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The GAHP the grid manager starts trusts the fake ARM's CA and uses no proxy."""
    for name in list(os.environ):
        if name.upper().startswith(("AZURE_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")):
            monkeypatch.delenv(name)
    for name, value in gahp_env(arm).items():
        if name in ("GAHP_SSL_CAFILE", "NO_PROXY"):
            monkeypatch.setenv(name, value)
    yield


#: The test GAHP: two quick retries, long-running operations polled without waiting.
GRID_TYPES_FAST = {**GRID_TYPES, "azure": azure_grid_type(gahp_argv())}


@contextlib.asynccontextmanager
async def running(grid: Grid, config: GridManagerConfig = FAST) -> AsyncIterator[GridManager]:
    """A grid manager over `grid`'s queue with the test Azure GAHP, stopped on exit."""
    manager = GridManager(grid.home, config=config, grid_types=GRID_TYPES_FAST)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    ready = asyncio.create_task(manager.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def submit(
    grid: Grid, auth_file: Path, key_file: Path, count: int = 1, **extra: str
) -> list[JobId]:
    lines = {
        "executable": "worker-vm",
        "azure_auth_file": str(auth_file),
        "azure_image": IMAGE,
        "azure_location": "eastus",
        "azure_size": "Standard_D2s_v5",
        "azure_admin_username": "condor",
        "azure_admin_key": str(key_file),
        "log": "job.log",
        **extra,
    }
    body = "\n".join(f"{key} = {value}" for key, value in lines.items())
    return grid.submit(body, count, resource=RESOURCE)


def vm_name(grid: Grid, job_id: JobId) -> str:
    grid_job_id = grid.ad(job_id)["GridJobId"]
    kind, name = grid_job_id.split()
    assert kind == "azure"
    return name


def vm_puts(arm: ArmServer, name: str) -> list[Logged]:
    return arm.requests("PUT", f"{VM_PATH}/{re.escape(name)}$")


def owned(arm: ArmServer, name: str) -> list[str]:
    """Every resource at the fake ARM the GAHP made for VM `name` (and its group)."""
    with arm._lock:
        found = [
            res.id
            for res in arm.store.resources.values()
            if (res.body.get("tags") or {}).get("htgrid-owner") == name
        ]
        if name.lower() in arm.store.groups:
            found.append(arm.group_id(name))
    return found


def vm_of(arm: ArmServer, name: str):  # type: ignore[no-untyped-def]
    return arm.resource(name, f"{VM_TYPE}/{name}")


def running_vm(grid: Grid, arm: ArmServer, job_id: JobId) -> bool:
    ad = grid.ad(job_id)
    return ad.get("JobStatus") == JobStatus.RUNNING and ad.get("GridJobStatus") == "running"


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_job_runs_as_a_vm_and_completes_when_its_vm_ends(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    """Job 0's VM is deleted from outside, job 1's deallocated: both jobs complete, and
    the grid manager deletes what is left of either VM (NIC, IP, disks, group)."""
    ids = submit(grid, auth_file, ssh_key_file, count=2)
    names: list[str] = []

    async def main() -> None:
        async with running(grid):
            await wait_for("both VMs running", lambda: all(running_vm(grid, arm, i) for i in ids))
            names.extend(vm_name(grid, i) for i in ids)
            for job_id, name in zip(ids, names, strict=True):
                ad = grid.ad(job_id)
                vm = vm_of(arm, name)
                assert vm is not None
                assert ad["AzureVmId"] == vm.body["properties"]["vmId"]
                ip = arm.resource(name, f"Microsoft.Network/publicIPAddresses/{name}-ip")
                assert ip is not None and ad["VmIpAddress"] == ip.body["properties"]["ipAddress"]
                assert ad["Managed"] == "External"
                # The create carried the job's azure_* settings, as HTCondor sends them.
                body = vm_puts(arm, name)[-1].body
                props = body["properties"]
                assert body["location"] == "eastus"
                assert props["hardwareProfile"] == {"vmSize": "Standard_D2s_v5"}
                assert props["storageProfile"]["imageReference"]["offer"] == "ubuntu-24_04-lts"
                assert props["osProfile"]["adminUsername"] == "condor"
                keys = props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
                assert keys[0]["keyData"] == ssh_key_file.read_text().strip()
            with arm._lock:  # someone deletes VM 0 in the portal, and deallocates VM 1
                arm.store.remove(vm_of(arm, names[0]))
                vm_of(arm, names[1]).power = "deallocated"
            await wait_for("the jobs to leave the queue", lambda: not any(map(grid.in_queue, ids)))
            for job_id, name in zip(ids, names, strict=True):
                ad = grid.ad(job_id)
                assert ad["JobStatus"] == JobStatus.COMPLETED
                assert ad["ExitCode"] == 0
                assert ad["GridJobStatus"] == "deallocated"
                assert owned(arm, name) == [], f"left behind for {name}"
            assert arm.requests("DELETE", f"{VM_PATH}/{re.escape(names[1])}$")

    run(main())
    log = grid.log()
    # 027 once per job, naming its VM; the queue daemon, not the grid manager, writes 001/005.
    for job_id, name in zip(ids, names, strict=True):
        tag = f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)"
        assert log.count(tag) == 1
        assert f"GridJobId: azure {name}" in log
    assert f"GridResource: {RESOURCE}" in log


def test_rm_deletes_the_vm_and_what_was_made_for_it(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    [job_id] = submit(grid, auth_file, ssh_key_file)

    async def main() -> None:
        async with running(grid):
            await wait_for("the VM running", lambda: running_vm(grid, arm, job_id))
            name = vm_name(grid, job_id)
            made = owned(arm, name)
            assert any("/networkInterfaces/" in rid for rid in made), made
            assert any("/publicIPAddresses/" in rid for rid in made), made
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave the queue", lambda: not grid.in_queue(job_id))
            # The job left only once the VM and its NIC (deleted with it), IP, disks and
            # group were gone.
            assert owned(arm, name) == []
            assert arm.requests("DELETE", f"{VM_PATH}/{re.escape(name)}$")
            assert arm.requests("DELETE", f"publicIPAddresses/{re.escape(name)}-ip$")

    run(main())
    assert grid.ad(job_id)["JobStatus"] == JobStatus.REMOVED


def test_hold_deletes_the_vm_and_release_makes_a_new_one(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    [job_id] = submit(grid, auth_file, ssh_key_file)

    async def main() -> None:
        async with running(grid):
            await wait_for("the VM running", lambda: running_vm(grid, arm, job_id))
            first = vm_name(grid, job_id)
            grid.queue.act(JobAction.Hold, job_id, ROOT, "not now")
            await wait_for("the VM deleted", lambda: owned(arm, first) == [])
            await wait_for("the job handed back", lambda: grid.ad(job_id)["Managed"] == "Schedd")
            ad = grid.ad(job_id)
            assert ad["JobStatus"] == JobStatus.HELD and ad["HoldReason"] == "not now"
            assert unset(ad, "GridJobId") and unset(ad, "AzureVmId")
            grid.queue.act(JobAction.Release, job_id, ROOT)
            await wait_for("a new VM running", lambda: running_vm(grid, arm, job_id))
            second = vm_name(grid, job_id)
            assert second != first
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave the queue", lambda: not grid.in_queue(job_id))
            assert owned(arm, second) == []

    run(main())


def test_a_refused_create_holds_the_job_with_the_providers_message(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    message = "Operation could not be completed as it results in exceeding approved Cores quota"
    arm.fault("PUT", f"{VM_PATH}/htgrid-", 409, "QuotaExceeded", message)
    before = set(_all_ids(arm))
    [job_id] = submit(grid, auth_file, ssh_key_file)

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)
            await wait_for("the job handed back", lambda: grid.ad(job_id)["Managed"] == "Schedd")

    run(main())
    ad = grid.ad(job_id)
    reason = ad["HoldReason"]
    assert reason.startswith("Error creating VM: QuotaExceeded (HTTP 409, permanent)"), reason
    assert message in reason
    assert unset(ad, "GridJobId") and unset(ad, "AzureVmId")
    # The GAHP rolled back what it had made before the VM was refused.
    assert set(_all_ids(arm)) == before


def test_a_missing_azure_setting_holds_the_job(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    """A job ad edited after submit lacks AzureSize: held naming it, nothing created."""
    [job_id] = submit(grid, auth_file, ssh_key_file)
    grid.queue.update(job_id, {"AzureSize": ""})
    before = len(arm.requests("PUT"))

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)

    run(main())
    assert grid.ad(job_id)["HoldReason"] == "Missing attribute AzureSize"
    assert len(arm.requests("PUT")) == before


def _all_ids(arm: ArmServer) -> list[str]:
    with arm._lock:
        return [res.id for res in arm.store.resources.values()] + list(arm.store.groups)


def test_a_failed_ping_takes_the_resource_down_and_jobs_wait(
    grid: Grid, arm: ArmServer, ssh_key_file: Path, tmp_path: Path
) -> None:
    """Credentials Azure refuses: the resource is down (026), the job waits, idle and not
    held; once the auth file is right again the resource is up (025) and the VM made."""
    auth = write_auth_file(tmp_path / "rotated.auth", arm, secret="expired")
    [job_id] = submit(grid, auth, ssh_key_file)

    async def main() -> None:
        async with running(grid) as manager:
            await wait_for("the resource down", lambda: manager.resources[RESOURCE].down)
            await wait_for("026", lambda: "026 (" in grid.log())
            ad = grid.ad(job_id)
            assert ad["JobStatus"] == JobStatus.IDLE
            assert isinstance(ad.get("GridResourceUnavailableTime"), int)
            assert unset(ad, "GridJobId")
            write_auth_file(auth, arm)  # the secret is renewed
            os.utime(auth, (time.time() + 5, time.time() + 5))  # a new mtime, surely
            await wait_for("the VM running", lambda: running_vm(grid, arm, job_id))
            assert unset(grid.ad(job_id), "GridResourceUnavailableTime")
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave the queue", lambda: not grid.in_queue(job_id))

    run(main())
    log = grid.log()
    assert log.index("026 (") < log.index("025 (") < log.index("027 (")
