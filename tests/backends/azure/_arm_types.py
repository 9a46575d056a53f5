"""The fake ARM's resource types: what each PUT must carry, what ARM adds, what DELETE cascades.

Only the types the Azure GAHP uses exist; each checks the references a real Azure checks
(a NIC's subnet and public IP, a VM's NICs, a schedule's VM, an autoscale setting's scale
set) and refuses deletions a real Azure refuses (a NIC still attached, a subnet in use).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import itertools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

VM = "microsoft.compute/virtualmachines"
VMSS = "microsoft.compute/virtualmachinescalesets"
DISK = "microsoft.compute/disks"
IMAGE = "microsoft.compute/images"
VNET = "microsoft.network/virtualnetworks"
PIP = "microsoft.network/publicipaddresses"
NIC = "microsoft.network/networkinterfaces"
VAULT = "microsoft.keyvault/vaults"
SECRET = "microsoft.keyvault/vaults/secrets"
SCHEDULE = "microsoft.devtestlab/schedules"
AUTOSCALE = "microsoft.insights/autoscalesettings"

#: Types whose PUT and DELETE are long-running operations (Azure-AsyncOperation).
ASYNC_TYPES = frozenset({VM, VMSS, DISK, IMAGE, VNET, PIP, NIC})
#: Types that are no tracked resources: their PUT names no location.
NO_LOCATION: set[str] = {SECRET}
#: Types that can be listed by resource group (and VMs by subscription).
LISTABLE = frozenset({VM, VMSS, DISK, VNET, PIP, NIC, VAULT})


class ArmError(Exception):
    """An ARM error response."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Res:
    """One stored resource."""

    id: str
    rtype: str
    group: str
    body: dict[str, Any]
    power: str = "running"


def key(resource_id: str) -> str:
    return resource_id.lower()


def need(condition: object, message: str, code: str = "InvalidRequestContent") -> None:
    if not condition:
        raise ArmError(400, code, message)


