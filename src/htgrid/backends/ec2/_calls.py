"""The blocking side: one function per AWS action the GAHP uses, run in worker threads.

Each takes a boto3 EC2 client (Any: boto3 is untyped at this boundary) and parsed request
values, and returns result fields or raises Ec2Error. botocore's own exceptions are turned
into Ec2Errors by the caller, around the whole call (`_errors.translate`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from htgrid.backends.ec2._errors import Ec2Error, Ec2RequestError
from htgrid.backends.ec2._requests import (
    CLIENT_TOKEN_TAG,
    BulkStart,
    bulk_start_kwargs,
    run_instances_kwargs,
    spot_kwargs,
    user_data_bytes,
)
from htgrid.backends.ec2._results import (
    RAW_BODY,
    Json,
    client_token_of,
    instances_of,
    server_type,
)
from htgrid.gahp.commands.ec2 import LaunchSpec, SpotStart, VmStart

__all__ = [
    "associate_address",
    "attach_volume",
    "cancel_fleet",
    "cancel_spot",
    "create_key_pair",
    "create_tags",
    "delete_key_pair",
    "describe_fleets",
    "describe_instances",
    "describe_spot",
    "find_by_tokens",
    "find_spot_request",
    "query_server_type",
    "request_fleet",
    "request_spot",
    "run_instances",
    "terminate",
]

# The most values EC2 takes in one filter.
_FILTER_VALUES = 200
# The largest page EC2's Describe* calls return. Without MaxResults a server may pick a
# smaller one (moto pages DescribeInstances by 100): one call per poll up to 1,000 VMs.
_PAGE = 1000
_OPEN_SPOT_STATES = frozenset({"open", "active"})


def _pages(method: Any, key: str, **kwargs: Any) -> Iterator[Json]:
    """Every item under `key`, following NextToken."""
    while True:
        answer = method(**kwargs)
        yield from answer.get(key, ())
        token = answer.get("NextToken")
        if not token:
            return
        kwargs["NextToken"] = token


def describe_instances(client: Any, filters: Sequence[Json] = ()) -> list[Json]:
    """Every instance the account can see (matching `filters`): one DescribeInstances."""
    kwargs: dict[str, Any] = {"MaxResults": _PAGE}
    if filters:
        kwargs["Filters"] = list(filters)
    return instances_of(_pages(client.describe_instances, "Reservations", **kwargs))


def find_by_tokens(client: Any, tokens: Sequence[str]) -> dict[str, list[str]]:
    """Instance ids by client token, for instances tagged with one of `tokens`."""
    found: dict[str, list[str]] = {}
    for start in range(0, len(tokens), _FILTER_VALUES):
        chunk = list(tokens[start : start + _FILTER_VALUES])
        filters = [{"Name": f"tag:{CLIENT_TOKEN_TAG}", "Values": chunk}]
        for instance in describe_instances(client, filters):
            found.setdefault(client_token_of(instance), []).append(str(instance["InstanceId"]))
    return found


def read_user_data(spec: LaunchSpec) -> bytes | None:
    """The user data to send: the argument, then the file's contents."""
    contents = None
    if spec.user_data_file:
        try:
            with open(spec.user_data_file, "rb") as handle:
                contents = handle.read()
        except OSError as err:
            raise Ec2RequestError(
                "E_FILE_IO",
                f"Failed to read userdata file '{spec.user_data_file}': {err.strerror or err}.",
            ) from err
    return user_data_bytes(spec, contents)


def run_instances(client: Any, request: VmStart) -> list[str]:
    """RunInstances; the new instance ids."""
    kwargs = run_instances_kwargs(request, read_user_data(request.spec))
    answer = client.run_instances(**kwargs)
    ids = [str(item["InstanceId"]) for item in answer.get("Instances", ())]
    if not ids:
        raise Ec2Error("E_NO_INSTANCE_ID", "Could not find instance ID in response from server.")
    return ids


def terminate(client: Any, instance_ids: Sequence[str]) -> None:
    """TerminateInstances."""
    client.terminate_instances(InstanceIds=list(instance_ids))


def find_spot_request(client: Any, launch_group: str) -> str | None:
    """An open or active spot request made with this client token (its launch group).

    The launch-group filter is not understood everywhere (moto), so all requests are
    listed and matched here.
    """
    requests = _pages(
        client.describe_spot_instance_requests, "SpotInstanceRequests", MaxResults=_PAGE
    )
    for request in requests:
        if request.get("LaunchGroup") == launch_group and request.get("State") in _OPEN_SPOT_STATES:
            return str(request["SpotInstanceRequestId"])
    return None


