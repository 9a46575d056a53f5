"""Spot instance requests and spot fleets through the EC2 GAHP, against moto.

What moto cannot do, and how these tests deal with it:

* moto never reclaims a spot instance; `reclaim` does to moto's state what AWS does
  (terminated, state reason Server.SpotInstanceTermination, request closed with status
  instance-terminated-by-price), and the GAHP must report it.
* moto forgets a cancelled spot request at once (AWS keeps it, "cancelled", for hours), so
  after EC2_VM_STOP_SPOT the request is simply gone from the status.
* moto's spot fleets keep neither ClientToken nor CreateTime, and do not tag their
  instances with aws:ec2spot:fleet-request-id: EC2_BULK_QUERY then reports NULL for the
  two, and EC2_VM_STATUS_ALL NULL for the fleet id (the formatting of real values is
  covered by the unit tests).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import StateReason

from ._wire import Wire
from .conftest import REGION, all_instances, instance


def spot_args(
    target: tuple[str, str, str],
    ami: str,
    *,
    price: str = "0.05",
    token: str = "NULL",
    user_data: str = "NULL",
    instance_type: str = "NULL",
    groups: tuple[str, ...] = (),
    group_ids: tuple[str, ...] = (),
) -> list[str]:
    """EC2_VM_START_SPOT's arguments after the request id, in ec2-gahp-client.cpp's order."""
    return [
        *target,
        ami,
        price,
        "NULL",  # keypair
        user_data,
        "NULL",  # user data file
        instance_type,
        "NULL",  # zone
        "NULL",  # subnet
        "NULL",  # private ip
        token,
        "NULL",  # iam arn
        "NULL",  # iam name
        *groups,
        "NULL",
        *group_ids,
        "NULL",
    ]


def rows(fields: list[str], width: int) -> list[list[str]]:
    """A success result's fields (after the 0) cut into records."""
    assert fields[0] == "0" and (len(fields) - 1) % width == 0, fields
    return [fields[i : i + width] for i in range(1, len(fields), width)]


def reclaim(instance_id: str) -> None:
    """Take a spot instance back as AWS does when the price rises (moto never does)."""
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    vm = backend.get_instance(instance_id)
    vm.terminate()
    vm.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )
    for request in backend.spot_instance_requests.values():
        if request.instance is vm:
            request.state = "closed"
            request._status_code = "instance-terminated-by-price"
            request.status_message = "Spot instance terminated due to price."


def test_spot_request_lifecycle(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    web = aws.create_security_group(GroupName="spot-web", Description="web")["GroupId"]
    started = gahp.call(
        "EC2_VM_START_SPOT",
        *spot_args(
            target,
            ami,
            token="tok-spot-1",
            user_data="hello spot",
            instance_type="m5.large",
            groups=("spot-web",),
        ),
    )
    assert started[0] == "0" and len(started) == 2 and started[1].startswith("sir-")
    sir = started[1]

    described = aws.describe_spot_instance_requests(SpotInstanceRequestIds=[sir])
    request = described["SpotInstanceRequests"][0]
    assert request["LaunchGroup"] == "tok-spot-1"  # HTCondor's idempotence token
    assert request["SpotPrice"].startswith("0.05")
    assert request["LaunchSpecification"]["InstanceType"] == "m5.large"

    [row] = rows(gahp.call("EC2_VM_STATUS_ALL_SPOT", *target), 5)
    vm_id = row[3]
    assert row == [sir, "active", "tok-spot-1", vm_id, "fulfilled"]
    assert gahp.call("EC2_VM_STATUS_SPOT", *target, sir) == ["0", *row]
    vm = instance(aws, vm_id)
    assert vm["InstanceLifecycle"] == "spot"
    assert {g["GroupId"] for g in vm["SecurityGroups"]} == {web}

    # A repeated request with the same token (a grid manager retrying after a crash)
    # finds the live request instead of making a second one.
    again = gahp.call("EC2_VM_START_SPOT", *spot_args(target, ami, token="tok-spot-1"))
    assert again == ["0", sir]
    assert len(aws.describe_spot_instance_requests()["SpotInstanceRequests"]) == 1

    assert gahp.call("EC2_VM_STOP_SPOT", *target, sir) == ["0"]
    assert gahp.call("EC2_VM_STATUS_ALL_SPOT", *target) == ["0"]
    # Cancelling the request leaves its instance: the grid manager stops it itself.
    assert gahp.call("EC2_VM_STOP", *target, vm_id) == ["0"]
    assert instance(aws, vm_id)["State"]["Name"] == "terminated"


def test_spot_request_on_the_wire(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str], relay: Any
) -> None:
    # moto drops a spot launch specification's group ids, so they are checked on the wire.
    relayed = (relay.url, *target[1:])
    args = spot_args(relayed, ami, user_data="a b\n", groups=("default",), group_ids=("sg-1",))
    assert gahp.call("EC2_VM_START_SPOT", *args)[0] == "0"
    sent = [q for action, q in relay.requests if action == "RequestSpotInstances"][-1]
    assert sent["LaunchSpecification.SecurityGroup.1"] == "default"
    assert sent["LaunchSpecification.SecurityGroupId.1"] == "sg-1"
    assert base64.b64decode(sent["LaunchSpecification.UserData"]) == b"a b\n"
    assert sent["InstanceCount"] == "1"
    assert sent["LaunchSpecification.InstanceType"] == "m1.small"  # HTCondor's default


