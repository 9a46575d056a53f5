"""EC2 GAHP request arguments, parsed into values, and the boto3 arguments they become.

Pure functions, no I/O. Positions follow HTCondor's EC2 GAHP (`amazonCommands.cpp`,
`*::workerFunction`), counted here after the request id:

    EC2_VM_START  0 url 1 access-file 2 secret-file 3 ami 4 keypair 5 user-data
                  6 user-data-file 7 instance-type 8 zone 9 subnet 10 private-ip
                  11 client-token 12 block-device-mapping 13 iam-arn 14 iam-name
                  15 max-count 16... sg-name* NULL sg-id* NULL (param-name value)* NULL
    EC2_VM_START_SPOT  0-2 as above, 3 ami 4 spot-price 5 keypair 6 user-data
                  7 user-data-file 8 instance-type 9 zone 10 subnet 11 private-ip
                  12 client-token 13 iam-arn 14 iam-name 15... sg-name* NULL sg-id* NULL
    EC2_BULK_START  0-2, 3 client-token 4 spot-price 5 target-capacity 6 fleet-role
                  7 allocation-strategy 8 valid-until 9... launch-config-json* NULL

`NULL` (any case) is an absent value and ends a list. Where HTCondor silently skips a
malformed item (a block device mapping without a colon, a parameter without a value)
so does this module.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from htgrid.backends.ec2._errors import Ec2RequestError
from htgrid.gahp import unnull

__all__ = [
    "CLIENT_TOKEN_TAG",
    "EXTRA_QUERY",
    "BulkStart",
    "LaunchSpec",
    "SpotStart",
    "Target",
    "VmStart",
    "bulk_start_kwargs",
    "launch_configuration",
    "parse_bulk_start",
    "parse_spot_start",
    "parse_tags",
    "parse_vm_start",
    "run_instances_kwargs",
    "spot_kwargs",
    "status_filters",
    "target_of",
    "user_data_bytes",
]

#: The tag every instance started here carries: its client token (moto ignores ClientToken).
CLIENT_TOKEN_TAG = "htcondor:ClientToken"
#: The key in boto3 arguments for raw query parameters (taken out again by a hook).
EXTRA_QUERY = "HTGridExtraQuery"

# StringTokenIterator's default separators.
_TOKENS = re.compile(r"[^,\s]+")
_NULL = "NULL"


@dataclass(frozen=True, slots=True)
class Target:
    """The three arguments every request starts with."""

    service_url: str
    access_key_file: str
    secret_key_file: str


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What an instance is started from: shared by on-demand and spot requests."""

    ami: str
    keypair: str | None = None
    user_data: str | None = None
    user_data_file: str | None = None
    instance_type: str | None = None
    availability_zone: str | None = None
    subnet: str | None = None
    private_ip: str | None = None
    iam_profile_arn: str | None = None
    iam_profile_name: str | None = None
    security_groups: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VmStart:
    """EC2_VM_START."""

    target: Target
    spec: LaunchSpec
    client_token: str | None = None
    #: (virtual name, device name) pairs.
    block_devices: tuple[tuple[str, str], ...] = ()
    max_count: int = 1
    #: Raw RunInstances query parameters (ec2_parameter_*), in order.
    parameters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SpotStart:
    """EC2_VM_START_SPOT."""

    target: Target
    spec: LaunchSpec
    spot_price: str
    client_token: str | None = None


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


def target_of(args: Sequence[str]) -> Target:
    """The common arguments (the server has checked there are at least three)."""
    return Target(args[0], args[1], args[2])


def _opt(args: Sequence[str], index: int) -> str | None:
    return unnull(args[index]) if index < len(args) else None


def _lists(args: Sequence[str], count: int) -> list[list[str]]:
    """`count` NULL-terminated lists; extra NULLs at the end are ignored."""
    lists: list[list[str]] = [[] for _ in range(count)]
    which = 0
    for arg in args:
        if arg.upper() == _NULL:
            which += 1
        elif which < count:
            lists[which].append(arg)
    return lists


def parse_vm_start(args: Sequence[str]) -> VmStart:
    """EC2_VM_START's arguments (at least 19 after the request id)."""
    spec = LaunchSpec(
        ami=args[3],
        keypair=_opt(args, 4),
        user_data=_opt(args, 5),
        user_data_file=_opt(args, 6),
        instance_type=_opt(args, 7),
        availability_zone=_opt(args, 8),
        subnet=_opt(args, 9),
        private_ip=_opt(args, 10),
        iam_profile_arn=_opt(args, 13),
        iam_profile_name=_opt(args, 14),
    )
    max_count = 1
    count_arg = _opt(args, 15)
    if count_arg is not None:
        if not count_arg.isdigit() or int(count_arg) < 1:
            raise Ec2RequestError("GAHPERROR", f"Bad max count {count_arg!r}")
        max_count = int(count_arg)
    groups, group_ids, parameters = _start_lists(args[16:])
    spec = replace(spec, security_groups=tuple(groups), security_group_ids=tuple(group_ids))
    return VmStart(
        target=target_of(args),
        spec=spec,
        client_token=_opt(args, 11),
        block_devices=_block_devices(_opt(args, 12)),
        max_count=max_count,
        parameters=tuple(parameters),
    )


def _start_lists(
    args: Sequence[str],
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Security group names, ids and (name, value) parameters, as HTCondor reads them.

    In the parameter list a value is taken as is, even the word NULL; a name without a
    value is dropped.
    """
    groups: list[str] = []
    group_ids: list[str] = []
    parameters: list[tuple[str, str]] = []
    which = 0
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.upper() == _NULL:
            which += 1
        elif which == 0:
            groups.append(arg)
        elif which == 1:
            group_ids.append(arg)
        elif which == 2 and i + 1 < len(args):
            parameters.append((arg, args[i + 1]))
            i += 1
        i += 1
    return groups, group_ids, parameters


def _block_devices(text: str | None) -> tuple[tuple[str, str], ...]:
    """`virtual:device` pairs separated by commas or spaces; others are skipped."""
    if not text:
        return ()
    pairs = []
    for item in _TOKENS.findall(text):
        parts = item.split(":")
        if len(parts) == 2 and all(parts):
            pairs.append((parts[0], parts[1]))
    return tuple(pairs)


def parse_spot_start(args: Sequence[str]) -> SpotStart:
    """EC2_VM_START_SPOT's arguments (at least 17 after the request id)."""
    groups, group_ids = _lists(args[15:], 2)
    spec = LaunchSpec(
        ami=args[3],
        keypair=_opt(args, 5),
        user_data=_opt(args, 6),
        user_data_file=_opt(args, 7),
        instance_type=_opt(args, 8),
        availability_zone=_opt(args, 9),
        subnet=_opt(args, 10),
        private_ip=_opt(args, 11),
        iam_profile_arn=_opt(args, 13),
        iam_profile_name=_opt(args, 14),
        security_groups=tuple(groups),
        security_group_ids=tuple(group_ids),
    )
    return SpotStart(target_of(args), spec, spot_price=args[4], client_token=_opt(args, 12))


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


def parse_tags(args: Sequence[str]) -> list[tuple[str, str]]:
    """`name=value` arguments up to a NULL; a name without `=` gets an empty value."""
    tags = []
    for arg in args:
        if arg.upper() == _NULL:
            break
        name, _, value = arg.partition("=")
        tags.append((name, value))
    return tags


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
        target=target_of(args),
        client_token=_opt(args, 3),
        spot_price=_opt(args, 4),
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
                "Tags": [{"Key": key, "Value": value} for key, value in parse_tags(tags)],
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