def dig(body: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(body, dict):
            return None
        body = body.get(part)
    return body


class Store:
    """Resource groups, resources and Key Vault secret values."""

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self.groups: dict[str, dict[str, Any]] = {}
        self.resources: dict[str, Res] = {}
        self.secret_values: dict[str, str] = {}
        self._ips = itertools.count(4)
        self.tenant = "tenant"
        # The annex's parts (_arm_annex): runbook contents, scale-set instances, the
        # vaults' data plane, and the principals that are users, not managed identities.
        self.drafts: dict[str, str] = {}
        self.published: dict[str, str] = {}
        self.instances: dict[str, list[dict[str, Any]]] = {}
        self.next_instance: dict[str, int] = {}
        self.vault_secrets: dict[str, dict[str, dict[str, Any]]] = {}
        self.deleted_secrets: dict[str, dict[str, dict[str, Any]]] = {}
        self.users: set[str] = set()
        # Function apps' deployed packages (_arm_web), by app name.
        self.deployed: dict[str, bytes] = {}
        # Azure RBAC (_arm_rbac): custom role definitions by guid, assignments by id.
        self.role_definitions: dict[str, dict[str, Any]] = {}
        self.role_assignments: dict[str, dict[str, Any]] = {}
        self.on_remove: dict[str, Callable[[Store, Res], None]] = {}

    def get(self, resource_id: str) -> Res | None:
        return self.resources.get(key(resource_id))

    def of_type(self, rtype: str, group: str | None = None) -> list[Res]:
        return [
            res
            for res in self.resources.values()
            if res.rtype == rtype and (group is None or res.group == group.lower())
        ]

    def names(self, rtype: str) -> list[str]:
        return sorted(res.body["name"] for res in self.of_type(rtype))

    def must(self, resource_id: Any, what: str) -> Res:
        res = self.get(resource_id) if isinstance(resource_id, str) else None
        if res is None:
            raise ArmError(
                400, "InvalidResourceReference", f"{what} {resource_id!r} was not found."
            )
        return res

    def next_ip(self) -> int:
        return next(self._ips)

    # ---- PUT: validate, then return the body ARM stores -----------------------------------

    def prepare(self, rtype: str, rid: str, body: dict[str, Any], old: Res | None) -> Res:
        rule = PUT_RULES.get(rtype)
        if rule is None:
            raise ArmError(400, "InvalidResourceType", f"fake ARM cannot create {rtype}")
        stored = copy.deepcopy(body)
        if rtype not in NO_LOCATION:
            need(isinstance(stored.get("location"), str), f"{rtype} needs a location")
        rule(self, rid, stored, old)
        return Res(rid, rtype, rid.split("/")[4].lower(), stored, old.power if old else "running")

    # ---- DELETE: refuse what Azure refuses, then cascade ------------------------------------

    def check_delete(self, res: Res) -> None:
        if res.rtype == NIC and dig(res.body, "properties", "virtualMachine"):
            raise ArmError(400, "NicInUse", f"Network interface {res.id} is attached to a VM.")
        if res.rtype == PIP:
            for nic in self.of_type(NIC):
                for config in dig(nic.body, "properties", "ipConfigurations") or []:
                    if key(dig(config, "properties", "publicIPAddress", "id") or "") == key(res.id):
                        raise ArmError(
                            400, "PublicIPAddressCannotBeDeleted", f"{res.id} is in use by {nic.id}"
                        )
        if res.rtype == VNET:
            prefix = key(res.id) + "/subnets/"
            for user in self.resources.values():
                if any(ref.startswith(prefix) for ref in _subnet_refs(user)):
                    raise ArmError(
                        400,
                        "InUseSubnetCannotBeDeleted",
                        f"a subnet of {res.id} is used by {user.id}",
                    )
        if res.rtype == DISK and res.body.get("managedBy"):
            raise ArmError(
                409, "OperationNotAllowed", f"Disk {res.id} is attached to {res.body['managedBy']}"
            )

    def remove(self, res: Res) -> None:
        self.resources.pop(key(res.id), None)
        self.instances.pop(key(res.id), None)
        hook = self.on_remove.get(res.rtype)
        if hook is not None:
            hook(self, res)
        if res.rtype == VM:
            self._release_vm(res)
        if res.rtype == VAULT:
            for secret in list(self.resources.values()):
                if key(secret.id).startswith(key(res.id) + "/secrets/"):
                    self.resources.pop(key(secret.id), None)
            self.vault_secrets.pop(key(res.id), None)

    def _release_vm(self, vm: Res) -> None:
        """Detach or delete the VM's NICs and disks by their deleteOption."""
        profile = dig(vm.body, "properties", "networkProfile", "networkInterfaces") or []
        for ref in profile:
            nic = self.get(ref["id"])
            if nic is None:
                continue
            if dig(ref, "properties", "deleteOption") == "Delete":
                self.resources.pop(key(nic.id), None)
            else:
                nic.body["properties"].pop("virtualMachine", None)
        storage = dig(vm.body, "properties", "storageProfile") or {}
        for disk_ref in [storage.get("osDisk") or {}, *(storage.get("dataDisks") or [])]:
            disk = self.get(dig(disk_ref, "managedDisk", "id") or "")
            if disk is None:
                continue
            if disk_ref.get("deleteOption") == "Delete":
                self.resources.pop(key(disk.id), None)
            else:
                disk.body.pop("managedBy", None)
                disk.body["properties"]["diskState"] = "Unattached"

    def remove_group(self, group: str) -> None:
        for res in list(self.resources.values()):
            if res.group == group.lower():
                self.resources.pop(key(res.id), None)
        self.groups.pop(group.lower(), None)

    def update_access_policies(self, vault_id: str, kind: str, body: Any) -> list[Any]:
        """`PUT <vault>/accessPolicies/{add,replace,remove}`: the entries applied."""
        vault = self.get(vault_id)
        if vault is None:
            raise ArmError(404, "ResourceNotFound", f"Vault {vault_id} was not found.")
        entries = dig(body, "properties", "accessPolicies")
        need(
            isinstance(entries, list) and entries,
            "properties.accessPolicies is required",
            "BadRequest",
        )
        need(kind in ("add", "replace", "remove"), f"bad operation kind {kind}", "BadRequest")
        policies: list[dict[str, Any]] = vault.body["properties"].setdefault("accessPolicies", [])
        for entry in entries:
            need(entry.get("objectId") and entry.get("tenantId"), "bad access policy", "BadRequest")
            same = [p for p in policies if p["objectId"] == entry["objectId"]]
            if same and kind == "add":
                for area, perms in (entry.get("permissions") or {}).items():
                    have = same[0].setdefault("permissions", {}).setdefault(area, [])
                    have.extend(p for p in perms if p not in have)
                continue
            for policy in same:
                policies.remove(policy)
            if kind != "remove":
                policies.append(entry)
        return entries

    # ---- what GET shows -------------------------------------------------------------------------

    def view(self, res: Res, expand: str | None) -> dict[str, Any]:
        body = copy.deepcopy(res.body)
        if res.rtype == VM and expand is not None:
            need(expand == "instanceView", f"unsupported $expand {expand!r}", "InvalidParameter")
            state = body["properties"].get("provisioningState", "Succeeded").lower()
            statuses = [{"code": f"ProvisioningState/{state}", "level": "Info"}]
            if state == "succeeded":
                statuses.append({"code": f"PowerState/{res.power}", "level": "Info"})
            body["properties"]["instanceView"] = {"statuses": statuses}
        return body


def _subnet_refs(res: Res) -> list[str]:
    configs: list[Any] = []
    if res.rtype == NIC:
        configs = dig(res.body, "properties", "ipConfigurations") or []
    if res.rtype == VMSS:
        profile = dig(res.body, "properties", "virtualMachineProfile", "networkProfile")
        for nic in dig(profile, "networkInterfaceConfigurations") or []:
            configs += dig(nic, "properties", "ipConfigurations") or []
    return [key(dig(config, "properties", "subnet", "id") or "") for config in configs]


# ---- per-type PUT rules ------------------------------------------------------------------------


def _put_vnet(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.setdefault("properties", {})
    need(dig(props, "addressSpace", "addressPrefixes"), "a VNet needs addressSpace.addressPrefixes")
    for subnet in props.get("subnets") or []:
        need(subnet.get("name"), "a subnet needs a name")
        need(dig(subnet, "properties", "addressPrefix"), "a subnet needs an addressPrefix")
        subnet["id"] = f"{rid}/subnets/{subnet['name']}"
        subnet["properties"]["provisioningState"] = "Succeeded"


def _put_pip(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.setdefault("properties", {})
    if dig(body, "sku", "name") == "Standard":
        need(
            props.get("publicIPAllocationMethod") == "Static",
            "Standard sku public IP addresses must use Static allocation.",
            "StandardSkuPublicIPAddressesMustBeStatic",
        )
    if old is not None:
        props["ipAddress"] = dig(old.body, "properties", "ipAddress")
    else:
        number = store.next_ip()
        props["ipAddress"] = f"20.0.{number // 250}.{number % 250 + 1}"


def _put_nic(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    configs = dig(body, "properties", "ipConfigurations")
    need(isinstance(configs, list) and configs, "a NIC needs ipConfigurations")
    for index, config in enumerate(configs):
        need(config.get("name"), "an IP configuration needs a name")
        subnet_id = dig(config, "properties", "subnet", "id")
        vnet_id, _, subnet_name = str(subnet_id).rpartition("/subnets/")
        vnet = store.must(vnet_id, "Subnet's virtual network")
        names = [s["name"].lower() for s in dig(vnet.body, "properties", "subnets") or []]
        need(
            subnet_name.lower() in names,
            f"subnet {subnet_id} not found",
            "InvalidResourceReference",
        )
        ip_id = dig(config, "properties", "publicIPAddress", "id")
        if ip_id is not None:
            store.must(ip_id, "Public IP address")
        config["id"] = f"{rid}/ipConfigurations/{config['name']}"
        config["properties"]["privateIPAddress"] = f"10.0.0.{index + store.next_ip() % 200 + 4}"
    if old is not None and dig(old.body, "properties", "virtualMachine"):
        body["properties"]["virtualMachine"] = old.body["properties"]["virtualMachine"]


def _image_ref(store: Store, ref: Any) -> None:
    need(isinstance(ref, dict), "storageProfile.imageReference is required")
    if "id" in ref:
        if "/providers/microsoft.compute/images/" in key(ref["id"]):
            store.must(ref["id"], "Image")
        return
    for part in ("publisher", "offer", "sku", "version"):
        need(ref.get(part), f"imageReference needs {part}", "InvalidParameter")


def _os_profile(profile: Any, prefix_key: str) -> None:
    need(isinstance(profile, dict), "osProfile is required")
    need(profile.get(prefix_key), f"osProfile.{prefix_key} is required", "InvalidParameter")
    need(profile.get("adminUsername"), "osProfile.adminUsername is required", "InvalidParameter")
    keys = dig(profile, "linuxConfiguration", "ssh", "publicKeys") or []
    need(
        profile.get("adminPassword") or (all(k.get("keyData") for k in keys) and keys),
        "an SSH public key or adminPassword is required",
        "InvalidParameter",
    )
    if "customData" in profile:
        try:
            base64.b64decode(profile["customData"], validate=True)
        except (binascii.Error, TypeError):
            raise ArmError(400, "InvalidParameter", "customData is not base64") from None


def _disk(store: Store, vm: str, group_id: str, name: str, size: int, location: str) -> str:
    disk_id = f"{group_id}/providers/Microsoft.Compute/disks/{name}"
    store.resources[key(disk_id)] = Res(
        disk_id,
        DISK,
        group_id.split("/")[4].lower(),
        {
            "id": disk_id,
            "name": name,
            "type": "Microsoft.Compute/disks",
            "location": location,
            "managedBy": vm,
            "properties": {
                "diskSizeGB": size,
                "diskState": "Attached",
                "provisioningState": "Succeeded",
            },
        },
    )
    return disk_id


def _put_vm(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.get("properties")
    need(isinstance(props, dict), "a VM needs properties")
    need(
        dig(props, "hardwareProfile", "vmSize"),
        "hardwareProfile.vmSize is required",
        "InvalidParameter",
    )
    storage = props.get("storageProfile") or {}
    _image_ref(store, storage.get("imageReference"))
    _os_profile(props.get("osProfile"), "computerName")
    nics = dig(props, "networkProfile", "networkInterfaces")
    need(isinstance(nics, list) and nics, "networkProfile.networkInterfaces is required")
    attached = []
    for ref in nics:
        nic = store.must(ref.get("id"), "Network interface")
        owner = dig(nic.body, "properties", "virtualMachine", "id")
        need(owner in (None, rid), f"{nic.id} is attached to {owner}", "NicInUseByOtherVm")
        attached.append(nic)
    os_disk = storage.setdefault("osDisk", {"createOption": "FromImage"})
    need(os_disk.get("createOption") == "FromImage", "osDisk.createOption must be FromImage")
    luns = set()
    for disk in storage.get("dataDisks") or []:
        need(disk.get("lun") not in luns, "data disk luns must be unique", "InvalidParameter")
        luns.add(disk.get("lun"))
        need(disk.get("createOption") == "Empty", "data disks must be createOption Empty")
        need(isinstance(disk.get("diskSizeGB"), int), "dataDisks[].diskSizeGB must be a number")
    # Valid: now the side effects (attach the NICs, create the implicit managed disks).
    for nic in attached:
        nic.body["properties"]["virtualMachine"] = {"id": rid}
    group_id = rid.split("/providers/")[0]
    name = body["name"] if "name" in body else rid.rsplit("/", 1)[1]
    os_name = os_disk.setdefault("name", f"{name}_OsDisk_1_{uuid.uuid4().hex[:12]}")
    os_disk["managedDisk"] = {"id": _disk(store, rid, group_id, os_name, 30, body["location"])}
    for disk in storage.get("dataDisks") or []:
        disk_name = disk.setdefault("name", f"{name}_disk{disk['lun']}_{uuid.uuid4().hex[:12]}")
        disk["managedDisk"] = {
            "id": _disk(store, rid, group_id, disk_name, disk["diskSizeGB"], body["location"])
        }
    props["vmId"] = dig(old.body, "properties", "vmId") if old else str(uuid.uuid4())


def _put_image(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    os_disk = dig(body, "properties", "storageProfile", "osDisk")
    need(isinstance(os_disk, dict) and os_disk.get("blobUri"), "an image needs osDisk.blobUri")
    need(os_disk.get("osType") in ("Linux", "Windows"), "osDisk.osType must be Linux or Windows")
    need(os_disk.get("osState") == "Generalized", "osDisk.osState must be Generalized")


def _put_vmss(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    sku = body.get("sku") or {}
    need(sku.get("name"), "sku.name is required", "InvalidParameter")
    need(isinstance(sku.get("capacity"), int) and 0 <= sku["capacity"] <= 1000, "bad sku.capacity")
    props = body.get("properties") or {}
    need(
        dig(props, "upgradePolicy", "mode") in ("Manual", "Automatic", "Rolling"),
        "bad upgradePolicy",
    )
    profile = props.get("virtualMachineProfile") or {}
    _image_ref(store, dig(profile, "storageProfile", "imageReference"))
    _os_profile(profile.get("osProfile"), "computerNamePrefix")
    configs = dig(profile, "networkProfile", "networkInterfaceConfigurations")
    need(isinstance(configs, list) and configs, "networkInterfaceConfigurations is required")
    for config in configs:
        for ip in dig(config, "properties", "ipConfigurations") or []:
            subnet_id = str(dig(ip, "properties", "subnet", "id"))
            store.must(subnet_id.rpartition("/subnets/")[0], "Subnet's virtual network")
    for ext in dig(profile, "extensionProfile", "extensions") or []:
        for part in ("publisher", "type", "typeHandlerVersion"):
            need(dig(ext, "properties", part), f"extension {ext.get('name')} needs {part}")
    identity = body.get("identity")
    if identity is not None:
        need(identity.get("type") == "SystemAssigned", "only SystemAssigned identities here")
        before = dig(old.body, "identity", "principalId") if old else None
        identity["principalId"] = before or str(uuid.uuid4())
        identity["tenantId"] = "tenant"
    props["uniqueId"] = dig(old.body, "properties", "uniqueId") if old else str(uuid.uuid4())


def _put_vault(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.get("properties") or {}
    need(props.get("tenantId"), "properties.tenantId is required", "BadRequest")
    need(dig(props, "sku", "name") in ("standard", "premium"), "bad sku", "BadRequest")
    need(dig(props, "sku", "family") == "A", "sku.family must be A", "BadRequest")
    for policy in props.get("accessPolicies") or []:
        need(policy.get("objectId") and policy.get("tenantId"), "bad access policy", "BadRequest")
    props["vaultUri"] = f"https://{body.get('name', rid.rsplit('/', 1)[1])}.vault.azure.net/"


def _put_secret(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    value = dig(body, "properties", "value")
    need(isinstance(value, str) and value, "properties.value is required", "BadRequest")
    store.must(rid.rsplit("/secrets/", 1)[0], "Vault")
    store.secret_values[key(rid)] = value
    # ARM never returns a secret's value.
    del body["properties"]["value"]
    body["properties"]["secretUri"] = "https://x.vault.azure.net/secrets/" + rid.rsplit("/", 1)[1]


_HHMM = re.compile(r"([01]\d|2[0-3])[0-5]\d")


def _put_schedule(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.get("properties") or {}
    need(props.get("taskType") == "ComputeVmShutdownTask", "taskType must be ComputeVmShutdownTask")
    need(props.get("status") in ("Enabled", "Disabled"), "status must be Enabled or Disabled")
    need(_HHMM.fullmatch(str(dig(props, "dailyRecurrence", "time"))), "dailyRecurrence.time HHmm")
    need(props.get("timeZoneId"), "timeZoneId is required")
    target = store.must(props.get("targetResourceId"), "Target VM")
    need(target.rtype == VM, "targetResourceId must be a VM")
    expected = "shutdown-computevm-" + target.body["name"]
    need(key(rid).endswith("/" + expected.lower()), f"the schedule must be named {expected}")


def _put_autoscale(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.get("properties") or {}
    target = store.must(props.get("targetResourceUri"), "Target scale set")
    need(target.rtype == VMSS, "targetResourceUri must be a scale set")
    profiles = props.get("profiles")
    need(isinstance(profiles, list) and 1 <= len(profiles) <= 20, "1 to 20 profiles")
    for profile in profiles:
        capacity = profile.get("capacity") or {}
        numbers = [capacity.get(part) for part in ("minimum", "default", "maximum")]
        need(all(isinstance(n, str) and n.isdigit() for n in numbers), "capacity as digit strings")
        low, default, high = (int(n) for n in numbers)
        need(low <= default <= high, "minimum <= default <= maximum")
        need(isinstance(profile.get("rules"), list), "profile rules are required")
        fixed = profile.get("fixedDate")
        if fixed is not None:
            start = datetime.datetime.fromisoformat(fixed["start"])
            end = datetime.datetime.fromisoformat(fixed["end"])
            need(start < end and fixed.get("timeZone"), "bad fixedDate")


PUT_RULES: dict[str, Callable[[Store, str, dict[str, Any], Res | None], None]] = {
    VNET: _put_vnet,
    PIP: _put_pip,
    NIC: _put_nic,
    VM: _put_vm,
    IMAGE: _put_image,
    VMSS: _put_vmss,
    VAULT: _put_vault,
    SECRET: _put_secret,
    SCHEDULE: _put_schedule,
    AUTOSCALE: _put_autoscale,
}
