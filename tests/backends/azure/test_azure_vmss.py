"""Scale sets: create, scale, power, delete; expiry by autoscale; Key Vault secrets at boot."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

from htgrid.gahp.commands.azure import Failure

from ._wire import AzureWire
from .arm_server import SUBSCRIPTION, ArmServer

URN = "Canonical:ubuntu-24_04-lts:server:latest"
VMSS = "Microsoft.Compute/virtualMachineScaleSets"


def vmss_args(name: str, key: Path, *extra: str) -> list[str]:
    return [
        f"name={name}",
        "location=westeurope",
        "size=Standard_F2s_v2",
        f"image={URN}",
        "adminUsername=condor",
        f"key={key}",
        *extra,
    ]


def test_create_scale_power_delete(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    auth = (str(auth_file), SUBSCRIPTION)
    assert wire.call(
        "AZURE_VMSS_CREATE", *auth, *vmss_args("pool1", ssh_key_file, "nodecount=2", "dataDisks=8")
    ) == ["NULL"]
    vmss = arm.resource("pool1", f"{VMSS}/pool1")
    assert vmss is not None
    assert vmss.body["sku"] == {"name": "Standard_F2s_v2", "tier": "Standard", "capacity": 2}
    profile = vmss.body["properties"]["virtualMachineProfile"]
    assert profile["osProfile"]["computerNamePrefix"] == "pool1"
    assert profile["storageProfile"]["dataDisks"] == [
        {"lun": 0, "diskSizeGB": 8, "createOption": "Empty"}
    ]
    subnet = profile["networkProfile"]["networkInterfaceConfigurations"][0]["properties"][
        "ipConfigurations"
    ][0]["properties"]["subnet"]["id"]
    assert subnet.endswith("/virtualNetworks/pool1-vnet/subnets/default")
    assert "identity" not in vmss.body  # no vault, no identity
    # Both argument forms HTCondor's server and its usage text show.
    assert wire.call("AZURE_VMSS_SCALE", *auth, "name=pool1", "nodecount=5") == ["NULL"]
    assert vmss.body["sku"]["capacity"] == 5
    assert wire.call("AZURE_VMSS_SCALE", *auth, "pool1", "pool1", "0") == ["NULL"]
    assert vmss.body["sku"]["capacity"] == 0
    [patch] = arm.requests("PATCH", f"{VMSS}/pool1$")[-1:]
    assert patch.body == {"sku": {"capacity": 0}}
    assert wire.call("AZURE_VMSS_STOP", *auth, "pool1") == ["NULL"]
    assert vmss.power == "deallocated"
    assert wire.call("AZURE_VMSS_START", *auth, "pool1", "pool1") == ["NULL"]
    assert vmss.power == "running"
    assert wire.call("AZURE_VMSS_RESTART", *auth, "pool1") == ["NULL"]
    assert wire.call("AZURE_VMSS_DELETE", *auth, "pool1") == ["NULL"]
    assert "pool1" not in arm.store.groups
    assert not [res for res in arm.store.resources.values() if res.group == "pool1"]
    [error] = wire.call("AZURE_VMSS_SCALE", *auth, "name=pool1", "nodecount=3")
    info = Failure.of(error)
    assert info is not None and info.status == 404 and not info.transient, error
    [error] = wire.call("AZURE_VMSS_DELETE", *auth, "pool1")
    assert "could not be found" in error


def test_expiry_and_key_vault_secret(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path, tmp_path: Path
) -> None:
    auth = (str(auth_file), SUBSCRIPTION)
    token = tmp_path / "pool.token"
    token.write_text("eyJhbGciOi.join-token.signature\n")
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
    schedule = expiry.strftime("%Y%m%d%H%M")
    arm.clear_log()
    result = wire.call(
        "AZURE_VMSS_CREATE",
        *auth,
        *vmss_args(
            "pool2",
            ssh_key_file,
            "nodecount=3",
            "deletionjob",
            f"schedule={schedule}",
            "keyvaultName=htgridkv",
            "vaultKey=pooltoken",
            f"vaultSecretFile={token}",
            "customData=#cloud-config",
        ),
    )
    assert result == ["NULL"]
    # The vault, made with access policies (no role assignments needed), holds the secret.
    vault = arm.resource("pool2", "Microsoft.KeyVault/vaults/htgridkv")
    assert vault is not None
    assert vault.body["properties"]["enableRbacAuthorization"] is False
    secret_id = vault.id + "/secrets/pooltoken"
    assert arm.store.secret_values[secret_id.lower()] == "eyJhbGciOi.join-token.signature"
    vmss = arm.resource("pool2", f"{VMSS}/pool2")
    assert vmss is not None
    principal = vmss.body["identity"]["principalId"]
    assert vmss.body["identity"]["type"] == "SystemAssigned"
    policies = vault.body["properties"]["accessPolicies"]
    assert [(p["objectId"], p["permissions"]) for p in policies] == [
        (principal, {"secrets": ["get"]})
    ]
    # The secret is not in the custom data; the boot script fetches it with the identity.
    profile = vmss.body["properties"]["virtualMachineProfile"]
    assert base64.b64decode(profile["osProfile"]["customData"]) == b"#cloud-config"
    [extension] = profile["extensionProfile"]["extensions"]
    assert extension["properties"]["type"] == "CustomScript"
    script = base64.b64decode(extension["properties"]["protectedSettings"]["script"]).decode()
    assert "169.254.169.254/metadata/identity/oauth2/token" in script
    assert "resource=https://vault.azure.net" in script
    assert "https://htgridkv.vault.azure.net/secrets/pooltoken?api-version=7.4" in script
    assert "/etc/condor/tokens.d/pooltoken" in script
    assert "join-token" not in script
    # Expiry: an autoscale setting holding capacity 0 from the expiry on.
    setting = arm.resource("pool2", "Microsoft.Insights/autoscalesettings/pool2-expiry")
    assert setting is not None
    props = setting.body["properties"]
    assert props["targetResourceUri"] == vmss.id and props["enabled"] is True
    before, expired = props["profiles"]
    assert before["capacity"]["minimum"] == "0" and before["rules"] == []
    assert expired["capacity"] == {"minimum": "0", "maximum": "0", "default": "0"}
    assert expired["fixedDate"]["start"] == expiry.strftime("%Y-%m-%dT%H:%M:00Z")
    assert expired["fixedDate"]["timeZone"] == "UTC"
    # Staged: born empty, access and lease in place, then scaled to nodecount.
    steps = [
        (entry.method, entry.path.rsplit("/", 1)[-1])
        for entry in arm.log
        if entry.method in ("PUT", "PATCH")
        and any(word in entry.path for word in ("ScaleSets/", "accessPolicies", "autoscale"))
    ]
    assert steps == [("PUT", "pool2"), ("PUT", "add"), ("PUT", "pool2-expiry"), ("PATCH", "pool2")]
    [first] = arm.requests("PUT", f"{VMSS}/pool2$")
    assert first.body["sku"]["capacity"] == 0
    assert vmss.body["sku"]["capacity"] == 3
    # Deleting takes the lease, the access and the scale set away; the vault stays.
    assert wire.call("AZURE_VMSS_DELETE", *auth, "pool2", "pool2") == ["NULL"]
    assert arm.resource("pool2", "Microsoft.Insights/autoscalesettings/pool2-expiry") is None
    assert arm.resource("pool2", f"{VMSS}/pool2") is None
    assert vault.body["properties"]["accessPolicies"] == []


def test_missing_secret_is_a_permanent_error_and_nothing_is_left(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    [error] = wire.call(
        "AZURE_VMSS_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vmss_args("pool3", ssh_key_file, "keyvaultName=otherkv", "vaultKey=absent"),
    )
    info = Failure.of(error)
    assert info is not None and info.code == "SecretNotFound" and not info.transient, error
    assert arm.resource("pool3", f"{VMSS}/pool3") is None
    assert "pool3" not in arm.store.groups