def test_a_reclaimed_spot_instance_shows_why(
    gahp: Wire, ami: str, target: tuple[str, str, str]
) -> None:
    sir = gahp.call("EC2_VM_START_SPOT", *spot_args(target, ami, token="tok-reclaim"))[1]
    [spot] = rows(gahp.call("EC2_VM_STATUS_ALL_SPOT", *target), 5)
    vm_id = spot[3]
    reclaim(vm_id)
    [status] = rows(gahp.call("EC2_VM_STATUS_ALL", *target), 8)
    # The grid manager copies the state reason into EC2StatusReasonCode / HoldReason.
    assert status[:2] == [vm_id, "terminated"]
    assert status[4] == "Server.SpotInstanceTermination"
    [spot] = rows(gahp.call("EC2_VM_STATUS_ALL_SPOT", *target), 5)
    assert spot == [sir, "closed", "tok-reclaim", vm_id, "instance-terminated-by-price"]


def test_spot_fleet_start_query_stop(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    web = aws.create_security_group(GroupName="fleet-web", Description="web")["GroupId"]
    aws.create_key_pair(KeyName="annex-key")
    config = {
        "ImageId": ami,
        "SpotPrice": "0.1",
        "KeyName": "annex-key",
        "UserData": base64.b64encode(b"#!/bin/sh\n").decode(),
        "InstanceType": "m5.large",
        "WeightedCapacity": "1",
        "SecurityGroupIDs": web,
        "Tags": "htcondor:AnnexName=my-annex, owner=alice",
    }
    started = gahp.call(
        "EC2_BULK_START",
        *target,
        "annex-token-1",
        "0.1",
        "2",
        "arn:aws:iam::123456789012:role/fleet",
        "lowestPrice",
        "NULL",
        json.dumps(config),
        "NULL",
    )
    assert started[0] == "0" and len(started) == 2 and started[1].startswith("sfr-")
    fleet_id = started[1]
    [fleet] = aws.describe_spot_fleet_requests(SpotFleetRequestIds=[fleet_id])[
        "SpotFleetRequestConfigs"
    ]
    conf = fleet["SpotFleetRequestConfig"]
    assert (conf["TargetCapacity"], conf["AllocationStrategy"]) == (2, "lowestPrice")
    [spec] = conf["LaunchSpecifications"]
    assert (spec["ImageId"], spec["InstanceType"], spec["KeyName"]) == (
        ami,
        "m5.large",
        "annex-key",
    )

    status = rows(gahp.call("EC2_VM_STATUS_ALL", *target), 8)
    assert len(status) == 2
    for row in status:
        assert row[1] == "running" and row[3] == "annex-key"
        assert row[7] == "my-annex"  # the annex name, from the instance's tag
        tags = {t["Key"]: t["Value"] for t in instance(aws, row[0])["Tags"]}
        assert tags["owner"] == "alice"

    [query] = rows(gahp.call("EC2_BULK_QUERY", *target), 3)
    assert query[0] == fleet_id
    assert query[1:] == ["NULL", "NULL"]  # moto keeps no CreateTime or ClientToken

    assert gahp.call("EC2_BULK_STOP", *target, fleet_id) == ["0"]
    assert {i["State"]["Name"] for i in all_instances(aws)} == {"terminated"}


def test_bulk_start_with_a_bad_launch_configuration(
    gahp: Wire, target: tuple[str, str, str]
) -> None:
    fields = gahp.call(
        "EC2_BULK_START", *target, "tok", "0.1", "1", "role", "lowestPrice", "NULL", "{nope", "NULL"
    )
    assert fields[:2] == ["1", "E_BAD_LAUNCH_CONFIGURATION"]
