"""An annex's scale sets on Azure: the body `annex create` and `add` ask for, and Azure's
answer (its VMs, its tags) read in EC2's words, as the annex ads count them."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from typing import Any, Final

from htgrid.annex._errors import AnnexUsageError
from htgrid.annex._spec import AnnexSpec, Instance
from htgrid.annex.azure_runbook import (
    ANNEX_TAG,
    CAPACITY_TAG,
    COMPUTE_API,
    LEASE_TAG,
    RESTORED_TAG,
    Arm,
    Place,
    tag_count,
)

__all__ = ["OWNER_TAG", "SUBNET", "VNET", "annex_sets", "evictions", "instance", "scale_set"]

#: The nodes' network setup makes (a --subnet elsewhere may serve instead).
VNET: Final = "htgrid-annex-vnet"
SUBNET: Final = "nodes"
OWNER_TAG: Final = "htgrid:AnnexOwner"
_ADMIN: Final = "htgrid"


def scale_set(place: Place, region: str, spec: AnnexSpec, user_data: str,
              expiration: float) -> dict[str, Any]:  # fmt: skip
    """The scale set an annex asks for (capacity 0: scaled once its identity has its
    roles), Spot with eviction policy Delete for --slots."""
    tags = {
        ANNEX_TAG: spec.name,
        LEASE_TAG: str(int(expiration)),
        OWNER_TAG: spec.owners[0] if spec.owners else "",
        **dict(spec.tags),
    }
    if spec.project_id:
        tags["htgrid:ProjectId"] = spec.project_id
    subnet = spec.subnet or place.provider(
        f"Microsoft.Network/virtualNetworks/{VNET}/subnets/{SUBNET}"
    )
    profile: dict[str, Any] = {
        "osProfile": {
            "computerNamePrefix": spec.name[:9],
            "adminUsername": _ADMIN,
            "customData": base64.b64encode(user_data.encode()).decode(),
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {
                            "path": f"/home/{_ADMIN}/.ssh/authorized_keys",
                            "keyData": spec.keypair or _no_login_key(),
                        }
                    ]
                },
            },
        },
        "storageProfile": {
            "imageReference": _image(spec.image_for(0)),
            "osDisk": {"createOption": "FromImage", "deleteOption": "Delete"},
        },
        "networkProfile": {
            "networkInterfaceConfigurations": [
                {
                    "name": "nic",
                    "properties": {
                        "primary": True,
                        "deleteOption": "Delete",
                        "ipConfigurations": [
                            {"name": "ip", "properties": {"subnet": {"id": subnet}}}
                        ],
                    },
                }
            ]
        },
    }
    if spec.slots:
        profile["priority"] = "Spot"
        profile["evictionPolicy"] = "Delete"
        profile["billingProfile"] = {"maxPrice": float(spec.spot_price or -1)}
    body: dict[str, Any] = {
        "location": region,
        "tags": tags,
        "sku": {"name": spec.instance_types[0].partition(":")[0], "capacity": 0},
        "properties": {
            "orchestrationMode": "Uniform",
            "upgradePolicy": {"mode": "Manual"},
            "overprovision": False,
            "virtualMachineProfile": profile,
        },
    }
    if spec.join:
        body["identity"] = {"type": "SystemAssigned"}
    return body


def annex_sets(arm: Arm) -> list[tuple[str, Any]]:
    path = arm.place.provider("Microsoft.Compute/virtualMachineScaleSets")
    return [
        (str(tags[ANNEX_TAG]), vmss)
        for vmss in arm.listing(path, COMPUTE_API)
        if ANNEX_TAG in (tags := vmss.get("tags") or {})
    ]


def evictions(vmss: Mapping[str, Any], listed: int) -> tuple[int, int]:
    """(evicted, restored) of a Spot scale set: Azure deletes an evicted VM (policy
    Delete), so its evictions are those the lease timer restored (its tag) and the
    instances short of its target (no Spot VM deletes itself: the timer deletes those
    that stop, lowering the target)."""
    tags = vmss.get("tags") or {}
    if CAPACITY_TAG not in tags:
        return 0, 0
    restored = tag_count(tags, RESTORED_TAG)
    return restored + max(tag_count(tags, CAPACITY_TAG) - listed, 0), restored


_POWER: Final = {
    "running": "running",
    "starting": "pending",
    "stopping": "stopping",
    "stopped": "stopped",
    "deallocating": "shutting-down",
    "deallocated": "terminated",
}


def instance(vm: Mapping[str, Any], size: str) -> Instance:
    """A scale set's VM in EC2's words: pending, running, stopped, shutting-down..."""
    props = vm.get("properties") or {}
    statuses = (props.get("instanceView") or {}).get("statuses") or []
    codes = [str(s.get("code", "")) for s in statuses]
    power = next((c.split("/", 1)[1] for c in codes if c.startswith("PowerState/")), None)
    provisioning = str(props.get("provisioningState", "")).lower()
    if provisioning == "deleting":
        state = "shutting-down"
    elif power is None:
        state = "pending"
    else:
        state = _POWER.get(power, power)
    launched = next((_parseiso(str(s["time"])) for s in statuses if s.get("time")), 0.0)
    return Instance(
        instance_id=str(vm.get("name", "")),
        state=state,
        instance_type=size,
        launched=launched,
        lifecycle="spot" if (props.get("priority") == "Spot") else "on-demand",
        address=None,
    )


def _image(text: str) -> dict[str, str]:
    """An image id, or a URN publisher:offer:sku:version."""
    if text.startswith("/"):
        return {"id": text}
    parts = text.split(":")
    if len(parts) != 4:
        raise AnnexUsageError(
            f"--image-ids {text!r}: an image resource id or publisher:offer:sku:version"
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def _no_login_key() -> str:
    """An SSH key whose private half is thrown away: Azure needs one, nobody logs in."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    raw = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return raw.decode() + " htgrid-annex-no-login"


def _parseiso(text: str) -> float:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
