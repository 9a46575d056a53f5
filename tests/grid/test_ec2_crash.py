"""kill -9 of the grid manager while it starts VMs: one instance per job, never two.

A job's client token is committed before EC2_VM_START; a restarted grid manager that
finds a token without an instance id looks it up in the next EC2_VM_STATUS_ALL.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

from htgrid.grid.ec2 import Ec2JobId
from htgrid.queue import JobId, JobStatus

from ._ec2_harness import instances, submit_vms, token_tag
from ._harness import Grid, manager_scans, running, wait_for

JOBS = 10


def _start_manager(grid: Grid) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "htgrid.cli", "gridmanager",
        "--home", str(grid.home),
        "--poll-interval", "0.3",
        "--feed-interval", "0.1",
        "--set", "lost_submit_grace=0.5",
        "--log", str(grid.home / "gridmanager.log"),
    ]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _running(grid: Grid, ids: list[JobId]) -> bool:
    return all(grid.ad(i)["JobStatus"] == JobStatus.RUNNING for i in ids)


def _one_instance_each(grid: Grid, aws: Any, ids: list[JobId]) -> None:
    vms = instances(aws)
    tokens = Counter(token_tag(vm) for vm in vms.values())
    assert len(vms) == len(ids), f"{len(vms)} instances for {len(ids)} jobs"
    for job_id in ids:
        grid_id = Ec2JobId.parse(grid.ad(job_id)["GridJobId"])
        assert grid_id is not None and grid_id.instance_id in vms
        assert tokens[grid_id.client_token] == 1
        assert token_tag(vms[grid_id.instance_id]) == grid_id.client_token
    log = grid.log()
    for job_id in ids:
        assert log.count(f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)") == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_while_starting(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str, seed: int
) -> None:
    rng = random.Random(seed)
    ids = submit_vms(grid, moto_url, keys, ami, count=JOBS)
    kills = 0
    manager = _start_manager(grid)
    try:
        # The first kill as soon as a token is committed: between commit and start.
        deadline = time.monotonic() + 60
        while not any(grid.ad(i).get("GridJobId") for i in ids):
            assert time.monotonic() < deadline, "no token was committed"
            time.sleep(0.005)
        while True:
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            kills += 1
            scans = manager_scans(grid)  # the dead ones wrote all they will write
            manager = _start_manager(grid)
            if kills >= 4 or _running(grid, ids):
                break
            time.sleep(rng.uniform(0.3, 1.5))
        deadline = time.monotonic() + 120
        # A SIGTERM before the new manager is up would find Python's default handler.
        while manager_scans(grid) <= scans:
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the grid manager did not start"
            time.sleep(0.05)
        while not _running(grid, ids):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the VMs did not all run"
            time.sleep(0.1)
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
    assert status == 0
    assert kills >= 1
    _one_instance_each(grid, aws, ids)


def test_a_token_already_started_is_adopted_not_started_again(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    """The state a kill -9 leaves right after EC2_VM_START: a token, an instance, no id."""
    started, not_started = submit_vms(grid, moto_url, keys, ami, count=2)
    tokens = {started: "tok-started", not_started: "tok-never-started"}
    for job_id, token in tokens.items():
        grid_id = Ec2JobId(moto_url, token)
        grid.queue.update(job_id, {"GridJobId": str(grid_id), "Managed": "External"})
    # The instance the dead grid manager's start made, tagged by the GAHP.
    tag = {"Key": "htcondor:ClientToken", "Value": "tok-started"}
    made = aws.run_instances(
        ImageId=ami,
        MinCount=1,
        MaxCount=1,
        ClientToken="tok-started",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [tag]}],
    )["Instances"][0]["InstanceId"]

    async def main() -> None:
        async with running(grid):
            await wait_for("both running", lambda: _running(grid, [started, not_started]))

    asyncio.run(main())
    assert grid.ad(started)["EC2InstanceName"] == made
    assert str(grid.ad(started)["GridJobId"]) == f"ec2 {moto_url} tok-started {made}"
    _one_instance_each(grid, aws, [started, not_started])
