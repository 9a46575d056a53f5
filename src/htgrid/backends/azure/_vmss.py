"""AZURE_VMSS_CREATE, _DELETE, _SCALE, _START, _STOP and _RESTART (worker threads).

A scale set N is placed like a VM N (see _vm) and gets, tagged `htgrid-owner=N`, `N-vnet`
unless `vnetName=` names one; its instances have no public IPs (HTCondor's server put a
load balancer in front; a pool's execute nodes only need to reach out). With `schedule=`
it gets an expiry autoscale setting, with `keyvaultName=` a managed identity and a boot
script that fetches the secret (see _expiry and _keyvault). Either makes creation staged:
capacity 0 first, the lease and the vault access installed, then `nodecount`.
"""

from __future__ import annotations

import datetime
from typing import Any

from htgrid.backends.azure._args import (
    OWNER_TAG,
    ScaleRequest,
    Target,
    VmssSpec,
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
    quietly,
)
from htgrid.backends.azure._errors import AzureArgumentError, AzureServiceError
from htgrid.backends.azure._expiry import (
    AUTOSCALE_API,
    autoscale_id,
    expiry_tag,
    install_scale_set_expiry,
)
from htgrid.backends.azure._keyvault import (
    VAULT_TAG,
    fetch_extension,
    fetch_script,
    grant_secret_read,
    prepare_vault,
    revoke_secret_read,
    vault_uri,
)
from htgrid.backends.azure._session import Session
from htgrid.backends.azure._vm import data_disks, image_from_vhd, os_profile, subnet_for

__all__ = ["create_vmss", "delete_vmss", "power_vmss", "scale_vmss", "vmss_body"]

POWER_ACTIONS = ("start", "deallocate", "restart")


def vmss_body(
    spec: VmssSpec,
    subnet_id: str,
    key_text: str | None,
    capacity: int,
    *,
    image_id: str | None = None,
    extension: dict[str, Any] | None = None,
    vault_ref: str | None = None,
) -> dict[str, Any]:
    """The scale set's PUT body (Uniform orchestration, manual upgrades)."""
    vm = spec.vm
    tags = dict(vm.tags)
    tags[OWNER_TAG] = vm.name
    if vm.expiry is not None:
        tags.update(expiry_tag(vm.expiry))
    if vault_ref is not None:
        tags[VAULT_TAG] = vault_ref
    profile: dict[str, Any] = {
        "osProfile": os_profile(vm, key_text, scale_set=True),
        "storageProfile": {
            "imageReference": vm.image.reference(image_id),
            "osDisk": {"createOption": "FromImage", "caching": "ReadWrite"},
            "dataDisks": data_disks(vm, named=False),
        },
        "networkProfile": {
            "networkInterfaceConfigurations": [
                {
                    "name": f"{vm.name}-nic",
                    "properties": {
                        "primary": True,
                        "ipConfigurations": [
                            {"name": "ipconfig1", "properties": {"subnet": {"id": subnet_id}}}
                        ],
                    },
                }
            ]
        },
    }
    if extension is not None:
        profile["extensionProfile"] = {"extensions": [extension]}
    body: dict[str, Any] = {
        "location": vm.location,
        "tags": tags,
        "sku": {"name": vm.size, "tier": "Standard", "capacity": capacity},
        "properties": {
            "orchestrationMode": "Uniform",
            "upgradePolicy": {"mode": "Manual"},
            "overprovision": False,
            "virtualMachineProfile": profile,
        },
    }
    if extension is not None:
        body["identity"] = {"type": "SystemAssigned"}
    return body


