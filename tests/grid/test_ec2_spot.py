"""Spot VM jobs (ec2_spot_price): the queue, the grid manager, the EC2 GAHP, moto.

moto fulfils a spot request as it is made; what it cannot show (a request that stays
open, fails, or waits on price-too-low) comes from ec2_spot_gahp.py, the real GAHP with
its spot commands scripted.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.grid import GridManager
from htgrid.grid.ec2 import Ec2JobId
from htgrid.grid.ec2._job import ec2_grid_type
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.queue import HoldReasonCode, JobAction, JobId, JobStatus

from ._ec2_harness import instances, submit_vms
from ._harness import FAST, ROOT, Grid, running, unset, wait_for

SPOT = "ec2_spot_price = 0.05\n"
SCRIPTED = Path(__file__).parent / "ec2_spot_gahp.py"


def _spot_requests(aws: Any) -> list[dict[str, Any]]:
    return list(aws.describe_spot_instance_requests()["SpotInstanceRequests"])


def _running(grid: Grid, ids: list[JobId]) -> bool:
    return all(grid.ad(i)["JobStatus"] == JobStatus.RUNNING for i in ids)


def _token(grid: Grid, job_id: JobId) -> str:
    grid_id = Ec2JobId.parse(grid.ad(job_id)["GridJobId"])
    assert grid_id is not None
    return grid_id.client_token


@contextlib.asynccontextmanager
async def scripted(grid: Grid, control: Path) -> AsyncIterator[GridManager]:
    """A grid manager whose EC2 GAHP keeps spot requests itself (ec2_spot_gahp.py)."""
    control.mkdir(exist_ok=True)
    gahp = ec2_grid_type((sys.executable, str(SCRIPTED), "--control", str(control)))
    manager = GridManager(grid.home, config=FAST, grid_types={"ec2": gahp})
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await wait_for("the grid manager", lambda: manager.ready.is_set() or task.done())
        if task.done():
            task.result()
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def _spot_log(control: Path) -> list[str]:
    path = control / "requests.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_spot_job_runs_and_ends_when_its_instance_is_terminated(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    job_id = submit_vms(grid, moto_url, keys, ami, extra=SPOT)[0]

    async def main() -> None:
        async with running(grid):
            await wait_for("the spot VM running", lambda: _running(grid, [job_id]))
            ad = grid.ad(job_id)
            [request] = _spot_requests(aws)
            # The request id in EC2SpotRequestID; the token is its launch group.
            assert ad["EC2SpotRequestID"] == request["SpotInstanceRequestId"]
            assert request["LaunchGroup"] == _token(grid, job_id)
            assert request["SpotPrice"].startswith("0.05")
            # GridJobId gains the request's instance, which runs as a spot instance.
            vm_id = request["InstanceId"]
            assert str(ad["GridJobId"]) == f"ec2 {moto_url} {_token(grid, job_id)} {vm_id}"
            assert ad["EC2InstanceName"] == vm_id
            vm = instances(aws)[vm_id]
            assert vm["InstanceLifecycle"] == "spot" and vm["InstanceType"] == "m5.large"
            await asyncio.to_thread(aws.terminate_instances, InstanceIds=[vm_id])
            await wait_for("the job's completion", lambda: not grid.in_queue(job_id))

    asyncio.run(main())
    done = grid.ad(job_id)
    assert done["JobStatus"] == JobStatus.COMPLETED
    assert done["GridJobStatus"] == "terminated"
    assert len(_spot_requests(aws)) == 1 and len(instances(aws)) == 1
    assert grid.log().count(f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)") == 1


def test_rm_cancels_the_spot_request_and_terminates_its_instance(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    removed, kept = submit_vms(grid, moto_url, keys, ami, count=2, extra=SPOT)

    async def main() -> None:
        async with running(grid):
            await wait_for("both spot VMs running", lambda: _running(grid, [removed, kept]))
            request = grid.ad(removed)["EC2SpotRequestID"]
            vm_id = grid.ad(removed)["EC2InstanceName"]
            grid.queue.act(JobAction.Remove, removed, ROOT)
            await wait_for("the removed job to leave", lambda: not grid.in_queue(removed))
            assert instances(aws)[vm_id]["State"]["Name"] == "terminated"
            # moto forgets a cancelled request at once (AWS keeps it, cancelled).
            left = {r["SpotInstanceRequestId"] for r in _spot_requests(aws)}
            assert left == {grid.ad(kept)["EC2SpotRequestID"]} and request not in left
            assert grid.ad(kept)["JobStatus"] == JobStatus.RUNNING

    asyncio.run(main())


def test_a_token_with_a_spot_request_made_is_adopted_not_requested_again(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    """What a kill -9 right after EC2_VM_START_SPOT leaves: a token, a request, no id."""
    made, not_made = submit_vms(grid, moto_url, keys, ami, count=2, extra=SPOT)
    for job_id, token in ((made, "tok-made"), (not_made, "tok-not-made")):
        grid_id = Ec2JobId(moto_url, token)
        grid.queue.update(job_id, {"GridJobId": str(grid_id), "Managed": "External"})
    spec = {"ImageId": ami, "InstanceType": "m5.large"}
    [earlier] = aws.request_spot_instances(
        SpotPrice="0.05", InstanceCount=1, LaunchGroup="tok-made", LaunchSpecification=spec
    )["SpotInstanceRequests"]

    async def main() -> None:
        async with running(grid):
            await wait_for("both running", lambda: _running(grid, [made, not_made]))

    asyncio.run(main())
    assert grid.ad(made)["EC2SpotRequestID"] == earlier["SpotInstanceRequestId"]
    assert grid.ad(made)["EC2InstanceName"] == earlier["InstanceId"]
    groups = Counter(r["LaunchGroup"] for r in _spot_requests(aws))
    assert groups == {"tok-made": 1, "tok-not-made": 1}


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


@pytest.mark.timeout(300)
def test_kill_9_while_requesting_spot_instances(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    ids = submit_vms(grid, moto_url, keys, ami, count=8, extra=SPOT)
    kills = 0
    manager = _start_manager(grid)
    try:
        # The first kill as soon as a token is committed: between commit and request.
        deadline = time.monotonic() + 60
        while not any(grid.ad(i).get("GridJobId") for i in ids):
            assert time.monotonic() < deadline, "no token was committed"
            time.sleep(0.005)
        while True:
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            kills += 1
            manager = _start_manager(grid)
            if kills >= 3 or _running(grid, ids):
                break
            time.sleep(0.4 * kills)
        deadline = time.monotonic() + 120
        while not _running(grid, ids):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the spot VMs did not all run"
            time.sleep(0.1)
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
    assert status == 0
    requests = _spot_requests(aws)
    assert len(requests) == len(ids), f"{len(requests)} spot requests for {len(ids)} jobs"
    by_group = {r["LaunchGroup"]: r for r in requests}
    for job_id in ids:
        ad = grid.ad(job_id)
        request = by_group[_token(grid, job_id)]
        assert ad["EC2SpotRequestID"] == request["SpotInstanceRequestId"]
        assert ad["EC2InstanceName"] == request["InstanceId"]
    assert len(instances(aws)) == len(ids)


@pytest.mark.parametrize(
    ("script", "code", "cancelled"),
    [
        ("failed bad-parameters", HoldReasonCode.EC2UserError, False),
        ("open price-too-low", HoldReasonCode.EC2UserError, True),
        ("open capacity-not-available", HoldReasonCode.EC2ServerError, True),
    ],
)
def test_a_failed_spot_request_holds_the_job_with_the_providers_code(
    grid: Grid,
    moto_url: str,
    aws: Any,
    keys: tuple[str, str],
    ami: str,
    tmp_path: Path,
    script: str,
    code: HoldReasonCode,
    cancelled: bool,
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    (control / "spot").write_text(script)
    job_id = submit_vms(grid, moto_url, keys, ami, extra=SPOT)[0]

    async def main() -> None:
        async with scripted(grid, control):
            await wait_for(
                "the job handed back held",
                lambda: (
                    grid.ad(job_id).get("Managed") == "Schedd"
                    and grid.ad(job_id)["JobStatus"] == JobStatus.HELD
                ),
            )

    asyncio.run(main())
    ad = grid.ad(job_id)
    state, status_code = script.split()
    assert ad["HoldReason"].startswith(f"Spot instance request sir-fake1 {state}: {status_code}")
    assert ad["HoldReasonCode"] == code
    assert unset(ad, "GridJobId") and unset(ad, "EC2SpotRequestID")
    # An open request is cancelled before the job is let go; a failed one needs nothing.
    assert ("EC2_VM_STOP_SPOT sir-fake1" in _spot_log(control)) is cancelled
    assert instances(aws) == {}


def test_rm_of_an_open_spot_request_cancels_it(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    job_id = submit_vms(grid, moto_url, keys, ami, extra=SPOT)[0]

    async def main() -> None:
        async with scripted(grid, control):
            await wait_for(
                "the request open", lambda: "open" in str(grid.ad(job_id).get("GridWaitReason"))
            )
            assert grid.ad(job_id)["EC2SpotRequestID"] == "sir-fake1"
            assert grid.ad(job_id)["JobStatus"] == JobStatus.IDLE
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave", lambda: not grid.in_queue(job_id))

    asyncio.run(main())
    log = _spot_log(control)
    assert log.count("EC2_VM_START_SPOT " + _token_of_log(log)) == 1
    assert "EC2_VM_STOP_SPOT sir-fake1" in log
    assert instances(aws) == {}


def _token_of_log(log: list[str]) -> str:
    starts = [line.split()[1] for line in log if line.startswith("EC2_VM_START_SPOT ")]
    assert starts, log
    return starts[0]


def test_one_spot_status_request_per_poll_whatever_the_number_of_jobs(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str, tmp_path: Path
) -> None:
    async def per_poll(count: int) -> tuple[int, int, int]:
        control = tmp_path / f"control-{count}"
        ids = submit_vms(grid, moto_url, keys, ami, count=count, extra=SPOT)
        async with scripted(grid, control) as manager:
            await wait_for(
                f"{count} open requests",
                lambda: all(grid.ad(i).get("EC2SpotRequestID") for i in ids),
                timeout=90,
            )
            (resource,) = manager.resources.values()
            assert isinstance(resource, Ec2Resource)
            polls, spot = resource.stats.polls, resource.spot_status_commands
            sent = _spot_log(control).count("EC2_VM_STATUS_ALL_SPOT")
            await wait_for("three more polls", lambda: resource.stats.polls >= polls + 3)
            polls = resource.stats.polls - polls
            spot = resource.spot_status_commands - spot
            sent = _spot_log(control).count("EC2_VM_STATUS_ALL_SPOT") - sent
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))
        return polls, spot, sent

    few = asyncio.run(per_poll(3))
    many = asyncio.run(per_poll(30))
    # One EC2_VM_STATUS_ALL_SPOT per poll, and no EC2_VM_STATUS_ALL (no instance yet).
    assert few[0] == few[1] and many[0] == many[1], (few, many)
    # What reached the GAHP (the last poll's answer may still be on its way).
    assert abs(few[2] - few[1]) <= 1 and abs(many[2] - many[1]) <= 1, (few, many)


def test_a_reclaimed_spot_instance_holds_the_job_and_asks_for_no_other(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    job_id = submit_vms(grid, moto_url, keys, ami, extra=SPOT)[0]

    async def main() -> None:
        async with running(grid):
            await wait_for("the spot VM running", lambda: _running(grid, [job_id]))
            vm_id = grid.ad(job_id)["EC2InstanceName"]
            # What AWS does when it takes a spot instance back (moto never does).
            backend = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
            vm = backend.get_instance(vm_id)
            vm.terminate()
            vm.state_reason = StateReason(
                "Server.SpotInstanceTermination: Spot instance termination",
                "Server.SpotInstanceTermination",
            )
            for request in backend.spot_instance_requests.values():
                if request.instance is vm:
                    request.state = "closed"
                    request._status_code = "instance-terminated-by-price"
            await wait_for(
                "the job handed back held", lambda: grid.ad(job_id).get("Managed") == "Schedd"
            )

    asyncio.run(main())
    ad = grid.ad(job_id)
    assert ad["JobStatus"] == JobStatus.HELD
    assert ad["HoldReasonCode"] == HoldReasonCode.EC2ServerError
    assert "Server.SpotInstanceTermination" in ad["HoldReason"]
    assert len(_spot_requests(aws)) == 1 and len(instances(aws)) == 1
