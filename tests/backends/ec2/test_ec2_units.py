"""The EC2 GAHP's pure parts: argument parsing, result formatting, error translation."""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    EndpointConnectionError,
    ParamValidationError,
)

from htgrid.backends.ec2._account import KeyFiles, endpoint_of
from htgrid.backends.ec2._aws import Counters, Spacer, merge_query
from htgrid.backends.ec2._errors import (
    Ec2Error,
    Ec2RequestError,
    Ec2ServiceError,
    Ec2TransportError,
    is_transient,
    translate,
)
from htgrid.backends.ec2._lookup import Batcher
from htgrid.backends.ec2._requests import (
    launch_configuration,
    parse_bulk_start,
    parse_vm_start,
    run_instances_kwargs,
    spot_kwargs,
    status_filters,
    user_data_bytes,
)
from htgrid.backends.ec2._results import (
    aws_time,
    bulk_query_fields,
    server_type,
    spot_fields,
    status_all_fields,
    status_fields,
)
from htgrid.errors import HTGridError
from htgrid.gahp.commands.ec2 import SpotStart, tag_pairs

COMMON = ["https://ec2.us-west-2.amazonaws.com/", "/k/a", "/k/s"]


def vm_start_args(*tail: str, **slots: str) -> list[str]:
    fixed = {
        "ami": "ami-1",
        "keypair": "NULL",
        "ud": "NULL",
        "udf": "NULL",
        "type": "NULL",
        "zone": "NULL",
        "subnet": "NULL",
        "ip": "NULL",
        "token": "NULL",
        "bdm": "NULL",
        "arn": "NULL",
        "name": "NULL",
        "count": "1",
    }
    fixed.update(slots)
    return [*COMMON, *fixed.values(), *tail]


# ---- EC2_VM_START ------------------------------------------------------------------------------


def test_vm_start_lists_follow_htcondor() -> None:
    request = parse_vm_start(
        vm_start_args(
            "web",
            "ssh",
            "NULL",
            "sg-1",
            "NULL",
            "EbsOptimized",
            "true",
            "Odd",
            "NULL",
            token="tok",
            bdm="ephemeral0:/dev/sdb,bad,ephemeral1:/dev/sdc",
            count="2",
        )
    )
    assert request.target.service_url == COMMON[0]
    assert request.spec.security_groups == ("web", "ssh")
    assert request.spec.security_group_ids == ("sg-1",)
    # A value is taken as is, even NULL: "Odd" gets "NULL"; then the list is over.
    assert request.parameters == (("EbsOptimized", "true"), ("Odd", "NULL"))
    assert request.block_devices == (("ephemeral0", "/dev/sdb"), ("ephemeral1", "/dev/sdc"))
    assert request.max_count == 2
    assert request.client_token == "tok"


def test_vm_start_empty_lists_and_lower_case_null() -> None:
    request = parse_vm_start(vm_start_args("null", "Null", "NULL", keypair="null"))
    assert request.spec.keypair is None
    assert request.spec.security_groups == request.spec.security_group_ids == ()
    assert request.parameters == ()


def test_vm_start_bad_count() -> None:
    with pytest.raises(Ec2RequestError) as caught:
        parse_vm_start(vm_start_args("NULL", "NULL", "NULL", count="0"))
    assert caught.value.code == "GAHPERROR"


def test_run_instances_kwargs() -> None:
    request = parse_vm_start(
        vm_start_args(
            "web",
            "NULL",
            "sg-1",
            "NULL",
            "X",
            "1",
            "NULL",
            token="tok",
            type="m5.large",
            zone="us-west-2a",
            subnet="subnet-1",
            ip="10.0.0.5",
            arn="arn:aws:iam::1:instance-profile/p",
            name="p",
            keypair="kp",
        )
    )
    kwargs = run_instances_kwargs(request, b"data")
    assert kwargs == {
        "ImageId": "ami-1",
        "MinCount": 1,
        "MaxCount": 1,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "InstanceType": "m5.large",
        "KeyName": "kp",
        "Placement": {"AvailabilityZone": "us-west-2a"},
        "SubnetId": "subnet-1",
        "IamInstanceProfile": {"Arn": "arn:aws:iam::1:instance-profile/p", "Name": "p"},
        "SecurityGroups": ["web"],
        "SecurityGroupIds": ["sg-1"],
        "PrivateIpAddress": "10.0.0.5",
        "ClientToken": "tok",
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": [{"Key": "htcondor:ClientToken", "Value": "tok"}]}
        ],
        "UserData": b"data",
        "HTGridExtraQuery": {"X": "1"},
    }


