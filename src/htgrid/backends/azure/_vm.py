"""AZURE_PING, AZURE_VM_CREATE, AZURE_VM_DELETE and AZURE_VM_LIST against ARM (worker threads).

A VM named N lives in the request's `resourceGroup=`, else the auth file's
`resource_group`, else a group named N made for it (HTCondor's layout). Next to it the
GAHP makes, each tagged `htgrid-owner=N`: `N-vnet` (unless `vnetName=` names one),
`N-ip` (unless `publicIPAddress=` names one or says `none`), `N-nic`, and through the VM
the disks `N-osdisk` and `N-data<i>`. Deleting N removes exactly those (the VM's NIC and
disks are also marked `deleteOption: Delete`, so Azure removes them with the VM even if
the GAHP dies half-way), its auto-shutdown schedule, and its own group.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from typing import Any

from htgrid.backends.azure._args import (
    OWNER_TAG,
    ListQuery,
    Target,
    VmSpec,
    custom_data_b64,
    looks_like_ssh_key,
    read_text_or_file,
)
from htgrid.backends.azure._arm import (
    delete_group_if_owned,
    dig,
    ensure_group,
    get_or_none,
    group_of,
    owned_by,
    place,
    provider_id,
    quietly,
    split_id,
)
from htgrid.backends.azure._errors import AzureArgumentError, AzureServiceError
from htgrid.backends.azure._expiry import (
    SCHEDULE_API,
    check_vm_expiry,
    expiry_tag,
    install_vm_shutdown,
    schedule_id,
)
from htgrid.backends.azure._session import Session

__all__ = [
    "create_vm",
    "data_disks",
    "delete_vm",
    "image_from_vhd",
    "list_vms",
    "os_profile",
    "ping",
    "status_of",
    "subnet_for",
    "vm_body",
]

VNET_PREFIX = "10.0.0.0/16"
SUBNET_PREFIX = "10.0.0.0/24"


def ping(session: Session) -> None:
    """One cheap authenticated call: the first page of resource groups, one of them."""
    next(iter(session.resource.resource_groups.list(top=1)), None)


# ---- request bodies (pure) -----------------------------------------------------------------


def os_profile(spec: VmSpec, key_text: str | None, *, scale_set: bool) -> dict[str, Any]:
    """`osProfile`: the admin account, its SSH key (or password), the custom data."""
    if not key_text:
        raise AzureArgumentError("an admin key (key= or adminSshKey=) is required")
    profile: dict[str, Any] = {"adminUsername": spec.admin_username}
    if scale_set:
        limit = 9 if spec.os_type == "Windows" else 50
        profile["computerNamePrefix"] = spec.name[:limit]
    else:
        profile["computerName"] = spec.name[:15] if spec.os_type == "Windows" else spec.name
    key_text = key_text.strip()
    if looks_like_ssh_key(key_text) and spec.os_type == "Linux":
        profile["linuxConfiguration"] = {
            "disablePasswordAuthentication": True,
            "ssh": {
                "publicKeys": [
                    {
                        "path": f"/home/{spec.admin_username}/.ssh/authorized_keys",
                        "keyData": key_text,
                    }
                ]
            },
        }
    else:
        # HTCondor's rule: a key that is not an SSH public key is the admin password.
        profile["adminPassword"] = key_text
    if spec.custom_data:
        profile["customData"] = custom_data_b64(spec.custom_data)
    return profile


def data_disks(spec: VmSpec, *, named: bool) -> list[dict[str, Any]]:
    """Empty managed data disks, deleted with their VM."""
    disks = []
    for lun, size in enumerate(spec.data_disks):
        disk: dict[str, Any] = {"lun": lun, "diskSizeGB": size, "createOption": "Empty"}
        if named:
            disk["name"] = f"{spec.name}-data{lun}"
            disk["deleteOption"] = "Delete"
        disks.append(disk)
    return disks


def vm_body(
    spec: VmSpec, nic_id: str, key_text: str | None, image_id: str | None = None
) -> dict[str, Any]:
    """The VM's PUT body."""
    tags = dict(spec.tags)
    tags[OWNER_TAG] = spec.name
    if spec.expiry is not None:
        tags.update(expiry_tag(spec.expiry))
    return {
        "location": spec.location,
        "tags": tags,
        "properties": {
            "hardwareProfile": {"vmSize": spec.size},
            "storageProfile": {
                "imageReference": spec.image.reference(image_id),
                "osDisk": {
                    "name": f"{spec.name}-osdisk",
                    "createOption": "FromImage",
                    "caching": "ReadWrite",
                    "deleteOption": "Delete",
                },
                "dataDisks": data_disks(spec, named=True),
            },
            "osProfile": os_profile(spec, key_text, scale_set=False),
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
                ]
            },
        },
    }


def _owned(name: str, location: str, **body: Any) -> dict[str, Any]:
    return {"location": location, "tags": {OWNER_TAG: name}, **body}


# ---- create ----------------------------------------------------------------------------------


