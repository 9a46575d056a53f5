"""What an ec2 job ad asks of the EC2 GAHP: EC2_VM_START's and EC2_VM_START_SPOT's
arguments and the requests that follow a start (tags, elastic IP, EBS volumes), as
ec2job.cpp builds them. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from htgrid.classad import ClassAd
from htgrid.gahp import null
from htgrid.grid._values import as_str

__all__ = ["keypair_name", "post_start_requests", "spot_start_args", "vm_start_args"]

_LIST = re.compile(r"[,\s]+")
# OpenStack allows only these in a keypair name (ec2job.cpp's KEYPAIR_FILTER).
_NOT_IN_KEYPAIR = re.compile(r"[^A-Za-z0-9 _-]")


def _text(ad: ClassAd, name: str) -> str | None:
    return as_str(ad.get(name)) or None


def _words(ad: ClassAd, name: str) -> list[str]:
    return [word for word in _LIST.split(_text(ad, name) or "") if word]


def vm_start_args(
    ad: ClassAd, target: Sequence[str], client_token: str, keypair: str | None
) -> list[str]:
    """EC2_VM_START's arguments after the request id (ec2-gahp-client.cpp's order)."""
    args = [
        *target,
        _text(ad, "EC2AmiID") or "NULL",
        null(keypair),
        null(_text(ad, "EC2UserData")),
        null(_text(ad, "EC2UserDataFile")),
        null(_text(ad, "EC2InstanceType")),
        null(_text(ad, "EC2AvailabilityZone")),
        null(_text(ad, "EC2VpcSubnet")),
        null(_text(ad, "EC2VpcIP")),
        client_token,
        null(_text(ad, "EC2BlockDeviceMapping")),
        null(_text(ad, "EC2IamProfileArn")),
        null(_text(ad, "EC2IamProfileName")),
        "1",
        *_words(ad, "EC2SecurityGroups"),
        "NULL",
        *_words(ad, "EC2SecurityIDs"),
        "NULL",
    ]
    for name in _words(ad, "EC2ParameterNames"):
        value = _text(ad, "EC2Parameter_" + name.replace(".", "_"))
        if value:  # a name without a value is dropped, as HTCondor does
            args += [name, value]
    return [*args, "NULL"]


def spot_start_args(
    ad: ClassAd, target: Sequence[str], client_token: str, keypair: str | None
) -> list[str]:
    """EC2_VM_START_SPOT's arguments after the request id (ec2-gahp-client.cpp's order).

    The client token rides as the request's launch group: RequestSpotInstances has no
    ClientToken, and HTCondor finds a request again by it.
    """
    return [
        *target,
        _text(ad, "EC2AmiID") or "NULL",
        _text(ad, "EC2SpotPrice") or "NULL",
        null(keypair),
        null(_text(ad, "EC2UserData")),
        null(_text(ad, "EC2UserDataFile")),
        null(_text(ad, "EC2InstanceType")),
        null(_text(ad, "EC2AvailabilityZone")),
        null(_text(ad, "EC2VpcSubnet")),
        null(_text(ad, "EC2VpcIP")),
        client_token,
        null(_text(ad, "EC2IamProfileArn")),
        null(_text(ad, "EC2IamProfileName")),
        *_words(ad, "EC2SecurityGroups"),
        "NULL",
        *_words(ad, "EC2SecurityIDs"),
        "NULL",
    ]


def post_start_requests(
    ad: ClassAd, target: Sequence[str], instance_id: str
) -> list[tuple[str, list[str]]]:
    """The requests HTCondor makes once the instance runs (associate_n_attach)."""
    requests: list[tuple[str, list[str]]] = []
    tags = []
    names = _words(ad, "EC2TagNames")
    # condor_submit names the instance after the executable in EC2TagName without
    # listing it in EC2TagNames.
    if "name" not in (name.lower() for name in names):
        names.append("Name")
    for name in names:
        value = _text(ad, "EC2Tag" + name)
        if value is not None:
            tags.append(f"{name}={value}")
    if tags:
        requests.append(("EC2_VM_CREATE_TAGS", [*target, instance_id, *tags, "NULL"]))
    address = _text(ad, "EC2ElasticIP")
    if address:
        requests.append(("EC2_VM_ASSOCIATE_ADDRESS", [*target, instance_id, address]))
    for volume in _words(ad, "EC2ElasticBlockStorageVolumes"):
        volume_id, _, device = volume.partition(":")
        if volume_id and device:
            requests.append(("EC2_VM_ATTACH_VOLUME", [*target, volume_id, instance_id, device]))
    return requests


def keypair_name(ad: ClassAd, fallback: str) -> str:
    """The name of the keypair made for a job: SSH_<pool>_<GlobalJobId> (build_keypair)."""
    job = _text(ad, "GlobalJobId") or fallback
    return _NOT_IN_KEYPAIR.sub("_", f"SSH_htgrid_{job}")
