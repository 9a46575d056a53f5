"""The EC2 GAHP over its pipes, byte for byte, against moto: on-demand instances."""

from __future__ import annotations

import base64
import os
import stat
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from ._proxy import Relay
from ._wire import Wire, ec2_gahp_argv
from .conftest import REGION, all_instances, instance, start_args

EC2_COMMANDS = {
    "EC2_VM_START",
    "EC2_VM_STOP",
    "EC2_VM_STATUS",
    "EC2_VM_STATUS_ALL",
    "EC2_VM_SERVER_TYPE",
    "EC2_VM_CREATE_KEYPAIR",
    "EC2_VM_DESTROY_KEYPAIR",
    "EC2_VM_ASSOCIATE_ADDRESS",
    "EC2_VM_ATTACH_VOLUME",
    "EC2_VM_CREATE_TAGS",
    "EC2_VM_START_SPOT",
    "EC2_VM_STOP_SPOT",
    "EC2_VM_STATUS_SPOT",
    "EC2_VM_STATUS_ALL_SPOT",
    "EC2_BULK_START",
    "EC2_BULK_STOP",
    "EC2_BULK_QUERY",
}


def test_banner_commands_and_statistics(gahp: Wire) -> None:
    assert gahp.banner[0].startswith("$GahpVersion")
    assert gahp.banner[-1] == "$"
    listed = gahp.request("COMMANDS")
    assert listed[0] == "S"
    assert EC2_COMMANDS | {"RESULTS", "QUIT", "VERSION", "ASYNC_MODE_ON", "STATISTICS"} <= set(
        listed[1:]
    )
    # The grid manager's EC2 resource asks this before every poll: S and four numbers.
    stats = gahp.request("STATISTICS")
    assert stats[0] == "S" and len(stats) == 5 and all(n.isdigit() for n in stats[1:])


def test_malformed_requests_get_E(gahp: Wire, target: tuple[str, str, str]) -> None:
    assert gahp.request("EC2_VM_STOP", "1", *target)[0] == "E"  # no instance id
    assert gahp.request("EC2_VM_SERVER_TYPE", "2", *target, "extra")[0] == "E"
    assert gahp.request("EC2_VM_START", "3", *target, "ami-1")[0] == "E"
    assert gahp.request("EC2_NO_SUCH_THING", "4")[0] == "E"
    assert gahp.request("STATISTICS", "x")[0] == "E"


def _network(aws: Any) -> dict[str, str]:
    vpc = aws.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = aws.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24", AvailabilityZone="us-east-1b")
    web = aws.create_security_group(GroupName="web", Description="web", VpcId=vpc)
    ssh = aws.create_security_group(GroupName="ssh", Description="ssh", VpcId=vpc)
    return {
        "vpc": vpc,
        "subnet": subnet["Subnet"]["SubnetId"],
        "web": web["GroupId"],
        "ssh": ssh["GroupId"],
    }