def request_spot(client: Any, request: SpotStart) -> str:
    """RequestSpotInstances; the spot instance request id."""
    answer = client.request_spot_instances(**spot_kwargs(request, read_user_data(request.spec)))
    for item in answer.get("SpotInstanceRequests", ()):
        if item.get("SpotInstanceRequestId"):
            return str(item["SpotInstanceRequestId"])
    raise Ec2Error(
        "E_NO_SPOT_REQUEST_ID", "Could not find spot request ID in response from server."
    )


def cancel_spot(client: Any, request_id: str) -> None:
    """CancelSpotInstanceRequests (the instance, if any, is stopped separately)."""
    client.cancel_spot_instance_requests(SpotInstanceRequestIds=[request_id])


def describe_spot(client: Any, request_id: str | None = None) -> list[Json]:
    """One spot instance request, or all of them."""
    # EC2 takes MaxResults only without ids.
    kwargs = {"SpotInstanceRequestIds": [request_id]} if request_id else {"MaxResults": _PAGE}
    return list(_pages(client.describe_spot_instance_requests, "SpotInstanceRequests", **kwargs))


def create_key_pair(client: Any, name: str, output_file: str) -> None:
    """CreateKeyPair, writing the private key to `output_file` (mode 0600)."""
    answer = client.create_key_pair(KeyName=name)
    material = str(answer.get("KeyMaterial") or "")
    try:
        # Written in place, not renamed over: the grid manager may pass /dev/null.
        fd = os.open(output_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(material)
    except OSError as err:
        raise Ec2RequestError(
            "E_FILE_IO",
            f"Failed to write private key to file '{output_file}': {err.strerror or err}.",
        ) from err


def delete_key_pair(client: Any, name: str) -> None:
    """DeleteKeyPair."""
    client.delete_key_pair(KeyName=name)


def associate_address(client: Any, instance_id: str, address: str) -> None:
    """AssociateAddress: `ip` (EC2-Classic) or `ip:allocation-id` (VPC)."""
    ip, _, allocation = address.partition(":")
    if allocation:
        client.associate_address(InstanceId=instance_id, AllocationId=allocation)
    else:
        client.associate_address(InstanceId=instance_id, PublicIp=ip)


def attach_volume(client: Any, volume_id: str, instance_id: str, device: str) -> None:
    """AttachVolume."""
    client.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=device)


def create_tags(client: Any, resource_id: str, tags: Sequence[tuple[str, str]]) -> None:
    """CreateTags on one resource."""
    client.create_tags(
        Resources=[resource_id], Tags=[{"Key": key, "Value": value} for key, value in tags]
    )


def query_server_type(client: Any) -> str:
    """DescribeKeyPairs, and what its HTTP headers and XML say about the server."""
    answer = client.describe_key_pairs()
    headers: Mapping[str, str] = (answer.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    return server_type(headers, answer.get(RAW_BODY, b""))


def request_fleet(client: Any, request: BulkStart) -> str:
    """RequestSpotFleet; the spot fleet request id."""
    answer = client.request_spot_fleet(**bulk_start_kwargs(request))
    fleet_id = answer.get("SpotFleetRequestId")
    if not fleet_id:
        raise Ec2Error(
            "E_NO_BULK_REQUEST_ID", "Could not find bulk request ID in response from server."
        )
    return str(fleet_id)


def cancel_fleet(client: Any, fleet_id: str) -> None:
    """CancelSpotFleetRequests, terminating the fleet's instances."""
    answer = client.cancel_spot_fleet_requests(
        SpotFleetRequestIds=[fleet_id], TerminateInstances=True
    )
    for failure in answer.get("UnsuccessfulFleetRequests", ()):
        error = failure.get("Error") or {}
        raise Ec2Error(
            "E_UNEXPECTED_ERROR",
            f"Unexpected failure encountered while cancelling spot fleet request "
            f"'{failure.get('SpotFleetRequestId', fleet_id)}': "
            f"{error.get('Code', 'unknown')}: {error.get('Message', '')}".rstrip(": "),
        )


def describe_fleets(client: Any) -> list[Json]:
    """Every spot fleet request."""
    return list(
        _pages(client.describe_spot_fleet_requests, "SpotFleetRequestConfigs", MaxResults=_PAGE)
    )
