"""The Azure GAHP's request arguments, parsed into values (no Azure calls here).

AZURE_VM_CREATE and AZURE_VMSS_CREATE take `key=value` pairs (`azure_gahp_protocol.txt`);
keys are case-insensitive as in HTCondor's server, values are case-sensitive, and a value
of `NULL` (or a bare `NULL` token) means "not set". A malformed request raises
AzureArgumentError, which the server reports as a permanent error result rather than an
`E` return line: the grid manager aborts on `E`, and holding the one job is kinder.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from htgrid.backends.azure._errors import AzureArgumentError

__all__ = [
    "OWNER_TAG",
    "ImageRef",
    "KeyVaultRef",
    "ListQuery",
    "ScaleRequest",
    "Target",
    "VmSpec",
    "VmssSpec",
    "parse_list",
    "parse_scale",
    "parse_target",
    "parse_vm_create",
    "parse_vmss_create",
]

#: Tag on every resource the GAHP creates for a VM or scale set: its name. Deletion
#: removes only resources carrying it, so a user's own VNet or IP is never touched.
OWNER_TAG = "htgrid-owner"
#: Tag recording a VM's or scale set's expiry (ISO 8601 UTC) for any reaper to read.
EXPIRY_TAG = "htgrid-expiry"

# HTCondor's aliases (AzureGAHPServer.py) mapped to images that still exist.
_IMAGE_ALIASES = {
    "linux-ubuntu-latest": ("Canonical:ubuntu-24_04-lts:server:latest", "Linux"),
    "windows-server-latest": (
        "MicrosoftWindowsServer:WindowsServer:2022-datacenter-azure-edition:latest",
        "Windows",
    ),
}
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?")
_SCHEDULE = re.compile(r"\d{12}")
_VM_KEYS = frozenset(
    {
        "name",
        "location",
        "size",
        "image",
        "datadisks",
        "adminusername",
        "key",
        "adminsshkey",
        "vnetname",
        "vnetrgname",
        "subnetname",
        "publicipaddress",
        "customdata",
        "tag",
        "ostype",
        "resourcegroup",
        "schedule",
    }
)
_VMSS_KEYS = _VM_KEYS | {
    "nodecount",
    "deletionjob",
    "keyvaultname",
    "keyvaultrg",
    "vaultkey",
    "vaultsecretfile",
    "vaultsecretpath",
}
_MAX_NODES = 1000


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A boot image: a marketplace URN, an image resource id, or a VHD URL."""

    urn: tuple[str, str, str, str] | None = None
    resource_id: str | None = None
    vhd_uri: str | None = None

    def reference(self, image_id: str | None = None) -> dict[str, Any]:
        """The `imageReference` JSON (`image_id` is the image made from a VHD)."""
        if self.urn is not None:
            publisher, offer, sku, version = self.urn
            return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
        return {"id": image_id or self.resource_id}


@dataclass(frozen=True, slots=True)
class VmSpec:
    """What AZURE_VM_CREATE asked for."""

    name: str
    location: str
    size: str
    image: ImageRef
    os_type: str = "Linux"
    resource_group: str | None = None
    admin_username: str = "azureuser"
    #: An SSH public key, a path to one, or (not looking like a key) a password.
    admin_key: str | None = None
    #: Text or a path to a file; sent base64-encoded.
    custom_data: str | None = None
    data_disks: tuple[int, ...] = ()
    vnet: str | None = None
    vnet_resource_group: str | None = None
    subnet: str | None = None
    #: "create", "none", or the resource id of an existing public IP.
    public_ip: str = "create"
    tags: tuple[tuple[str, str], ...] = ()
    expiry: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class KeyVaultRef:
    """The vault secret a scale set's instances fetch at boot with their managed identity."""

    vault: str
    resource_group: str | None
    secret: str
    #: A file whose content becomes the secret's value (else the secret must exist).
    secret_file: str | None = None
    #: Where the boot script writes the value on each instance.
    destination: str = ""


@dataclass(frozen=True, slots=True)
class VmssSpec:
    """What AZURE_VMSS_CREATE asked for: a VM template and how many."""

    vm: VmSpec
    node_count: int = 1
    key_vault: KeyVaultRef | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """A VM or scale set named by `<name>` or `<resource-group> <name>`."""

    name: str
    resource_group: str | None = None