def test_user_data_joins_text_and_file() -> None:
    request = parse_vm_start(vm_start_args("NULL", "NULL", "NULL", ud="a b\n"))
    assert user_data_bytes(request.spec, b"\x00file") == b"a b\n\x00file"
    assert user_data_bytes(request.spec, None) == b"a b\n"
    bare = parse_vm_start(vm_start_args("NULL", "NULL", "NULL"))
    assert user_data_bytes(bare.spec, None) is None
    assert user_data_bytes(bare.spec, b"") is None


# ---- spot and fleets ---------------------------------------------------------------------------


def test_spot_start() -> None:
    args = [
        *COMMON,
        "ami-1",
        "0.10",
        "kp",
        "hi",
        "NULL",
        "NULL",
        "us-west-2b",
        "NULL",
        "10.0.0.9",
        "tok",
        "NULL",
        "prof",
        "g1",
        "NULL",
        "sg-2",
        "sg-3",
        "NULL",
    ]
    request = SpotStart.of(args)
    assert (request.spot_price, request.client_token) == ("0.10", "tok")
    kwargs = spot_kwargs(request, b"hi")
    assert kwargs == {
        "SpotPrice": "0.10",
        "InstanceCount": 1,
        "LaunchGroup": "tok",
        "LaunchSpecification": {
            "ImageId": "ami-1",
            "InstanceType": "m1.small",
            "KeyName": "kp",
            "Placement": {"AvailabilityZone": "us-west-2b"},
            "IamInstanceProfile": {"Name": "prof"},
            "SecurityGroups": ["g1"],
            "SecurityGroupIds": ["sg-2", "sg-3"],
            "NetworkInterfaces": [{"PrivateIpAddress": "10.0.0.9"}],
            "UserData": "aGk=",
        },
    }


def test_launch_configuration() -> None:
    spec = launch_configuration(
        '{"ImageId": "ami-1", "InstanceType": "c5.xlarge", "WeightedCapacity": "4",'
        ' "IAMProfileARN": "arn:p", "AvailabilityZone": "us-east-1c", "KeyName": "",'
        ' "Tags": "htcondor:AnnexName=a1, Name=worker node",'
        ' "SecurityGroupNames": "web, ssh", "SecurityGroupIDs": "sg-9",'
        ' "BlockDeviceMapping": "/dev/sda1=snap-1:50:true:gp3, ephemeral0:/dev/sdb"}'
    )
    assert spec == {
        "ImageId": "ami-1",
        "InstanceType": "c5.xlarge",
        "WeightedCapacity": 4.0,
        "IamInstanceProfile": {"Arn": "arn:p"},
        "Placement": {"AvailabilityZone": "us-east-1c"},
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "htcondor:AnnexName", "Value": "a1"},
                    {"Key": "Name", "Value": "worker node"},
                ],
            }
        ],
        "SecurityGroups": [{"GroupName": "web"}, {"GroupName": "ssh"}, {"GroupId": "sg-9"}],
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {
                    "DeleteOnTermination": True,
                    "SnapshotId": "snap-1",
                    "VolumeSize": 50,
                    "VolumeType": "gp3",
                },
            },
            {"VirtualName": "ephemeral0", "DeviceName": "/dev/sdb"},
        ],
    }
    for bad in ("{nope", "[1]"):
        with pytest.raises(Ec2RequestError, match="E_BAD_LAUNCH_CONFIGURATION"):
            launch_configuration(bad)