def test_start_with_every_option_reaches_the_instance(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str], tmp_path: Path, moto_url: str
) -> None:
    net = _network(aws)
    aws.create_key_pair(KeyName="alice-key")
    iam = boto3.client("iam", endpoint_url=moto_url, region_name=REGION)
    profile = iam.create_instance_profile(InstanceProfileName="worker-profile")
    profile_arn = profile["InstanceProfile"]["Arn"]
    data_file = tmp_path / "user-data.sh"
    data_file.write_bytes(b"#!/bin/sh\necho from the file\n\xff\n")

    fields = gahp.call(
        "EC2_VM_START",
        *start_args(
            target,
            ami,
            token="0f8fad5b-d9cb-469f-a165-70867728950e",
            keypair="alice-key",
            user_data="role=worker pool=\\cms\n",
            user_data_file=str(data_file),
            instance_type="m5.large",
            zone="us-east-1b",
            subnet=net["subnet"],
            private_ip="10.20.1.17",
            iam_arn=profile_arn,
            groups=("web",),
            group_ids=(net["ssh"],),
            parameters=(("EbsOptimized", "true"), ("Monitoring.Enabled", "true")),
        ),
    )
    assert fields[0] == "0" and len(fields) == 2, fields
    vm = instance(aws, fields[1])
    assert vm["ImageId"] == ami
    assert vm["InstanceType"] == "m5.large"
    assert vm["KeyName"] == "alice-key"
    assert vm["Placement"]["AvailabilityZone"] == "us-east-1b"
    assert vm["SubnetId"] == net["subnet"]
    assert vm["PrivateIpAddress"] == "10.20.1.17"
    assert {g["GroupId"] for g in vm["SecurityGroups"]} == {net["web"], net["ssh"]}
    assert vm["IamInstanceProfile"]["Arn"] == profile_arn
    assert vm["ClientToken"] == "0f8fad5b-d9cb-469f-a165-70867728950e"
    tags = {t["Key"]: t["Value"] for t in vm["Tags"]}
    assert tags["htcondor:ClientToken"] == "0f8fad5b-d9cb-469f-a165-70867728950e"
    # ec2_parameter_* go to RunInstances as raw query parameters.
    assert vm["EbsOptimized"] is True
    assert vm["Monitoring"]["State"] == "enabled"
    # User data then the file, base64-encoded once (by the GAHP), as HTCondor does.
    data = aws.describe_instance_attribute(InstanceId=fields[1], Attribute="userData")
    sent = base64.b64decode(data["UserData"]["Value"])
    assert sent == b"role=worker pool=\\cms\n#!/bin/sh\necho from the file\n\xff\n"
    shutdown = aws.describe_instance_attribute(
        InstanceId=fields[1], Attribute="instanceInitiatedShutdownBehavior"
    )
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


def test_block_device_mapping_goes_out_as_htcondor_sends_it(
    aws: Any, ami: str, keys: tuple[str, str], relay: Relay
) -> None:
    # moto cannot keep ephemeral (VirtualName) mappings: it answers MissingParameter. So
    # check what went over the wire instead of what moto stored.
    with closing(Wire(ec2_gahp_argv())) as gahp:
        target = (relay.url, *keys)
        fields = gahp.call(
            "EC2_VM_START",
            *start_args(
                target,
                ami,
                block_devices="ephemeral0:/dev/sdb, ephemeral1:/dev/sdc bad",
                max_count="3",
            ),
        )
    assert fields[:2] == ["1", "MissingParameter"]
    sent = [query for action, query in relay.requests if action == "RunInstances"][-1]
    assert {k: v for k, v in sent.items() if k.startswith("BlockDeviceMapping")} == {
        "BlockDeviceMapping.1.VirtualName": "ephemeral0",
        "BlockDeviceMapping.1.DeviceName": "/dev/sdb",
        "BlockDeviceMapping.2.VirtualName": "ephemeral1",
        "BlockDeviceMapping.2.DeviceName": "/dev/sdc",
    }
    assert sent["InstanceInitiatedShutdownBehavior"] == "terminate"
    # moto honours MinCount only, so a MaxCount above one is checked here, on the wire.
    assert (sent["MinCount"], sent["MaxCount"]) == ("1", "3")


def test_iam_profile_by_name(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str], moto_url: str
) -> None:
    iam = boto3.client("iam", endpoint_url=moto_url, region_name=REGION)
    arn = iam.create_instance_profile(InstanceProfileName="named")["InstanceProfile"]["Arn"]
    fields = gahp.call("EC2_VM_START", *start_args(target, ami, iam_name="named"))
    assert fields[0] == "0" and len(fields) == 2, fields
    assert instance(aws, fields[1])["IamInstanceProfile"]["Arn"] == arn