@dataclass(frozen=True, slots=True)
class ListQuery:
    """AZURE_VM_LIST's filters."""

    resource_group: str | None = None
    name: str | None = None
    tags: tuple[tuple[str, str | None], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ScaleRequest:
    """AZURE_VMSS_SCALE: a scale set and its new size."""

    target: Target
    node_count: int


def _pairs(args: Iterable[str], allowed: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """Single-valued keys (lower-cased) and the repeatable `tag` values."""
    values: dict[str, str] = {}
    tags: list[str] = []
    for arg in args:
        if arg.upper() == "NULL":
            continue
        key, sep, value = arg.partition("=")
        lowered = key.lower()
        if lowered == "deletionjob" and not sep and "deletionjob" in allowed:
            values["deletionjob"] = "true"
            continue
        if not sep:
            raise AzureArgumentError(f"expected key=value, got {arg!r}")
        if lowered not in allowed:
            raise AzureArgumentError(f"unknown parameter {key!r}")
        if value.upper() == "NULL":
            continue
        if lowered == "tag":
            tags.append(value)
        elif lowered in values:
            raise AzureArgumentError(f"parameter {key!r} given twice")
        else:
            values[lowered] = value
    return values, tags


def _required(values: Mapping[str, str], key: str) -> str:
    value = values.get(key, "")
    if not value:
        raise AzureArgumentError(f"missing required parameter {key}")
    return value


def check_name(name: str, what: str = "name") -> str:
    """`name` if Azure accepts it for a VM (and for the resources named after it)."""
    if _NAME.fullmatch(name) is None:
        raise AzureArgumentError(
            f"invalid {what} {name!r}: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit and not ending in '.' or '-'"
        )
    return name


def parse_image(text: str) -> tuple[ImageRef, str | None]:
    """The image and the OS type it implies (None when it says nothing)."""
    alias = _IMAGE_ALIASES.get(text.lower())
    if alias is not None:
        urn, os_type = alias
        return ImageRef(urn=_urn(urn)), os_type
    if text.lower().startswith("/subscriptions/"):
        return ImageRef(resource_id=text), None
    if text.lower().startswith("https://"):
        return ImageRef(vhd_uri=text), None
    return ImageRef(urn=_urn(text)), None


def _urn(text: str) -> tuple[str, str, str, str]:
    parts = text.split(":")
    if len(parts) != 4 or not all(parts):
        raise AzureArgumentError(
            f"unrecognized image {text!r}: want publisher:offer:sku:version, "
            "an image resource id, or a VHD https:// URL"
        )
    return parts[0], parts[1], parts[2], parts[3]


def parse_schedule(text: str) -> datetime.datetime:
    """An expiry: HTCondor's `YYYYMMDDhhmm` (UTC) or ISO 8601 with a zone."""
    if _SCHEDULE.fullmatch(text):
        try:
            moment = datetime.datetime.strptime(text, "%Y%m%d%H%M")
        except ValueError:
            raise AzureArgumentError(f"invalid schedule {text!r}") from None
        return moment.replace(tzinfo=datetime.UTC)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AzureArgumentError(
            f"invalid schedule {text!r}: want YYYYMMDDhhmm (UTC) or ISO 8601"
        ) from None
    if moment.tzinfo is None:
        raise AzureArgumentError(f"schedule {text!r} needs a time zone")
    return moment.astimezone(datetime.UTC)


def _tags(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    tags: dict[str, str] = {}
    for text in values:
        name, _, value = text.partition("=")
        if not name or any(char in name for char in "<>%&\\?/"):
            raise AzureArgumentError(f"invalid tag name {name!r}")
        if name.lower().startswith("htgrid-"):
            raise AzureArgumentError(f"tag names starting with 'htgrid-' are reserved: {name!r}")
        tags[name] = value
    return tuple(tags.items())


def _count(text: str, what: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise AzureArgumentError(f"invalid {what} {text!r}: want a number from {low} to {high}")
    return value


def _vm_from(values: Mapping[str, str], tags: Sequence[str]) -> VmSpec:
    name = check_name(_required(values, "name"))
    image, implied_os = parse_image(_required(values, "image"))
    os_type = values.get("ostype", implied_os or "Linux").title()
    if os_type not in ("Linux", "Windows"):
        raise AzureArgumentError(f"invalid osType {os_type!r}: want Linux or Windows")
    disks = values.get("datadisks")
    data_disks = (
        tuple(_count(size, "data disk size", 1, 4095) for size in disks.split(",")) if disks else ()
    )
    public_ip = values.get("publicipaddress", "create")
    if public_ip.lower() in ("dynamic", "static", "create"):
        public_ip = "create"
    elif public_ip.lower() == "none":
        public_ip = "none"
    elif not public_ip.lower().startswith("/subscriptions/"):
        raise AzureArgumentError(
            f"invalid publicIPAddress {public_ip!r}: want a resource id, 'dynamic' or 'none'"
        )
    key = values.get("key")
    ssh_key = values.get("adminsshkey")
    if key is not None and ssh_key is not None and key != ssh_key:
        raise AzureArgumentError("give key or adminSshKey, not both")
    schedule = values.get("schedule")
    group = values.get("resourcegroup")
    return VmSpec(
        name=name,
        location=_required(values, "location").lower(),
        size=_required(values, "size"),
        image=image,
        os_type=os_type,
        resource_group=check_name(group, "resourceGroup") if group else None,
        admin_username=values.get("adminusername", "azureuser"),
        admin_key=key or ssh_key,
        custom_data=values.get("customdata"),
        data_disks=data_disks,
        vnet=values.get("vnetname"),
        vnet_resource_group=values.get("vnetrgname"),
        subnet=values.get("subnetname"),
        public_ip=public_ip,
        tags=_tags(tags),
        expiry=parse_schedule(schedule) if schedule else None,
    )


def parse_vm_create(args: Sequence[str]) -> VmSpec:
    """AZURE_VM_CREATE's `key=value` arguments (after the credential file and subscription)."""
    values, tags = _pairs(args, _VM_KEYS)
    return _vm_from(values, tags)


def parse_vmss_create(args: Sequence[str]) -> VmssSpec:
    """AZURE_VMSS_CREATE's arguments: VM_CREATE's plus the scale set's own."""
    values, tags = _pairs(args, _VMSS_KEYS)
    vm = _vm_from(values, tags)
    if "deletionjob" in values and vm.expiry is None:
        # HTCondor's server insists on a schedule for its deletion job; so do we.
        raise AzureArgumentError("deletionjob needs schedule=YYYYMMDDhhmm")
    vault = values.get("keyvaultname")
    secret = values.get("vaultkey")
    key_vault = None
    if vault or secret:
        if not (vault and secret):
            raise AzureArgumentError("keyvaultName and vaultKey go together")
        if vm.os_type != "Linux":
            raise AzureArgumentError("fetching a Key Vault secret at boot needs a Linux image")
        key_vault = KeyVaultRef(
            vault=vault,
            resource_group=values.get("keyvaultrg"),
            secret=secret,
            secret_file=values.get("vaultsecretfile"),
            destination=values.get("vaultsecretpath", f"/etc/condor/tokens.d/{secret}"),
        )
    count = values.get("nodecount")
    return VmssSpec(
        vm=vm,
        node_count=_count(count, "nodecount", 0, _MAX_NODES) if count else 1,
        key_vault=key_vault,
    )


def parse_target(args: Sequence[str]) -> Target:
    """`<name>` or `<resource-group> <name>` (HTCondor's two forms)."""
    if len(args) == 1:
        return Target(check_name(args[0]))
    if len(args) == 2:
        return Target(check_name(args[1]), check_name(args[0], "resource group"))
    raise AzureArgumentError(f"expected <name> or <resource-group> <name>, got {len(args)} args")


def parse_list(args: Sequence[str]) -> ListQuery:
    """`[<resource-group> [<name>]] [tag=<name>[=<value>]]...`."""
    plain: list[str] = []
    tags: list[tuple[str, str | None]] = []
    for arg in args:
        if arg.upper() == "NULL":
            continue
        key, sep, value = arg.partition("=")
        if sep and key.lower() == "tag":
            tag_name, has_value, tag_value = value.partition("=")
            if not tag_name:
                raise AzureArgumentError("tag= needs a tag name")
            tags.append((tag_name, tag_value if has_value else None))
        elif sep:
            raise AzureArgumentError(f"unknown filter {arg!r}")
        else:
            plain.append(arg)
    if len(plain) > 2:
        raise AzureArgumentError("expected at most <resource-group> <name>")
    group = check_name(plain[0], "resource group") if plain else None
    name = check_name(plain[1]) if len(plain) == 2 else None
    return ListQuery(group, name, tuple(tags))


def parse_scale(args: Sequence[str]) -> ScaleRequest:
    """`name=<n> nodecount=<k> [resourceGroup=<g>]`, or `[<group>] <name> <k>` (HTCondor)."""
    if args and all("=" in arg for arg in args):
        values, _ = _pairs(args, frozenset({"name", "nodecount", "resourcegroup"}))
        group = values.get("resourcegroup")
        target = Target(
            check_name(_required(values, "name")),
            check_name(group, "resource group") if group else None,
        )
        count = _required(values, "nodecount")
    elif len(args) in (2, 3):
        target = parse_target(args[:-1])
        count = args[-1]
    else:
        raise AzureArgumentError("expected name=<name> nodecount=<n> or [<group>] <name> <n>")
    return ScaleRequest(target, _count(count, "nodecount", 0, _MAX_NODES))


# ---- values that name local files (read in a worker thread) ---------------------------------


def read_text_or_file(value: str) -> str:
    """`value`, or the content of the file it names (HTCondor's rule for keys, custom data)."""
    path = Path(os.path.expanduser(value))
    if len(value) < 4096 and "\n" not in value and path.is_file():
        return path.read_text()
    return value


def looks_like_ssh_key(text: str) -> bool:
    """Whether `text` is an OpenSSH public key line rather than a password."""
    return text.startswith(("ssh-", "ecdsa-", "sk-ssh-", "sk-ecdsa-"))


def custom_data_b64(value: str) -> str:
    """The custom data as Azure wants it: base64 of the text or of the named file."""
    path = Path(os.path.expanduser(value))
    if len(value) < 4096 and "\n" not in value and path.is_file():
        data = path.read_bytes()
    else:
        data = value.encode()
    return base64.b64encode(data).decode("ascii")
