"""The EC2 GAHP tests' helpers: the GAHP on its pipes, a relay, argument builders.

moto's server and the `moto_url`, `aws`, `ami` and `keys` fixtures live in
tests/conftest.py, shared with the grid manager's ec2 tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ._proxy import Relay
from ._wire import Wire, ec2_gahp_argv

REGION = "us-east-1"


@pytest.fixture
def target(moto_url: str, keys: tuple[str, str]) -> tuple[str, str, str]:
    """The three common arguments of every EC2 GAHP request."""
    return (moto_url, *keys)


@pytest.fixture
def gahp(aws: Any) -> Iterator[Wire]:
    """The EC2 GAHP as a subprocess, spoken to over its pipes."""
    wire = Wire(ec2_gahp_argv("--max-attempts", "2"))
    try:
        yield wire
    finally:
        wire.close()


@pytest.fixture
def relay(moto_url: str) -> Iterator[Relay]:
    """A counting, fault-injecting relay in front of moto."""
    proxy = Relay(moto_url)
    try:
        yield proxy
    finally:
        proxy.close()


def start_args(
    target: tuple[str, str, str],
    ami: str,
    *,
    token: str = "NULL",
    keypair: str = "NULL",
    user_data: str = "NULL",
    user_data_file: str = "NULL",
    instance_type: str = "NULL",
    zone: str = "NULL",
    subnet: str = "NULL",
    private_ip: str = "NULL",
    block_devices: str = "NULL",
    iam_arn: str = "NULL",
    iam_name: str = "NULL",
    max_count: str = "1",
    groups: tuple[str, ...] = (),
    group_ids: tuple[str, ...] = (),
    parameters: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """EC2_VM_START's arguments after the request id, in ec2-gahp-client.cpp's order."""
    args = [
        *target,
        ami,
        keypair,
        user_data,
        user_data_file,
        instance_type,
        zone,
        subnet,
        private_ip,
        token,
        block_devices,
        iam_arn,
        iam_name,
        max_count,
        *groups,
        "NULL",
        *group_ids,
        "NULL",
    ]
    for name, value in parameters:
        args += [name, value]
    return [*args, "NULL"]


def instance(aws: Any, instance_id: str) -> dict[str, Any]:
    """What moto says about one instance."""
    answer = aws.describe_instances(InstanceIds=[instance_id])
    return dict(answer["Reservations"][0]["Instances"][0])


def all_instances(aws: Any) -> list[dict[str, Any]]:
    """Every instance moto has."""
    answer = aws.describe_instances()
    return [i for res in answer["Reservations"] for i in res["Instances"]]
