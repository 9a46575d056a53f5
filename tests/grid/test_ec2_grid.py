"""ec2 VM jobs end to end: the queue, the grid manager, `htgrid gahp ec2`, moto's EC2."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from htgrid.grid import explain_grid_job
from htgrid.grid.ec2 import Ec2JobId
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.queue import HoldReasonCode, JobAction, JobStatus

from ._ec2_harness import instances, submit_vms, token_tag
from ._harness import FAST, ROOT, Grid, running, unset, wait_for


def test_vm_runs_and_ends_when_terminated_from_outside(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    ids = submit_vms(grid, moto_url, keys, ami, count=2)

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "both VMs running",
                lambda: all(grid.ad(i)["JobStatus"] == JobStatus.RUNNING for i in ids),
            )
            for job_id in ids:
                ad = grid.ad(job_id)
                grid_id = Ec2JobId.parse(ad["GridJobId"])
                assert grid_id is not None and grid_id.service_url == moto_url
                assert ad["EC2InstanceName"] == grid_id.instance_id
                assert ad["GridJobStatus"] == "running"
                vm = instances(aws)[ad["EC2InstanceName"]]
                assert vm["State"]["Name"] == "running"
                assert token_tag(vm) == grid_id.client_token
                assert vm["InstanceType"] == "m5.large" and vm["ImageId"] == ami
                # The submit's Name tag reached the instance once it ran.
                await wait_for("the Name tag", lambda vm_id=vm["InstanceId"]: _name(aws, vm_id))
                assert any("instance" in line for line in explain_grid_job(ad))
            ended = grid.ad(ids[0])["EC2InstanceName"]
            await asyncio.to_thread(aws.terminate_instances, InstanceIds=[ended])
            await wait_for("the job's completion", lambda: not grid.in_queue(ids[0]))
            assert grid.ad(ids[1])["JobStatus"] == JobStatus.RUNNING

    asyncio.run(main())
    done = grid.ad(ids[0])
    assert done["JobStatus"] == JobStatus.COMPLETED
    assert done["ExitCode"] == 0
    assert done["GridJobStatus"] == "terminated"
    assert done["EC2StatusReasonCode"] == "Client.UserInitiatedShutdown"
    assert done["NumJobStarts"] == 1  # Running once (the daemon logs 001 from that)
    # 027 once, with the instance id (001 and 005 come from the queue daemon's feed).
    tag = f"027 ({ids[0].cluster:03d}.{ids[0].proc:03d}.000)"
    assert grid.log().count(tag) == 1
    assert f"GridJobId: {done['GridJobId']}" in grid.log()


def _name(aws: Any, instance_id: str) -> bool:
    tags = instances(aws)[instance_id].get("Tags", ())
    return any(tag["Key"] == "Name" and tag["Value"] == "vm-job" for tag in tags)


def test_rm_and_hold_terminate_the_instance(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    removed, held = submit_vms(grid, moto_url, keys, ami, count=2)

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "both VMs running",
                lambda: all(grid.ad(i)["JobStatus"] == JobStatus.RUNNING for i in (removed, held)),
            )
            gone = grid.ad(removed)["EC2InstanceName"]
            stopped = grid.ad(held)["EC2InstanceName"]
            grid.queue.act(JobAction.Remove, removed, ROOT)
            grid.queue.act(JobAction.Hold, held, ROOT, "not now")
            # The removed job stays (Removed) until its instance is terminated.
            await wait_for("the removed job to leave", lambda: not grid.in_queue(removed))
            assert instances(aws)[gone]["State"]["Name"] == "terminated"
            await wait_for(
                "the held job to be handed back",
                lambda: grid.ad(held).get("Managed") == "Schedd",
            )
            assert instances(aws)[stopped]["State"]["Name"] == "terminated"
            ad = grid.ad(held)
            assert ad["JobStatus"] == JobStatus.HELD and ad["HoldReason"] == "not now"
            assert unset(ad, "GridJobId")  # a release starts a new instance
            # Released: a second instance, the first one stays terminated.
            grid.queue.act(JobAction.Release, held, ROOT)
            await wait_for(
                "the released job running again",
                lambda: grid.ad(held)["JobStatus"] == JobStatus.RUNNING,
            )
            assert grid.ad(held)["EC2InstanceName"] not in (stopped, gone)

    asyncio.run(main())
    assert len(instances(aws)) == 3


def test_a_refused_start_holds_the_job_with_the_providers_message(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    job_id = submit_vms(grid, moto_url, keys, "ami-0123456789abcdef0")[0]

    async def main() -> None:
        async with running(grid):
            # Held first, then handed back once the job's keypair is destroyed.
            await wait_for(
                "the hold and the hand back",
                lambda: (
                    (grid.ad(job_id)["JobStatus"], grid.ad(job_id).get("Managed"))
                    == (JobStatus.HELD, "Schedd")
                ),
            )

    asyncio.run(main())
    assert instances(aws) == {}
    ad = grid.ad(job_id)
    assert str(ad["HoldReason"]).startswith("InvalidAMIID.NotFound: "), ad["HoldReason"]
    assert "ami-0123456789abcdef0" in str(ad["HoldReason"])
    assert ad["HoldReasonCode"] == HoldReasonCode.EC2ConnectionProblem
    assert unset(ad, "GridJobId")
    assert ad["Managed"] == "Schedd"


def test_a_reclaimed_spot_instance_holds_the_job(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    """An instance the provider ends (a Server.* state reason) is no normal end."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    job_id = submit_vms(grid, moto_url, keys, ami)[0]

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the VM running", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.RUNNING
            )
            vm_id = grid.ad(job_id)["EC2InstanceName"]
            # What AWS does to a spot instance when the price rises (moto never does).
            vm = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(vm_id)
            vm.terminate()
            vm.state_reason = StateReason(
                "Server.SpotInstanceTermination: Spot instance termination",
                "Server.SpotInstanceTermination",
            )
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)

    asyncio.run(main())
    ad = grid.ad(job_id)
    assert "Server.SpotInstanceTermination" in str(ad["HoldReason"])
    assert ad["HoldReasonCode"] == HoldReasonCode.EC2ServerError
    assert ad["EC2StatusReasonCode"] == "Server.SpotInstanceTermination"