def test_tags_come_after_the_start(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    # The grid manager tags a running instance with EC2TagNames (Name = the executable
    # unless the user gave one) through EC2_VM_CREATE_TAGS.
    started = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-tags"))
    vm_id = started[1]
    done = gahp.call(
        "EC2_VM_CREATE_TAGS", *target, vm_id, "Name=/bin/analysis", "project=higgs search", "NULL"
    )
    assert done == ["0"]
    tags = {t["Key"]: t["Value"] for t in instance(aws, vm_id)["Tags"]}
    assert tags == {
        "Name": "/bin/analysis",
        "project": "higgs search",
        "htcondor:ClientToken": "tok-tags",
    }


def test_tags_as_start_parameters_keep_the_client_token_tag(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    params = (
        ("TagSpecification.1.ResourceType", "instance"),
        ("TagSpecification.1.Tag.1.Key", "team"),
        ("TagSpecification.1.Tag.1.Value", "cms"),
    )
    started = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-p", parameters=params))
    tags = {t["Key"]: t["Value"] for t in instance(aws, started[1])["Tags"]}
    assert tags == {"team": "cms", "htcondor:ClientToken": "tok-p"}


def test_status_all_lines_are_eight_fields_per_instance(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    aws.create_key_pair(KeyName="kp")
    first = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-a", keypair="kp"))[1]
    second = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-b"))[1]
    assert gahp.call("EC2_VM_STOP", *target, second) == ["0"]

    fields = gahp.call("EC2_VM_STATUS_ALL", *target)
    assert fields[0] == "0" and (len(fields) - 1) % 8 == 0
    rows = {row[0]: row for row in (fields[i : i + 8] for i in range(1, len(fields), 8))}
    assert set(rows) == {first, second}
    dns = instance(aws, first)["PublicDnsName"]
    assert rows[first] == [first, "running", "tok-a", "kp", "NULL", dns, "NULL", "NULL"]
    assert rows[second][1] == "terminated"
    assert rows[second][2] == "tok-b"
    assert rows[second][3] == "NULL"
    assert rows[second][4] == "Client.UserInitiatedShutdown"


def test_status_all_filter_and_the_single_status(
    gahp: Wire, ami: str, target: tuple[str, str, str]
) -> None:
    mine = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-mine"))[1]
    gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-other"))
    by_token = gahp.call("EC2_VM_STATUS_ALL", *target, "client-token", "tok-mine")
    assert by_token[:4] == ["0", mine, "running", "tok-mine"] and len(by_token) == 9
    by_state = gahp.call("EC2_VM_STATUS_ALL", *target, "instance-state-name", "stopped")
    assert by_state == ["0"]
    unfiltered = gahp.call("EC2_VM_STATUS_ALL", *target, "NULL", "NULL")
    assert len(unfiltered) == 17
    one = gahp.call("EC2_VM_STATUS", *target, mine)
    assert one[:5] == ["0", mine, "running", ami, "NULL"]
    assert gahp.call("EC2_VM_STATUS", *target, "i-00000000000000000") == ["0"]


def test_stop_many_and_stop_unknown(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    ids = [gahp.call("EC2_VM_START", *start_args(target, ami))[1] for _ in range(2)]
    assert gahp.call("EC2_VM_STOP", *target, *ids) == ["0"]
    assert {i["State"]["Name"] for i in all_instances(aws)} == {"terminated"}
    code, error, message = gahp.call("EC2_VM_STOP", *target, "i-0123456789abcdef0")
    # The grid manager searches the message for this code to treat the VM as gone.
    assert (code, error) == ("1", "InvalidInstanceID.NotFound")
    assert message.startswith("InvalidInstanceID.NotFound: ") and "transient" not in message


def test_keypairs(gahp: Wire, aws: Any, target: tuple[str, str, str], tmp_path: Path) -> None:
    key_file = tmp_path / "ssh" / "key.pem"
    key_file.parent.mkdir()
    assert gahp.call("EC2_VM_CREATE_KEYPAIR", *target, "SSH_pool_job1", str(key_file)) == ["0"]
    assert key_file.read_text().startswith("-----BEGIN")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    names = [k["KeyName"] for k in aws.describe_key_pairs()["KeyPairs"]]
    assert names == ["SSH_pool_job1"]
    # The grid manager treats a duplicate as success by finding this code in the message.
    again = gahp.call("EC2_VM_CREATE_KEYPAIR", *target, "SSH_pool_job1", os.devnull)
    assert again[:2] == ["1", "InvalidKeyPair.Duplicate"]
    assert "InvalidKeyPair.Duplicate" in again[2]
    assert gahp.call("EC2_VM_CREATE_KEYPAIR", *target, "to-dev-null", os.devnull) == ["0"]
    unwritable = gahp.call(
        "EC2_VM_CREATE_KEYPAIR", *target, "lost", str(tmp_path / "no" / "dir" / "k.pem")
    )
    assert unwritable[:2] == ["1", "E_FILE_IO"]
    assert gahp.call("EC2_VM_DESTROY_KEYPAIR", *target, "SSH_pool_job1") == ["0"]
    left = {k["KeyName"] for k in aws.describe_key_pairs()["KeyPairs"]}
    assert "SSH_pool_job1" not in left


def test_server_type_is_the_ping(gahp: Wire, target: tuple[str, str, str]) -> None:
    # By HTCondor's own rules moto is not Amazon (no "Server: AmazonEC2", lower-case
    # "utf-8" in the XML prolog, a requestId): it reads as OpenStack, a server whose
    # client tokens the grid manager does not trust (true of moto).
    assert gahp.call("EC2_VM_SERVER_TYPE", *target) == ["0", "OpenStack"]


def test_elastic_ip_and_volume(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    vm_id = gahp.call("EC2_VM_START", *start_args(target, ami, zone="us-east-1a"))[1]
    address = aws.allocate_address(Domain="vpc")
    elastic = f"{address['PublicIp']}:{address['AllocationId']}"
    assert gahp.call("EC2_VM_ASSOCIATE_ADDRESS", *target, vm_id, elastic) == ["0"]
    described = aws.describe_addresses(AllocationIds=[address["AllocationId"]])["Addresses"][0]
    assert described["InstanceId"] == vm_id
    volume = aws.create_volume(Size=8, AvailabilityZone="us-east-1a")["VolumeId"]
    assert gahp.call("EC2_VM_ATTACH_VOLUME", *target, volume, vm_id, "/dev/sdf") == ["0"]
    attached = aws.describe_volumes(VolumeIds=[volume])["Volumes"][0]["Attachments"][0]
    assert (attached["InstanceId"], attached["Device"]) == (vm_id, "/dev/sdf")


def test_results_keep_spaces_and_newlines_escaped(
    gahp: Wire, target: tuple[str, str, str], tmp_path: Path
) -> None:
    missing = tmp_path / "no such dir" / "key"
    fields = gahp.call("EC2_VM_STATUS_ALL", target[0], str(missing), target[2])
    assert fields[:2] == ["1", "E_FILE_IO"]
    assert str(missing) in fields[2]


def test_started_as_the_grid_manager_starts_its_ec2_gahp(
    aws: Any, target: tuple[str, str, str]
) -> None:
    # ec2job.cpp: EC2_GAHP -f <log> -w <min workers> -m <max workers> -d <debug flags>;
    # ec2resource.cpp passes a bare -f.
    argv = [sys.executable, "-m", "htgrid.cli", "gahp", "ec2", "-f", "-w", "1", "-m", "5"]
    with closing(Wire([*argv, "-d", "D_ALWAYS D_FULLDEBUG"])) as gahp:
        assert gahp.banner[-2:] == ["htgrid EC2 GAHP", "$"]
        assert gahp.call("EC2_VM_STATUS_ALL", *target) == ["0"]
        assert gahp.request("ASYNC_MODE_ON") == ["S"]
        assert gahp.request("QUIT") == ["S"]
        assert gahp.process.wait(timeout=10) == 0