def test_bulk_start() -> None:
    request = parse_bulk_start(
        [
            *COMMON,
            "tok",
            "NULL",
            "3",
            "role",
            "diversified",
            "2030-01-01T00:00:00Z",
            '{"ImageId": "ami-1"}',
            "NULL",
            '{"ImageId": "ignored"}',
        ]
    )
    assert (request.client_token, request.spot_price, request.target_capacity) == ("tok", None, 3)
    assert request.launch_specs == ({"ImageId": "ami-1"},)
    with pytest.raises(Ec2RequestError):
        parse_bulk_start([*COMMON, "tok", "1", "three", "r", "s", "NULL", "{}", "NULL"])


# ---- the other commands' arguments -------------------------------------------------------------


def test_tags_and_filters() -> None:
    assert tag_pairs(["Name=a=b", "flag", "NULL", "after=x"]) == [("Name", "a=b"), ("flag", "")]
    assert status_filters(COMMON) == []
    assert status_filters([*COMMON, "NULL", "NULL"]) == []
    assert status_filters([*COMMON, "client-token", "t"]) == [
        {"Name": "tag:htcondor:ClientToken", "Values": ["t"]}
    ]
    assert status_filters([*COMMON, "tag-key", "k"]) == [{"Name": "tag-key", "Values": ["k"]}]


def test_endpoints() -> None:
    assert endpoint_of("https://ec2.eu-west-1.amazonaws.com/", "us-east-1") == (
        "https://ec2.eu-west-1.amazonaws.com/",
        "eu-west-1",
    )
    assert endpoint_of("https://ec2.amazonaws.com", "eu-north-1")[1] == "us-east-1"
    assert endpoint_of("http://127.0.0.1:5000", "ap-south-1") == (
        "http://127.0.0.1:5000",
        "ap-south-1",
    )
    assert endpoint_of("euca3s://cloud.example.org:8773/services/Eucalyptus", "x")[0] == (
        "https://cloud.example.org:8773/services/Eucalyptus"
    )
    for bad in ("x509://ec2.example.org", "ftp://x", "no-scheme", "http://"):
        with pytest.raises(Ec2RequestError, match="E_INVALID_SERVICE_URL"):
            endpoint_of(bad, "us-east-1")


def test_key_files_are_reread_when_they_change(tmp_path: Path) -> None:
    access, secret = tmp_path / "a", tmp_path / "s"
    access.write_text(" AKID1 \n")
    secret.write_text("secret1\n")
    keys = KeyFiles("us-east-1")
    account = keys.account("http://localhost:1", str(access), str(secret))
    assert (account.access_key, account.secret_key) == ("AKID1", "secret1")
    assert "secret1" not in repr(account)
    secret.write_text("secret22\n")
    os.utime(secret, ns=(1, 1))
    assert keys.account("http://localhost:1", str(access), str(secret)).secret_key == "secret22"
    role = keys.account("http://localhost:1", "FROM INSTANCE", "FROM INSTANCE")
    assert (role.access_key, role.secret_key) == (None, None)
    (tmp_path / "empty").write_text("\n")
    for path in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(Ec2RequestError, match="E_FILE_IO"):
            keys.read(str(path))


# ---- results -------------------------------------------------------------------------------------


