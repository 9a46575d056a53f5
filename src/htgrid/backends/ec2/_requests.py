"""EC2 GAHP requests as the server reads them, and the boto3 arguments they become.

Pure functions, no I/O. The requests the grid manager sends (EC2_VM_START, its spot
variant, CREATE_TAGS) are `htgrid.gahp.commands.ec2`'s values, read here with their `of`;
EC2_BULK_START (condor_annex's) and EC2_VM_STATUS_ALL's filter are read here:

    EC2_BULK_START  0-2, 3 client-token 4 spot-price 5 target-capacity 6 fleet-role
                  7 allocation-strategy 8 valid-until 9... launch-config-json* NULL

Where HTCondor silently skips a malformed item (a block device mapping without a colon, a
parameter without a value) so does this module.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from htgrid.backends.ec2._errors import Ec2RequestError
from htgrid.gahp import unnull
from htgrid.gahp.commands.ec2 import LaunchSpec, SpotStart, Target, VmStart, tag_pairs

__all__ = [
    "CLIENT_TOKEN_TAG",
    "EXTRA_QUERY",
    "BulkStart",
    "bulk_start_kwargs",
    "launch_configuration",
    "parse_bulk_start",
    "parse_vm_start",
    "run_instances_kwargs",
    "spot_kwargs",
    "status_filters",
    "user_data_bytes",
]

#: The tag every instance started here carries: its client token (moto ignores ClientToken).
CLIENT_TOKEN_TAG = "htcondor:ClientToken"
#: The key in boto3 arguments for raw query parameters (taken out again by a hook).
EXTRA_QUERY = "HTGridExtraQuery"

# StringTokenIterator's default separators.
_TOKENS = re.compile(r"[^,\s]+")
_NULL = "NULL"


def parse_vm_start(args: Sequence[str]) -> VmStart:
    """EC2_VM_START's arguments (at least 19 after the request id)."""
    try:
        return VmStart.of(args)
    except ValueError as err:
        raise Ec2RequestError("GAHPERROR", str(err)) from None


@dataclass(frozen=True, slots=True)
class BulkStart:
    """EC2_BULK_START: a spot fleet request."""

    target: Target
    client_token: str | None
    spot_price: str | None
    target_capacity: int
    fleet_role: str
    allocation_strategy: str
    valid_until: str | None
    #: One boto3 SpotFleetLaunchSpecification per launch configuration.
    launch_specs: tuple[Mapping[str, Any], ...]


def status_filters(args: Sequence[str]) -> list[dict[str, Any]]:
    """EC2_VM_STATUS_ALL's optional `<filter-name> <filter-value>` as boto3 Filters.

    `client-token` becomes our tag: moto cannot filter on client tokens, and every
    instance started here carries the tag.
    """
    if len(args) < 5 or _NULL in (args[3], args[4]):
        return []
    name, value = args[3], args[4]
    if name == "client-token":
        name = f"tag:{CLIENT_TOKEN_TAG}"
    return [{"Name": name, "Values": [value]}]


def user_data_bytes(spec: LaunchSpec, file_contents: bytes | None) -> bytes | None:
    """User data then the user data file's contents, as the EC2 GAHP joins them."""
    text = spec.user_data.encode("utf-8", "surrogateescape") if spec.user_data else b""
    joined = text + (file_contents or b"")
    return joined or None


def run_instances_kwargs(request: VmStart, user_data: bytes | None) -> dict[str, Any]:
    """boto3 run_instances arguments; botocore base64-encodes UserData itself."""
    spec = request.spec
    kwargs: dict[str, Any] = {
        "ImageId": spec.ami,
        "MinCount": 1,
        "MaxCount": request.max_count,
        # An instance that shuts itself down is gone: the grid manager sees "terminated".
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if spec.instance_type:
        kwargs["InstanceType"] = spec.instance_type
    _common_spec(kwargs, spec)
    if spec.private_ip:
        kwargs["PrivateIpAddress"] = spec.private_ip
    if request.client_token:
        kwargs["ClientToken"] = request.client_token
        kwargs["TagSpecifications"] = [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": CLIENT_TOKEN_TAG, "Value": request.client_token}],
            }
        ]
    if request.block_devices:
        kwargs["BlockDeviceMappings"] = [
            {"VirtualName": virtual, "DeviceName": device}
            for virtual, device in request.block_devices
        ]
    if user_data:
        kwargs["UserData"] = user_data
    if request.parameters:
        kwargs[EXTRA_QUERY] = dict(request.parameters)
    return kwargs


def _common_spec(kwargs: dict[str, Any], spec: LaunchSpec) -> None:
    if spec.keypair:
        kwargs["KeyName"] = spec.keypair
    if spec.availability_zone:
        kwargs["Placement"] = {"AvailabilityZone": spec.availability_zone}
    if spec.subnet:
        kwargs["SubnetId"] = spec.subnet
    profile = {}
    if spec.iam_profile_arn:
        profile["Arn"] = spec.iam_profile_arn
    if spec.iam_profile_name:
        profile["Name"] = spec.iam_profile_name
    if profile:
        kwargs["IamInstanceProfile"] = profile
    if spec.security_groups:
        kwargs["SecurityGroups"] = list(spec.security_groups)
    if spec.security_group_ids:
        kwargs["SecurityGroupIds"] = list(spec.security_group_ids)