def subnet_for(session: Session, spec: VmSpec, group: str) -> str:
    """The subnet to use: the named VNet's, or that of a new VNet owned by the VM."""
    network = session.network.virtual_networks
    if spec.vnet is None:
        vnet = network.begin_create_or_update(
            group,
            f"{spec.name}-vnet",
            _owned(
                spec.name,
                spec.location,
                properties={
                    "addressSpace": {"addressPrefixes": [VNET_PREFIX]},
                    "subnets": [
                        {"name": "default", "properties": {"addressPrefix": SUBNET_PREFIX}}
                    ],
                },
            ),
        ).result()
        return str(vnet["properties"]["subnets"][0]["id"])
    if spec.vnet.lower().startswith("/subscriptions/"):
        vnet_group, vnet_name = split_id(spec.vnet)
    else:
        vnet_group, vnet_name = spec.vnet_resource_group or group, spec.vnet
    vnet = network.get(vnet_group, vnet_name)
    subnets = dig(vnet, "properties", "subnets") or []
    for subnet in subnets:
        if spec.subnet is None or str(subnet.get("name", "")).lower() == spec.subnet.lower():
            return str(subnet["id"])
    wanted = f"subnet '{spec.subnet}'" if spec.subnet else "a subnet"
    raise AzureServiceError(
        f"virtual network '{vnet_name}' has no {wanted}", code="SubnetNotFound", status=404
    )


def public_ip_for(session: Session, spec: VmSpec, group: str) -> tuple[str | None, str | None]:
    """The public IP's id and address: a new Standard static one, the named one, or none."""
    if spec.public_ip == "none":
        return None, None
    addresses = session.network.public_ip_addresses
    if spec.public_ip == "create":
        # Basic-sku dynamic addresses are retired; Standard ones must be static.
        ip = addresses.begin_create_or_update(
            group,
            f"{spec.name}-ip",
            _owned(
                spec.name,
                spec.location,
                sku={"name": "Standard"},
                properties={"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"},
            ),
        ).result()
    else:
        ip_group, ip_name = split_id(spec.public_ip)
        ip = addresses.get(ip_group, ip_name)
    return str(ip["id"]), dig(ip, "properties", "ipAddress")


def create_vm(session: Session, spec: VmSpec, now: datetime.datetime) -> tuple[str, str | None]:
    """Create the VM and what it needs; return its vmId and public IP address (or None)."""
    if spec.expiry is not None:
        check_vm_expiry(spec.expiry, now)
    key_text = read_text_or_file(spec.admin_key) if spec.admin_key else None
    # Build the body first: a bad key or custom data fails before anything is created.
    vm_body(spec, "", key_text)
    placement = place(session, spec.name, spec.resource_group)
    group = placement.group
    existed = get_or_none(session.compute.virtual_machines.get, group, spec.name) is not None
    ensure_group(session, placement, spec.location, spec.name)
    try:
        subnet_id = subnet_for(session, spec, group)
        ip_id, address = public_ip_for(session, spec, group)
        config: dict[str, Any] = {
            "subnet": {"id": subnet_id},
            "privateIPAllocationMethod": "Dynamic",
        }
        if ip_id is not None:
            config["publicIPAddress"] = {"id": ip_id}
        nic = session.network.network_interfaces.begin_create_or_update(
            group,
            f"{spec.name}-nic",
            _owned(
                spec.name,
                spec.location,
                properties={"ipConfigurations": [{"name": "ipconfig1", "properties": config}]},
            ),
        ).result()
        image_id = image_from_vhd(session, spec, group)
        vm = session.compute.virtual_machines.begin_create_or_update(
            group, spec.name, vm_body(spec, str(nic["id"]), key_text, image_id)
        ).result()
        if image_id is not None:
            # Only the VM's disk needs the image; HTCondor's server deletes it too.
            session.compute.images.begin_delete(group, f"{spec.name}-image").result()
        if spec.expiry is not None:
            install_vm_shutdown(session, group, spec.name, vm["id"], spec.location, spec.expiry)
    except Exception:
        if not existed:
            # Leave nothing behind: the grid manager holds the job and forgets the VM.
            quietly("roll back", lambda: delete_vm(session, Target(spec.name, group)))
        raise
    if ip_id is not None and address is None:
        address = dig(
            session.network.public_ip_addresses.get(*split_id(ip_id)), "properties", "ipAddress"
        )
    return str(dig(vm, "properties", "vmId")), address


def image_from_vhd(session: Session, spec: VmSpec, group: str) -> str | None:
    if spec.image.vhd_uri is None:
        return None
    image = session.compute.images.begin_create_or_update(
        group,
        f"{spec.name}-image",
        _owned(
            spec.name,
            spec.location,
            properties={
                "storageProfile": {
                    "osDisk": {
                        "osType": spec.os_type,
                        "osState": "Generalized",
                        "blobUri": spec.image.vhd_uri,
                        "caching": "ReadWrite",
                    }
                }
            },
        ),
    ).result()
    return str(image["id"])


# ---- delete ----------------------------------------------------------------------------------