def test_status_all_fields() -> None:
    instances: list[dict[str, Any]] = [
        {
            "InstanceId": "i-1",
            "State": {"Name": "running"},
            "ClientToken": "",
            "KeyName": "kp",
            "StateReason": {"Code": ""},
            "PublicDnsName": "ec2-1.example",
            "Tags": [
                {"Key": "htcondor:ClientToken", "Value": "from-tag"},
                {"Key": "aws:ec2spot:fleet-request-id", "Value": "sfr-1"},
                {"Key": "htcondor:AnnexName", "Value": "annex"},
            ],
        },
        {
            "InstanceId": "i-2",
            "State": {"Name": "terminated"},
            "ClientToken": "tok",
            "StateReason": {"Code": "Server.SpotInstanceTermination"},
        },
    ]
    assert status_all_fields(instances) == [
        "i-1",
        "running",
        "from-tag",
        "kp",
        "NULL",
        "ec2-1.example",
        "sfr-1",
        "annex",
        "i-2",
        "terminated",
        "tok",
        "NULL",
        "Server.SpotInstanceTermination",
        "NULL",
        "NULL",
        "NULL",
    ]
    running = {**instances[0], "ImageId": "ami-1", "SecurityGroups": [{"GroupId": "sg-1"}]}
    assert status_fields([running], "i-1") == [
        "i-1",
        "running",
        "ami-1",
        "NULL",
        "ec2-1.example",
        "NULL",
        "kp",
        "sg-1",
    ]
    assert status_fields([{**instances[1], "ImageId": "ami-2"}], "i-2")[:4] == [
        "i-2",
        "terminated",
        "ami-2",
        "Server.SpotInstanceTermination",
    ]


def test_spot_and_bulk_fields() -> None:
    assert spot_fields(
        [
            {
                "SpotInstanceRequestId": "sir-1",
                "State": "open",
                "Status": {"Code": "pending-evaluation"},
            }
        ]
    ) == ["sir-1", "open", "NULL", "NULL", "pending-evaluation"]
    created = datetime.datetime(2017, 1, 25, 18, 37, 15, 123456, tzinfo=datetime.UTC)
    assert aws_time(created) == "2017-01-25T18:37:15.123Z"
    assert bulk_query_fields(
        [
            {
                "SpotFleetRequestId": "sfr-1",
                "CreateTime": created,
                "SpotFleetRequestConfig": {"ClientToken": "tok"},
            },
            {"SpotFleetRequestId": "sfr-2"},
        ]
    ) == ["sfr-1", "2017-01-25T18:37:15.123Z", "tok", "sfr-2", "NULL", "NULL"]


AMAZON_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeKeyPairsResponse xmlns="http://ec2.'
    b'amazonaws.com/doc/2016-11-15/"><requestId>x</requestId><keySet/></DescribeKeyPairsResponse>'
)


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"server": "AmazonEC2"}, AMAZON_BODY, "Amazon"),
        (
            {"Server": "Werkzeug/3.1, amazon.com"},
            AMAZON_BODY.replace(b"UTF-8", b"utf-8"),
            "OpenStack",
        ),
        ({}, b"<DescribeKeyPairsResponse><requestId>x</requestId>", "OpenStack"),
        ({"server": "Jetty(9.4)"}, AMAZON_BODY.replace(b"<requestId>x</requestId>", b""), "Nimbus"),
        ({}, b"<euca:DescribeKeyPairsResponse/>", "Eucalyptus"),
        ({"server": "AmazonEC2"}, b"{}", "Unknown"),
    ],
)
def test_server_type(headers: Mapping[str, str], body: bytes, expected: str) -> None:
    assert server_type(headers, body) == expected


# ---- errors --------------------------------------------------------------------------------------


def client_error(code: str, status: int, message: str = "m", retries: int = 0) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries},
    }
    return ClientError(response, "RunInstances")


def translated(error: Exception) -> Ec2Error:
    with pytest.raises(Ec2Error) as caught, translate():
        raise error
    assert isinstance(caught.value, HTGridError)
    return caught.value