def spot_kwargs(request: SpotStart, user_data: bytes | None) -> dict[str, Any]:
    """boto3 request_spot_instances arguments; the client token is the launch group.

    RequestSpotInstances has no ClientToken, so HTCondor puts the token in LaunchGroup
    (a feature it does not otherwise use) and recovers requests by it. botocore does not
    encode this UserData, so it is base64-encoded here.
    """
    spec = request.spec
    launch: dict[str, Any] = {
        "ImageId": spec.ami,
        "InstanceType": spec.instance_type or "m1.small",
    }
    _common_spec(launch, spec)
    if spec.private_ip:
        launch["NetworkInterfaces"] = [{"PrivateIpAddress": spec.private_ip}]
    if user_data:
        launch["UserData"] = base64.b64encode(user_data).decode("ascii")
    kwargs: dict[str, Any] = {
        "SpotPrice": request.spot_price,
        "InstanceCount": 1,
        "LaunchSpecification": launch,
    }
    if request.client_token:
        kwargs["LaunchGroup"] = request.client_token
    return kwargs


def parse_bulk_start(args: Sequence[str]) -> BulkStart:
    """EC2_BULK_START's arguments (at least 11 after the request id)."""
    capacity = args[5]
    if not capacity.isdigit():
        raise Ec2RequestError("GAHPERROR", f"Bad target capacity {capacity!r}")
    specs = []
    for index, blob in enumerate(args[9:], start=1):
        if blob == _NULL:
            break
        specs.append(launch_configuration(blob, index))
    if not specs:
        raise Ec2RequestError("E_BAD_LAUNCH_CONFIGURATION", "No launch configuration given.")
    return BulkStart(
        target=Target.of(args),
        client_token=unnull(args[3]),
        spot_price=unnull(args[4]),
        target_capacity=int(capacity),
        fleet_role=args[6],
        allocation_strategy=args[7],
        valid_until=args[8] if args[8] != _NULL else None,
        launch_specs=tuple(specs),
    )


def launch_configuration(blob: str, index: int = 1) -> dict[str, Any]:
    """One launch configuration (the annex's flat JSON object) as a boto3 launch spec."""
    try:
        raw = json.loads(blob)
    except ValueError as err:
        raise Ec2RequestError(
            "E_BAD_LAUNCH_CONFIGURATION", f"Launch configuration {index} is not JSON: {err}"
        ) from err
    if not isinstance(raw, dict):
        raise Ec2RequestError(
            "E_BAD_LAUNCH_CONFIGURATION", f"Launch configuration {index} is not a JSON object"
        )
    # Empty values mean "not set", as in setLaunchSpecificationAttribute().
    conf = {str(key): str(value) for key, value in raw.items() if value not in (None, "")}
    spec: dict[str, Any] = {}
    for name in ("ImageId", "SpotPrice", "KeyName", "UserData", "InstanceType", "SubnetId"):
        if name in conf:
            spec[name] = conf[name]
    if "WeightedCapacity" in conf:
        spec["WeightedCapacity"] = float(conf["WeightedCapacity"])
    profile = {}
    if "IAMProfileARN" in conf:
        profile["Arn"] = conf["IAMProfileARN"]
    if "IAMProfileName" in conf:
        profile["Name"] = conf["IAMProfileName"]
    if profile:
        spec["IamInstanceProfile"] = profile
    if "AvailabilityZone" in conf:
        spec["Placement"] = {"AvailabilityZone": conf["AvailabilityZone"]}
    tags = [tag.strip() for tag in conf.get("Tags", "").split(",") if tag.strip()]
    if tags:
        spec["TagSpecifications"] = [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": key, "Value": value} for key, value in tag_pairs(tags)],
            }
        ]
    groups = [{"GroupName": name} for name in _TOKENS.findall(conf.get("SecurityGroupNames", ""))]
    groups += [{"GroupId": gid} for gid in _TOKENS.findall(conf.get("SecurityGroupIDs", ""))]
    if groups:
        spec["SecurityGroups"] = groups
    devices = _fleet_block_devices(conf.get("BlockDeviceMapping", ""))
    if devices:
        spec["BlockDeviceMappings"] = devices
    return spec


def _fleet_block_devices(text: str) -> list[dict[str, Any]]:
    """Old `virtual:device` or new `device=snapshot:size:delete:type` mappings."""
    devices: list[dict[str, Any]] = []
    for item in _TOKENS.findall(text):
        if "=" in item:
            device, _, rest = item.partition("=")
            quad = rest.split(":")
            if len(quad) != 4:
                continue
            ebs: dict[str, Any] = {"DeleteOnTermination": quad[2].lower() == "true"}
            if quad[0]:
                ebs["SnapshotId"] = quad[0]
            if quad[1].isdigit():
                ebs["VolumeSize"] = int(quad[1])
            if quad[3]:
                ebs["VolumeType"] = quad[3]
            devices.append({"DeviceName": device, "Ebs": ebs})
        else:
            pair = item.split(":")
            if len(pair) == 2:
                devices.append({"VirtualName": pair[0], "DeviceName": pair[1]})
    return devices


def bulk_start_kwargs(request: BulkStart) -> dict[str, Any]:
    """boto3 request_spot_fleet arguments, with HTCondor's fixed choices."""
    config: dict[str, Any] = {
        "TargetCapacity": request.target_capacity,
        "IamFleetRole": request.fleet_role,
        "AllocationStrategy": request.allocation_strategy,
        "ExcessCapacityTerminationPolicy": "noTermination",
        "TerminateInstancesWithExpiration": False,
        "Type": "request",
        "LaunchSpecifications": [dict(spec) for spec in request.launch_specs],
    }
    if request.client_token:
        config["ClientToken"] = request.client_token
    if request.spot_price:
        config["SpotPrice"] = request.spot_price
    if request.valid_until:
        config["ValidUntil"] = request.valid_until
    return {"SpotFleetRequestConfig": config}
