"""Azure VM jobs through the grid manager, against the fake ARM of the Azure GAHP tests.

    python bench/azure_grid.py [--small 10] [--vms 100] [--polls 5]

For --small and then --vms jobs: queue them, run the grid manager (in process, poll
interval 1 s) with `htgrid gahp azure` until every VM runs, then count over --polls
polls the AZURE_VM_LIST commands it sent and the ARM list calls they made (first pages
of the subscription's VM list; one page holds 50 VMs). Both must stay at one per poll
whatever the number of jobs: the figure printed is per poll, not a time. The time to
have all VMs running is printed too, for the record (the fake ARM is no Azure).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from htgrid.grid import GRID_TYPES, GridManager, GridManagerConfig
from htgrid.grid.azure._job import azure_grid_type
from htgrid.queue import Identity, JobQueue, JobStatus
from htgrid.submit import SubmitDescription

ROOT = Path(__file__).resolve().parents[1]
ME = Identity("root")
IMAGE = "Canonical:ubuntu-24_04-lts:server:latest"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHtgridbenchkeyhtgridbenchkeyhtgridbench bench@htgrid"


def _package(name: str, path: Path) -> ModuleType:
    """Load tests/backends/azure as the package `backends.azure` (it has no installed home)."""
    spec = importlib.util.spec_from_file_location(
        name, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_package("backends", ROOT / "tests" / "backends")
_package("backends.azure", ROOT / "tests" / "backends" / "azure")
arm_server: Any = importlib.import_module("backends.azure.arm_server")
azure_conftest: Any = importlib.import_module("backends.azure.conftest")


def submit(queue: JobQueue, count: int, auth: Path, key: Path, work: Path) -> None:
    text = (
        "universe = grid\n"
        f"grid_resource = azure {arm_server.SUBSCRIPTION}\n"
        "executable = worker-vm\n"
        f"azure_auth_file = {auth}\nazure_image = {IMAGE}\nazure_location = eastus\n"
        "azure_size = Standard_D2s_v5\nazure_admin_username = condor\n"
        f"azure_admin_key = {key}\nqueue {count}\n"
    )
    desc = SubmitDescription.from_text(text, cwd=str(work))
    with queue.transaction(ME) as tx:
        cluster = tx.new_cluster()
        jobs = list(desc.jobs(cluster, owner="root", qdate=int(time.time())))
        for job in jobs:
            job.ad["Owner"] = "root"
        tx.set_cluster_ad(cluster, jobs[0].ad)
        for job in jobs:
            tx.new_proc(cluster, job.ad)


async def run(arm: Any, count: int, polls: int, base: Path) -> tuple[float, float, float]:
    """(seconds until all VMs run, AZURE_VM_LIST per poll, ARM list calls per poll)."""
    home = base / f"home{count}"
    work = base / "work"
    work.mkdir(exist_ok=True)
    auth = azure_conftest.write_auth_file(base / "azure.auth", arm)
    key = base / "id.pub"
    key.write_text(KEY + "\n")
    queue = JobQueue.open(home / "spool", fsync=False)
    submit(queue, count, auth, key, work)
    config = dataclasses.replace(GridManagerConfig(), poll_interval=1.0, feed_interval=0.2)
    types = {**GRID_TYPES, "azure": azure_grid_type(azure_conftest.gahp_argv())}
    manager = GridManager(home, config=config, grid_types=types)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    start = time.monotonic()
    while len(queue.query(f"JobStatus == {int(JobStatus.RUNNING)}")) < count:
        await asyncio.sleep(0.1)
    ready = time.monotonic() - start
    stats = manager.resources[f"azure {arm_server.SUBSCRIPTION}"].stats

    def lists() -> int:
        path = "/providers/Microsoft.Compute/virtualMachines$"
        return sum(1 for e in arm.requests("GET", path) if "$skiptoken" not in e.query)

    first, commands, calls = stats.polls, stats.status_commands, lists()
    while stats.polls < first + polls:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the last poll's answer
    made = stats.polls - first
    per_command = (stats.status_commands - commands) / made
    per_call = (lists() - calls) / made
    stop.set()
    await task
    queue.close()
    return ready, per_command, per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--vms", type=int, default=100)
    parser.add_argument("--polls", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "arm").mkdir()
        arm = arm_server.ArmServer(base / "arm", page_size=1000).start()
        env = azure_conftest.gahp_env(arm)
        os.environ.update({k: env[k] for k in ("GAHP_SSL_CAFILE", "NO_PROXY")})
        try:
            for count in (args.small, args.vms):
                ready, per_command, per_call = asyncio.run(run(arm, count, args.polls, base))
                print(
                    f"{count:5d} VM jobs: all running after {ready:6.2f} s; per poll: "
                    f"{per_command:.2f} AZURE_VM_LIST, {per_call:.2f} ARM list calls"
                )
        finally:
            arm.stop()


if __name__ == "__main__":
    main()