def test_translation() -> None:
    bad_ami = translated(
        client_error("InvalidAMIID.NotFound", 400, "The image id 'x' does not exist")
    )
    assert isinstance(bad_ami, Ec2ServiceError) and not bad_ami.transient
    assert bad_ami.fields() == (
        "1",
        "InvalidAMIID.NotFound",
        "InvalidAMIID.NotFound: The image id 'x' does not exist",
    )
    throttled = translated(client_error("RequestLimitExceeded", 503, "Slow down", retries=4))
    assert throttled.transient and throttled.attempts == 5
    assert throttled.message == "RequestLimitExceeded: Slow down (transient, 5 attempts)"
    assert translated(client_error("Unsupported", 500)).transient
    assert translated(client_error("InstanceLimitExceeded", 400)).transient
    assert not translated(client_error("UnauthorizedOperation", 403)).transient
    auth = translated(client_error("AuthFailure", 401))
    assert auth.code == "AuthFailure (401)" and auth.message.startswith("AuthFailure: ")
    gone = translated(EndpointConnectionError(endpoint_url="http://x"))
    assert isinstance(gone, Ec2TransportError) and gone.code == "E_CURL_IO"
    assert gone.fields("NEED_CHECK_VM_START")[:2] == ("1", "NEED_CHECK_VM_START")
    assert bad_ami.fields("NEED_CHECK_VM_START")[1] == "InvalidAMIID.NotFound"
    invalid = translated(ParamValidationError(report="bad\nthing"))
    assert invalid.code == "E_INVALID_PARAMETER" and "\n" not in invalid.message
    assert (
        is_transient("Throttling") and is_transient("Whatever", 502) and not is_transient("X", 400)
    )


# ---- plumbing ------------------------------------------------------------------------------------


def test_merge_query_keeps_our_arguments_and_both_tag_sets() -> None:
    body = {
        "Action": "RunInstances",
        "InstanceType": "m5.large",
        "TagSpecification.1.ResourceType": "instance",
        "TagSpecification.1.Tag.1.Key": "htcondor:ClientToken",
    }
    merge_query(
        body,
        {
            "InstanceType": "t2.micro",
            "EbsOptimized": "true",
            "TagSpecification.1.ResourceType": "volume",
            "TagSpecification.2.ResourceType": "instance",
        },
    )
    assert body == {
        "Action": "RunInstances",
        "InstanceType": "m5.large",
        "TagSpecification.3.ResourceType": "instance",
        "TagSpecification.3.Tag.1.Key": "htcondor:ClientToken",
        "EbsOptimized": "true",
        "TagSpecification.1.ResourceType": "volume",
        "TagSpecification.2.ResourceType": "instance",
    }


def test_counters() -> None:
    counters = Counters()
    counters.add("attempts", 3)
    counters.add("calls")
    counters.add("throttled", 2)
    assert counters.statistics() == ["3", "1", "2", "0"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def test_spacer() -> None:
    clock = FakeClock()
    spacer = Spacer(0.1, clock)

    async def main() -> None:
        for _ in range(3):
            await spacer.wait("url", "key")
        await spacer.wait("url", "other key")

    asyncio.run(main())
    assert clock.slept == [0.1, 0.2]


def test_batcher_shares_fetches() -> None:
    fetched: list[list[str]] = []

    async def fetch(keys: Sequence[str]) -> Mapping[str, str]:
        fetched.append(list(keys))
        await asyncio.sleep(0.01)
        return {key: key.upper() for key in keys if key != "none"}

    async def main() -> None:
        batcher: Batcher[str, str] = Batcher()
        first = asyncio.create_task(batcher.find("acct", "a", fetch))
        await asyncio.sleep(0)  # "a" goes out alone
        rest = [asyncio.create_task(batcher.find("acct", key, fetch)) for key in "bcd"]
        none = asyncio.create_task(batcher.find("acct", "none", fetch))
        assert await first == "A"
        assert [await task for task in rest] == ["B", "C", "D"]
        assert await none is None

    asyncio.run(main())
    assert fetched == [["a"], ["b", "c", "d", "none"]]


def test_batcher_passes_errors_to_everyone_waiting() -> None:
    async def fetch(keys: Sequence[str]) -> Mapping[str, str]:
        await asyncio.sleep(0)
        raise Ec2TransportError("down")

    async def main() -> None:
        batcher: Batcher[str, str] = Batcher()
        tasks = [asyncio.create_task(batcher.find("acct", key, fetch)) for key in "ab"]
        for task in tasks:
            with pytest.raises(Ec2TransportError):
                await task

    asyncio.run(main())
