"""What the grid manager's ec2 tests share: VM jobs against moto's server (tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from htgrid.queue import JobId

from ._harness import Grid


def submit_vms(
    grid: Grid,
    moto_url: str,
    keys: tuple[str, str],
    ami: str,
    count: int = 1,
    extra: str = "",
) -> list[JobId]:
    """Queue `count` VM jobs for moto's EC2."""
    body = (
        "executable = vm-job\n"
        f"ec2_access_key_id = {keys[0]}\n"
        f"ec2_secret_access_key = {keys[1]}\n"
        f"ec2_ami_id = {ami}\n"
        "ec2_instance_type = m5.large\n"
        "log = job.log\n"
        f"{extra}"
    )
    return grid.submit(body, count, resource=f"ec2 {moto_url}")


def instances(aws: Any) -> dict[str, dict[str, Any]]:
    """Every instance moto has, by id."""
    answer = aws.describe_instances()
    return {i["InstanceId"]: i for res in answer["Reservations"] for i in res["Instances"]}


def token_tag(instance: dict[str, Any]) -> str | None:
    """The client token the EC2 GAHP tags each instance with."""
    for tag in instance.get("Tags", ()):
        if tag["Key"] == "htcondor:ClientToken":
            return str(tag["Value"])
    return None
