"""EC2 answers (boto3's parsed responses) as the EC2 GAHP's result fields. Pure functions.

What the grid manager reads (EC2_VM_STATUS_ALL's 8 fields an instance, the spot status's
5 a request) is written with `htgrid.gahp.commands.ec2`'s InstanceStatus and SpotStatus;
unset values are `NULL`. The others, which no htgrid client reads, as HTCondor's EC2 GAHP
writes them (`amazonCommands.cpp`):

    EC2_VM_STATUS           per instance: <instance-id> <state> <ami> <state-reason-code>,
                            and when running also <public-dns> <private-dns> <keypair>
                            <group-id>... (or one NULL)
    EC2_BULK_QUERY          per fleet, 3 fields: <fleet-request-id> <create-time> <client-token>
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from htgrid.backends.ec2._requests import CLIENT_TOKEN_TAG
from htgrid.gahp import null
from htgrid.gahp.commands import ec2

__all__ = [
    "ANNEX_TAG",
    "FLEET_TAG",
    "RAW_BODY",
    "Json",
    "aws_time",
    "bulk_query_fields",
    "client_token_of",
    "instances_of",
    "server_type",
    "spot_fields",
    "status_all_fields",
    "status_fields",
]

#: EC2 tags a spot fleet's instances with their fleet.
FLEET_TAG = "aws:ec2spot:fleet-request-id"
#: condor_annex tags its instances with the annex name.
ANNEX_TAG = "htcondor:AnnexName"
#: Where the raw body of a DescribeKeyPairs answer is kept in the parsed response.
RAW_BODY = "HTGridRawBody"

Json = Mapping[str, Any]


def instances_of(reservations: Iterable[Json]) -> list[Json]:
    """Every instance of every reservation of a DescribeInstances answer, in order."""
    return [instance for res in reservations for instance in res.get("Instances", ())]


def _tags(item: Json) -> dict[str, str]:
    return {tag.get("Key", ""): tag.get("Value", "") for tag in item.get("Tags", ())}


def _state(instance: Json) -> str:
    return str((instance.get("State") or {}).get("Name") or "")


def _reason(item: Json) -> str:
    return str((item.get("StateReason") or {}).get("Code") or "")


def client_token_of(instance: Json) -> str:
    """The instance's client token; our tag stands in where the server dropped it."""
    return str(instance.get("ClientToken") or _tags(instance).get(CLIENT_TOKEN_TAG) or "")


def status_all_fields(instances: Iterable[Json]) -> list[str]:
    """EC2_VM_STATUS_ALL's fields: eight per instance."""
    fields: list[str] = []
    for instance in instances:
        tags = _tags(instance)
        status = ec2.InstanceStatus(
            str(instance["InstanceId"]),
            _state(instance),
            client_token_of(instance) or None,
            instance.get("KeyName") or None,
            _reason(instance) or None,
            instance.get("PublicDnsName") or None,
            tags.get(FLEET_TAG) or None,
            tags.get(ANNEX_TAG) or None,
        )
        fields += status.fields()
    return fields


def status_fields(instances: Iterable[Json], instance_id: str) -> list[str]:
    """EC2_VM_STATUS's fields for the instance asked about (none if it is unknown)."""
    fields: list[str] = []
    for instance in instances:
        if instance.get("InstanceId") != instance_id:
            continue
        state = _state(instance)
        fields += [instance_id, state, str(instance.get("ImageId") or ""), null(_reason(instance))]
        if state.lower() == "running":
            groups = [str(group.get("GroupId")) for group in instance.get("SecurityGroups", ())]
            fields += [
                null(instance.get("PublicDnsName")),
                null(instance.get("PrivateDnsName")),
                null(instance.get("KeyName")),
                *(groups or ["NULL"]),
            ]
    return fields


def spot_fields(requests: Iterable[Json]) -> list[str]:
    """EC2_VM_STATUS[_ALL]_SPOT's fields: five per spot instance request.

    HTCondor writes an empty launch group as an empty field; NULL is written here, which
    the grid manager's reader turns back into an empty string.
    """
    fields: list[str] = []
    for request in requests:
        status = ec2.SpotStatus(
            str(request["SpotInstanceRequestId"]),
            str(request.get("State") or ""),
            request.get("LaunchGroup") or None,
            request.get("InstanceId") or None,
            (request.get("Status") or {}).get("Code") or None,
        )
        fields += status.fields()
    return fields


def aws_time(value: object) -> str:
    """A timestamp as EC2 writes it in XML: 2017-01-25T18:37:15.000Z."""
    if isinstance(value, datetime.datetime):
        when = value.astimezone(datetime.UTC) if value.tzinfo is not None else value
        return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    return str(value or "")


def bulk_query_fields(configs: Iterable[Json]) -> list[str]:
    """EC2_BULK_QUERY's fields: three per spot fleet request."""
    fields: list[str] = []
    for config in configs:
        fleet_id = config.get("SpotFleetRequestId")
        if not fleet_id:
            continue
        inner = config.get("SpotFleetRequestConfig") or {}
        fields += [
            str(fleet_id),
            null(aws_time(config.get("CreateTime"))),
            null(inner.get("ClientToken") or config.get("ClientToken")),
        ]
    return fields


def server_type(headers: Mapping[str, str], body: bytes) -> str:
    """What kind of EC2 service answered a DescribeKeyPairs, by HTCondor's rules.

    Amazon says `Server: AmazonEC2` and writes an `<?xml version="1.0" encoding="UTF-8"?>`
    prolog and a `<requestId>`; Nimbus runs on Jetty; Eucalyptus puts everything in
    a `euca:` namespace; OpenStack writes a request id but not Amazon's exact prolog.
    """
    server = ""
    for name, value in headers.items():
        if name.lower() == "server":
            server = value
    amazon = server.startswith("AmazonEC2")
    jetty = server.startswith("Jetty")
    text = body.decode("utf-8", "replace")
    xml_tag = "<?xml " in text
    xml_encoding = '<?xml version="1.0" encoding="UTF-8"?>' in text
    request_id = "<requestId>" in text
    euca = "<euca:Describe" in text
    seen = (amazon, jetty, xml_tag, xml_encoding, request_id, euca)
    return _SERVER_TYPES.get(seen, "Unknown")


_SERVER_TYPES = {
    (True, False, True, True, True, False): "Amazon",
    (False, False, True, False, True, False): "OpenStack",
    # OpenStack Havana dropped the XML prolog.
    (False, False, False, False, True, False): "OpenStack",
    (False, True, True, True, False, False): "Nimbus",
    (False, False, False, False, False, True): "Eucalyptus",
}
