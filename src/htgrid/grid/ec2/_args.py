"""What an ec2 job ad asks of the EC2 GAHP: its EC2_VM_START or EC2_VM_START_SPOT (the
values of `htgrid.gahp.commands.ec2`, which lays out their arguments) and the requests
that follow a start (tags, elastic IP, EBS volumes), as ec2job.cpp builds them. Pure.
"""

from __future__ import annotations

import re

from htgrid.classad import ClassAd
from htgrid.gahp.commands import Spec, ec2
from htgrid.grid._values import as_str

__all__ = ["keypair_name", "post_start_requests", "spot_start", "vm_start"]

_LIST = re.compile(r"[,\s]+")
# OpenStack allows only these in a keypair name (ec2job.cpp's KEYPAIR_FILTER).
_NOT_IN_KEYPAIR = re.compile(r"[^A-Za-z0-9 _-]")


def _text(ad: ClassAd, name: str) -> str | None:
    return as_str(ad.get(name)) or None


def _words(ad: ClassAd, name: str) -> list[str]:
    return [word for word in _LIST.split(_text(ad, name) or "") if word]


def _spec(ad: ClassAd, keypair: str | None) -> ec2.LaunchSpec:
    """What the instance is started from, as both kinds of start send it."""
    return ec2.LaunchSpec(
        ami=_text(ad, "EC2AmiID") or "NULL",
        keypair=keypair,
        user_data=_text(ad, "EC2UserData"),
        user_data_file=_text(ad, "EC2UserDataFile"),
        instance_type=_text(ad, "EC2InstanceType"),
        availability_zone=_text(ad, "EC2AvailabilityZone"),
        subnet=_text(ad, "EC2VpcSubnet"),
        private_ip=_text(ad, "EC2VpcIP"),
        iam_profile_arn=_text(ad, "EC2IamProfileArn"),
        iam_profile_name=_text(ad, "EC2IamProfileName"),
        security_groups=tuple(_words(ad, "EC2SecurityGroups")),
        security_group_ids=tuple(_words(ad, "EC2SecurityIDs")),
    )


def vm_start(
    ad: ClassAd, target: ec2.Target, client_token: str, keypair: str | None
) -> ec2.VmStart:
    """The job's EC2_VM_START (ec2-gahp-client.cpp's arguments)."""
    parameters = []
    for name in _words(ad, "EC2ParameterNames"):
        value = _text(ad, "EC2Parameter_" + name.replace(".", "_"))
        if value:  # a name without a value is dropped, as HTCondor does
            parameters.append((name, value))
    return ec2.VmStart(
        target,
        _spec(ad, keypair),
        client_token,
        block_device_mapping=_text(ad, "EC2BlockDeviceMapping"),
        parameters=tuple(parameters),
    )


def spot_start(
    ad: ClassAd, target: ec2.Target, client_token: str, keypair: str | None
) -> ec2.SpotStart:
    """The job's EC2_VM_START_SPOT: its client token rides as the request's launch group
    (RequestSpotInstances has no ClientToken, and HTCondor finds a request again by it)."""
    spot_price = _text(ad, "EC2SpotPrice") or "NULL"
    return ec2.SpotStart(target, _spec(ad, keypair), spot_price, client_token)


def post_start_requests(
    ad: ClassAd, target: ec2.Target, instance_id: str
) -> list[tuple[Spec, tuple[str, ...]]]:
    """The requests HTCondor makes once the instance runs (associate_n_attach)."""
    requests: list[tuple[Spec, tuple[str, ...]]] = []
    tags = []
    names = _words(ad, "EC2TagNames")
    # condor_submit names the instance after the executable in EC2TagName without
    # listing it in EC2TagNames.
    if "name" not in (name.lower() for name in names):
        names.append("Name")
    for name in names:
        value = _text(ad, "EC2Tag" + name)
        if value is not None:
            tags.append((name, value))
    if tags:
        requests.append(
            (ec2.VM_CREATE_TAGS, ec2.CreateTags(target, instance_id, tuple(tags)).args())
        )
    address = _text(ad, "EC2ElasticIP")
    if address:
        requests.append((ec2.VM_ASSOCIATE_ADDRESS, (*target.args(), instance_id, address)))
    for volume in _words(ad, "EC2ElasticBlockStorageVolumes"):
        volume_id, _, device = volume.partition(":")
        if volume_id and device:
            args = (*target.args(), volume_id, instance_id, device)
            requests.append((ec2.VM_ATTACH_VOLUME, args))
    return requests


def keypair_name(ad: ClassAd, fallback: str) -> str:
    """The name of the keypair made for a job: SSH_<pool>_<GlobalJobId> (build_keypair)."""
    job = _text(ad, "GlobalJobId") or fallback
    return _NOT_IN_KEYPAIR.sub("_", f"SSH_htgrid_{job}")