def create_vmss(session: Session, spec: VmssSpec, now: datetime.datetime) -> None:
    """Create the scale set; with an expiry or a vault secret, in stages (see the module)."""
    vm = spec.vm
    if vm.expiry is not None and vm.expiry <= now:
        raise AzureArgumentError(f"schedule {vm.expiry:%Y-%m-%d %H:%M} UTC is in the past")
    key_text = read_text_or_file(vm.admin_key) if vm.admin_key else None
    vmss_body(spec, "", key_text, 0)  # a bad key or custom data fails before any call
    placement = place(session, vm.name, vm.resource_group)
    group = placement.group
    sets = session.compute.virtual_machine_scale_sets
    existed = get_or_none(sets.get, group, vm.name) is not None
    ensure_group(session, placement, vm.location, vm.name)
    staged = spec.key_vault is not None or vm.expiry is not None
    try:
        subnet_id = subnet_for(session, vm, group)
        image_id = image_from_vhd(session, vm, group)
        extension = vault = vault_ref = None
        if spec.key_vault is not None:
            vault = prepare_vault(session, spec.key_vault, group, vm.location, vm.name)
            script = fetch_script(
                vault_uri(vault), spec.key_vault.secret, spec.key_vault.destination
            )
            extension = fetch_extension(script)
            vault_ref = f"{spec.key_vault.resource_group or group}/{spec.key_vault.vault}"
        body = vmss_body(
            spec,
            subnet_id,
            key_text,
            0 if staged else spec.node_count,
            image_id=image_id,
            extension=extension,
            vault_ref=vault_ref,
        )
        created = sets.begin_create_or_update(group, vm.name, body).result()
        if vault is not None:
            principal = dig(created, "identity", "principalId")
            if not principal:
                raise AzureServiceError("the scale set got no managed identity", code="NoIdentity")
            tenant = dig(created, "identity", "tenantId") or session.settings.tenant_id
            grant_secret_read(session, str(vault["id"]), str(tenant), str(principal))
        if vm.expiry is not None:
            install_scale_set_expiry(
                session, group, vm.name, str(created["id"]), vm.location, vm.expiry
            )
        if staged and spec.node_count:
            sets.begin_update(group, vm.name, {"sku": {"capacity": spec.node_count}}).result()
    except Exception:
        if not existed:
            quietly("roll back", lambda: delete_vmss(session, Target(vm.name, group)))
        raise


def delete_vmss(session: Session, target: Target) -> None:
    """Delete the scale set, its expiry setting, its vault access and what it owned."""
    name = target.name
    group = group_of(session, name, target.resource_group)
    sets = session.compute.virtual_machine_scale_sets
    resources = session.resource.resources
    found = False
    setting_id = autoscale_id(session, group, name)
    setting = get_or_none(resources.get_by_id, setting_id, api_version=AUTOSCALE_API)
    if setting is not None and owned_by(setting, name):
        # First, so Azure Monitor never acts on a half-deleted scale set.
        found = True
        resources.begin_delete_by_id(setting_id, api_version=AUTOSCALE_API).result()
    vmss = get_or_none(sets.get, group, name)
    if vmss is not None:
        found = True
        vault_ref = (dig(vmss, "tags") or {}).get(VAULT_TAG)
        principal = dig(vmss, "identity", "principalId")
        if vault_ref and principal:
            tenant = dig(vmss, "identity", "tenantId") or session.settings.tenant_id
            revoke_secret_read(session, str(vault_ref), str(tenant), str(principal))
        sets.begin_delete(group, name).result()
    image = get_or_none(session.compute.images.get, group, f"{name}-image")
    if image is not None and owned_by(image, name):
        found = True
        session.compute.images.begin_delete(group, f"{name}-image").result()
    vnet = get_or_none(session.network.virtual_networks.get, group, f"{name}-vnet")
    if vnet is not None and owned_by(vnet, name):
        found = True
        session.network.virtual_networks.begin_delete(group, f"{name}-vnet").result()
    found = delete_group_if_owned(session, group, name) or found
    if not found:
        raise AzureServiceError(
            f"Virtual machine scale set '{name}' in resource group '{group}' could not be found.",
            code="ResourceNotFound",
            status=404,
        )


def scale_vmss(session: Session, request: ScaleRequest) -> None:
    """Set the scale set's instance count (a PATCH of `sku.capacity`)."""
    target = request.target
    group = group_of(session, target.name, target.resource_group)
    session.compute.virtual_machine_scale_sets.begin_update(
        group, target.name, {"sku": {"capacity": request.node_count}}
    ).result()


def power_vmss(session: Session, target: Target, action: str) -> None:
    """Start, deallocate (AZURE_VMSS_STOP) or restart every instance."""
    if action not in POWER_ACTIONS:
        raise ValueError(action)
    group = group_of(session, target.name, target.resource_group)
    sets = session.compute.virtual_machine_scale_sets
    getattr(sets, f"begin_{action}")(group, target.name).result()