def test_keypair_made_for_the_job_and_destroyed_after(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "vm.pem"
    job_id = submit_vms(grid, moto_url, keys, ami, extra=f"ec2_keypair_file = {key_file}\n")[0]

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the VM running", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.RUNNING
            )
            ad = grid.ad(job_id)
            name = ad["EC2KeyPair"]
            assert name.startswith("SSH_htgrid_")
            assert instances(aws)[ad["EC2InstanceName"]]["KeyName"] == name
            assert "PRIVATE KEY" in key_file.read_text()
            pairs = aws.describe_key_pairs()["KeyPairs"]
            assert [pair["KeyName"] for pair in pairs] == [name]
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the job to leave", lambda: not grid.in_queue(job_id))

    asyncio.run(main())
    assert aws.describe_key_pairs()["KeyPairs"] == []
    assert not key_file.exists()


def test_one_status_request_per_poll_whatever_the_number_of_jobs(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    async def per_poll(count: int) -> tuple[int, int]:
        ids = submit_vms(grid, moto_url, keys, ami, count=count)
        async with running(grid) as manager:
            await wait_for(
                f"{count} VMs running",
                lambda: all(grid.ad(i)["JobStatus"] == JobStatus.RUNNING for i in ids),
                timeout=90,
            )
            (resource,) = manager.resources.values()
            assert isinstance(resource, Ec2Resource)
            start = (resource.stats.polls, resource.stats.status_commands)
            await wait_for("three more polls", lambda: resource.stats.polls >= start[0] + 3)
            polls = resource.stats.polls - start[0]
            commands = resource.stats.status_commands - start[1]
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))
        return polls, commands

    few = asyncio.run(per_poll(3))
    many = asyncio.run(per_poll(30))
    assert few[0] == few[1] and many[0] == many[1], (few, many)  # one per poll


def test_starts_reach_the_gahp_together_past_the_pending_request_throttle(
    grid: Grid, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    # The EC2 GAHP looks the client tokens of the starts it holds up in one call and
    # bounds its AWS calls itself: holding starts back here would split those lookups.
    ids = submit_vms(grid, moto_url, keys, ami, count=12)
    config = dataclasses.replace(FAST, max_pending_requests=4)

    async def main() -> int:
        async with running(grid, config) as manager:
            await wait_for(
                "every instance id saved",
                lambda: all(_instance_id(grid.ad(i)) for i in ids),
                timeout=90,
            )
            (resource,) = manager.resources.values()
            return resource.stats.max_in_flight

    most = asyncio.run(main())
    assert most > 4, most
    assert len(instances(aws)) == 12


def _instance_id(ad: Any) -> str | None:
    grid_id = Ec2JobId.parse(ad.get("GridJobId"))
    return None if grid_id is None else grid_id.instance_id
