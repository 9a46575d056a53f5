"""Azure jobs across grid manager deaths, and the cost of status: one VM per job, always."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from htgrid.grid._queueio import UNDEFINED
from htgrid.queue import JobAction, JobStatus

from ._azure_arm import ArmServer, arm, auth_file, gahp_argv, ssh_key_file
from ._harness import FAST, ROOT, Grid, wait_for
from .test_azure_end_to_end import (
    RESOURCE,
    VM_PATH,
    gahp_environment,
    owned,
    running,
    running_vm,
    submit,
    vm_name,
    vm_of,
    vm_puts,
)

__all__ = ["arm", "auth_file", "gahp_environment", "ssh_key_file"]  # fixtures

HERE = Path(__file__).parent


def test_restart_between_the_name_commit_and_the_create(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    """The queue as a grid manager killed right after committing the name leaves it: the
    next one lists, does not find the VM, and creates it under that name, once."""
    [job_id] = submit(grid, auth_file, ssh_key_file)
    name = "htgrid-1-0-0123456789ab"
    grid.queue.update(job_id, {"GridJobId": f"azure {name}", "Managed": "External"})

    async def main() -> None:
        async with running(grid):
            await wait_for("the VM running", lambda: running_vm(grid, arm, job_id))
            assert vm_name(grid, job_id) == name
            assert len(vm_puts(arm, name)) == 1
            assert vm_of(arm, name) is not None
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave the queue", lambda: not grid.in_queue(job_id))

    asyncio.run(main())
    assert grid.log().count("027 (") == 1


def test_restart_after_the_create_finds_the_vm_by_name(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    """The create landed but its answer (AzureVmId) never reached the queue: the next
    grid manager finds the VM in AZURE_VM_LIST and adopts it instead of creating again."""
    [job_id] = submit(grid, auth_file, ssh_key_file)

    async def first() -> str:
        async with running(grid):
            await wait_for("the VM running", lambda: running_vm(grid, arm, job_id))
            return vm_name(grid, job_id)

    name = asyncio.run(first())
    grid.queue.update(job_id, {"AzureVmId": UNDEFINED, "VmIpAddress": UNDEFINED})
    assert len(vm_puts(arm, name)) == 1

    async def second() -> None:
        async with running(grid):
            await wait_for("the VM adopted", lambda: grid.ad(job_id).get("AzureVmId") == "")
            assert len(vm_puts(arm, name)) == 1
            assert running_vm(grid, arm, job_id)
            with arm._lock:  # the VM shuts itself down: the job completes
                vm_of(arm, name).power = "deallocated"
            await wait_for("the job to leave the queue", lambda: not grid.in_queue(job_id))

    asyncio.run(second())
    assert grid.ad(job_id)["JobStatus"] == JobStatus.COMPLETED
    assert owned(arm, name) == []
    assert len(vm_puts(arm, name)) == 1


def _start_manager(grid: Grid) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(HERE / "azure_gm.py"), str(grid.home), "--", *gahp_argv()]
    with open(grid.home / "gridmanager.log", "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def _created(arm: ArmServer) -> set[str]:
    """The names of the VMs the GAHP was asked to create (PUT), ever."""
    return {entry.path.rsplit("/", 1)[1] for entry in arm.requests("PUT", f"{VM_PATH}/htgrid-")}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_of_the_grid_manager_makes_one_vm_per_job(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path, seed: int
) -> None:
    rng = random.Random(seed)
    before = _created(arm)
    ids = submit(grid, auth_file, ssh_key_file, count=6)
    kills = 0
    manager = _start_manager(grid)
    try:
        for _ in range(5):
            time.sleep(rng.uniform(0.3, 2.0))
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            kills += 1
            manager = _start_manager(grid)
        deadline = time.monotonic() + 120
        while not all(running_vm(grid, arm, job_id) for job_id in ids):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the VMs did not all start"
            time.sleep(0.1)
        names = {job_id: vm_name(grid, job_id) for job_id in ids}
        # Every VM ever created belongs to a job, and each job's was created once.
        assert _created(arm) - before == set(names.values())
        for name in names.values():
            assert len(vm_puts(arm, name)) == 1, name
        with arm._lock:  # every VM ends: every job completes, every VM is cleaned up
            for name in names.values():
                arm.store.remove(vm_of(arm, name))
        while any(map(grid.in_queue, ids)):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline + 60, "the jobs did not finish"
            time.sleep(0.1)
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
    assert status == 0
    assert kills == 5
    log = grid.log()
    for job_id, name in names.items():
        assert grid.ad(job_id)["JobStatus"] == JobStatus.COMPLETED
        assert owned(arm, name) == []
        assert log.count(f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)") <= 1


def test_one_vm_list_per_poll_however_many_jobs(
    grid: Grid, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    ids = submit(grid, auth_file, ssh_key_file, count=12)

    def lists() -> int:
        """AZURE_VM_LIST's ARM calls: first pages of the subscription's VM list."""
        return sum(
            1 for entry in arm.requests("GET", f"{VM_PATH}$") if "$skiptoken" not in entry.query
        )

    def vm_gets() -> int:
        return len(arm.requests("GET", f"{VM_PATH}/[^/]+$"))

    async def main() -> None:
        async with running(grid) as manager:
            await wait_for("12 VMs running", lambda: all(running_vm(grid, arm, i) for i in ids))
            stats = manager.resources[RESOURCE].stats
            polls, commands, listed, got = stats.polls, stats.status_commands, lists(), vm_gets()
            await wait_for("5 more polls", lambda: stats.polls >= polls + 5)
            await asyncio.sleep(FAST.poll_interval / 2)  # the last poll's list is answered
            made = stats.polls - polls
            assert stats.status_commands - commands == made  # one AZURE_VM_LIST per poll
            # ...which is one ARM list call, whatever the number of jobs; no per-VM GETs.
            assert made - 1 <= lists() - listed <= made + 1
            assert vm_gets() == got
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))

    asyncio.run(main())
    assert all(owned(arm, vm_name(grid, job_id)) == [] for job_id in ids)