_DISK_NAME = r"{name}-(osdisk|data\d+)"


def delete_vm(session: Session, target: Target) -> None:
    """Delete the VM and everything the GAHP made for it; ResourceNotFound if none was left."""
    name = target.name
    group = group_of(session, name, target.resource_group)
    compute, network = session.compute, session.network
    found = False
    vm = get_or_none(compute.virtual_machines.get, group, name)
    nic_ids = [provider_id(session, group, f"Microsoft.Network/networkInterfaces/{name}-nic")]
    disk_ids: list[str] = []
    if vm is not None:
        found = True
        nic_ids += [
            ref["id"] for ref in dig(vm, "properties", "networkProfile", "networkInterfaces") or []
        ]
        storage = dig(vm, "properties", "storageProfile") or {}
        disks = [storage.get("osDisk") or {}, *(storage.get("dataDisks") or [])]
        disk_ids += [
            disk["managedDisk"]["id"]
            for disk in disks
            if disk.get("createOption") != "Attach" and dig(disk, "managedDisk", "id")
        ]
        compute.virtual_machines.begin_delete(group, name).result()
    else:
        pattern = re.compile(_DISK_NAME.format(name=re.escape(name)), re.I)
        if get_or_none(session.resource.resource_groups.get, group) is not None:
            disk_ids += [
                disk["id"]
                for disk in compute.disks.list_by_resource_group(group)
                if pattern.fullmatch(str(disk.get("name"))) and not disk.get("managedBy")
            ]
    schedules = session.resource.resources
    get_or_none(
        lambda: schedules.begin_delete_by_id(
            schedule_id(session, group, name), api_version=SCHEDULE_API
        ).result()
    )
    ip_ids = [provider_id(session, group, f"Microsoft.Network/publicIPAddresses/{name}-ip")]
    for nic_id in _unique(nic_ids):
        nic = get_or_none(network.network_interfaces.get, *split_id(nic_id))
        if nic is None or not owned_by(nic, name):
            continue
        found = True
        for config in dig(nic, "properties", "ipConfigurations") or []:
            ip_ref = dig(config, "properties", "publicIPAddress", "id")
            if ip_ref:
                ip_ids.append(ip_ref)
        network.network_interfaces.begin_delete(*split_id(nic_id)).result()
    for ip_id in _unique(ip_ids):
        ip = get_or_none(network.public_ip_addresses.get, *split_id(ip_id))
        if ip is not None and owned_by(ip, name):
            found = True
            network.public_ip_addresses.begin_delete(*split_id(ip_id)).result()
    for disk_id in _unique(disk_ids):
        # Normally gone with the VM (deleteOption); a detached leftover is deleted here.
        disk = get_or_none(compute.disks.get, *split_id(disk_id))
        if disk is not None and not disk.get("managedBy"):
            found = True
            compute.disks.begin_delete(*split_id(disk_id)).result()
    vnet = get_or_none(network.virtual_networks.get, group, f"{name}-vnet")
    if vnet is not None and owned_by(vnet, name):
        found = True
        network.virtual_networks.begin_delete(group, f"{name}-vnet").result()
    found = delete_group_if_owned(session, group, name) or found
    if not found:
        # The grid manager treats "could not be found" as "already deleted".
        raise AzureServiceError(
            f"Virtual machine '{name}' in resource group '{group}' could not be found.",
            code="ResourceNotFound",
            status=404,
        )


def _unique(ids: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for resource_id in ids:
        seen.setdefault(resource_id.lower(), resource_id)
    return list(seen.values())


# ---- list ------------------------------------------------------------------------------------


def status_of(vm: Any) -> str:
    """The VM's status codes joined by commas: `ProvisioningState/succeeded,PowerState/running`."""
    statuses = dig(vm, "properties", "instanceView", "statuses") or []
    codes = [str(status["code"]) for status in statuses if status.get("code")]
    if not codes:
        state = dig(vm, "properties", "provisioningState") or "unknown"
        codes = [f"ProvisioningState/{str(state).lower()}"]
    return ",".join(codes)


def _tags_match(vm: Any, wanted: Sequence[tuple[str, str | None]]) -> bool:
    tags = dig(vm, "tags") or {}
    return all(name in tags and (value is None or tags[name] == value) for name, value in wanted)


def list_vms(session: Session, query: ListQuery) -> list[tuple[str, str]]:
    """(name, status) of the VMs asked for, from ONE list call (however many VMs)."""
    compute = session.compute.virtual_machines
    if query.name is not None:
        group = group_of(session, query.name, query.resource_group)
        vm = get_or_none(compute.get, group, query.name, expand="instanceView")
        vms: Iterable[Any] = [vm] if vm is not None else []
    elif query.resource_group is not None:
        vms = compute.list(query.resource_group, expand="instanceView")
    else:
        # The whole subscription: VMs may sit in many groups (one per VM by default).
        vms = compute.list_all(expand="instanceView")
    return [(str(vm["name"]), status_of(vm)) for vm in vms if _tags_match(vm, query.tags)]
