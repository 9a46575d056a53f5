"""The Azure GAHP's VM commands, spoken raw over its pipes, against the fake ARM."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

from htgrid.gahp.commands.azure import Failure

from ._wire import AzureWire
from .arm_server import CLIENT_ID, CLIENT_SECRET, SUBSCRIPTION, TENANT, ArmServer
from .conftest import SSH_KEY, write_auth_file

URN = "Canonical:ubuntu-24_04-lts:server:latest"
VM_TYPE = "Microsoft.Compute/virtualMachines"


def vm_args(name: str, *extra: str) -> list[str]:
    return [f"name={name}", "location=eastus", "size=Standard_D2s_v5", f"image={URN}", *extra]


def last_put(arm: ArmServer, pattern: str) -> dict:
    bodies = [entry.body for entry in arm.requests("PUT", pattern)]
    assert bodies, f"no PUT matching {pattern}"
    return bodies[-1]


def test_banner_version_and_commands(wire: AzureWire) -> None:
    assert wire.banner.startswith("$GahpVersion")
    assert wire.send("VERSION")[0] == "S"
    commands = set(wire.send("COMMANDS")[1:])
    assert {
        "AZURE_PING",
        "AZURE_VM_CREATE",
        "AZURE_VM_DELETE",
        "AZURE_VM_LIST",
        "AZURE_VMSS_CREATE",
        "AZURE_VMSS_DELETE",
        "AZURE_VMSS_SCALE",
        "AZURE_VMSS_START",
        "AZURE_VMSS_STOP",
        "AZURE_VMSS_RESTART",
        "RESULTS",
        "QUIT",
        "VERSION",
        "COMMANDS",
    } <= commands


def test_ping_authenticates_against_the_token_endpoint(
    wire: AzureWire, arm: ArmServer, auth_file: Path, tmp_path: Path
) -> None:
    arm.clear_log()
    assert wire.call("AZURE_PING", str(auth_file), SUBSCRIPTION) == ["NULL"]
    calls = arm.requests("GET", r"/resourcegroups$")
    assert calls and calls[-1].query.get("$top") == "1"
    bad = write_auth_file(tmp_path / "bad.auth", arm, secret="wrong")
    [error] = wire.call("AZURE_PING", str(bad), SUBSCRIPTION)
    info = Failure.of(error)
    assert info is not None and not info.transient and info.status == 401, error
    assert "Invalid client secret" in info.message
    [error] = wire.call("AZURE_PING", str(auth_file), "not-my-subscription")
    info = Failure.of(error)
    assert info is not None and info.code == "SubscriptionNotFound" and info.status == 404


def test_create_with_every_option_reaches_arm(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path, tmp_path: Path
) -> None:
    script = tmp_path / "init.sh"
    script.write_text("#!/bin/sh\necho hello from htgrid\n")
    result = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args(
            "fullvm",
            "adminUsername=condor",
            f"key={ssh_key_file}",
            f"customData={script}",
            "dataDisks=10,20",
            "tag=owner=alice smith",
            "tag=flag",
        ),
    )
    assert len(result) == 3 and result[0] == "NULL", result
    vm = arm.resource("fullvm", f"{VM_TYPE}/fullvm")
    assert vm is not None
    assert result[1] == vm.body["properties"]["vmId"]
    ip = arm.resource("fullvm", "Microsoft.Network/publicIPAddresses/fullvm-ip")
    assert ip is not None and result[2] == ip.body["properties"]["ipAddress"]
    # What the GAHP sent, as ARM received it.
    group = arm.store.groups["fullvm"]
    assert group["tags"] == {"htgrid-owner": "fullvm"} and group["location"] == "eastus"
    body = last_put(arm, f"{VM_TYPE}/fullvm$")
    props = body["properties"]
    assert props["hardwareProfile"] == {"vmSize": "Standard_D2s_v5"}
    assert props["storageProfile"]["imageReference"] == {
        "publisher": "Canonical",
        "offer": "ubuntu-24_04-lts",
        "sku": "server",
        "version": "latest",
    }
    os_profile = props["osProfile"]
    assert os_profile["adminUsername"] == "condor"
    assert os_profile["linuxConfiguration"]["ssh"]["publicKeys"] == [
        {"path": "/home/condor/.ssh/authorized_keys", "keyData": SSH_KEY}
    ]
    assert os_profile["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert base64.b64decode(os_profile["customData"]) == script.read_bytes()
    disks = props["storageProfile"]["dataDisks"]
    assert [(d["lun"], d["diskSizeGB"], d["deleteOption"]) for d in disks] == [
        (0, 10, "Delete"),
        (1, 20, "Delete"),
    ]
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert body["tags"] == {"owner": "alice smith", "flag": "", "htgrid-owner": "fullvm"}
    [nic_ref] = props["networkProfile"]["networkInterfaces"]
    assert nic_ref["properties"]["deleteOption"] == "Delete"
    nic = last_put(arm, "networkInterfaces/fullvm-nic$")
    config = nic["properties"]["ipConfigurations"][0]["properties"]
    assert config["subnet"]["id"].endswith("/virtualNetworks/fullvm-vnet/subnets/default")
    assert config["publicIPAddress"]["id"].endswith("/publicIPAddresses/fullvm-ip")
    pip = last_put(arm, "publicIPAddresses/fullvm-ip$")
    assert pip["sku"] == {"name": "Standard"}
    assert pip["properties"]["publicIPAllocationMethod"] == "Static"
    assert sorted(arm.store.names("microsoft.compute/disks")) == [
        "fullvm-data0",
        "fullvm-data1",
        "fullvm-osdisk",
    ]
    # Every long-running PUT was polled through Azure-AsyncOperation.
    assert arm.requests("GET", r"/locations/eastus/operations/op\d+$")


def test_create_in_a_shared_group_with_an_existing_network(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    # The user's own network, made directly in the fake ARM.
    arm.add_group("shared")
    arm.add_group("netrg")
    vnet_id = arm.group_id("netrg") + "/providers/Microsoft.Network/virtualNetworks/uservnet"
    arm.add_resource(
        vnet_id,
        {
            "location": "eastus",
            "properties": {
                "addressSpace": {"addressPrefixes": ["10.1.0.0/16"]},
                "subnets": [
                    {"name": "a", "properties": {"addressPrefix": "10.1.0.0/24"}},
                    {"name": "b", "properties": {"addressPrefix": "10.1.1.0/24"}},
                ],
            },
        },
    )
    result = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args(
            "sharedvm",
            "resourceGroup=shared",
            f"vnetName={vnet_id}",
            "subnetName=b",
            "publicIPAddress=NONE",
            f"adminSshKey={ssh_key_file}",
        ),
    )
    assert result[0] == "NULL" and result[2] == "NULL", result
    nic = last_put(arm, "shared/providers/Microsoft.Network/networkInterfaces/sharedvm-nic$")
    config = nic["properties"]["ipConfigurations"][0]["properties"]
    assert config["subnet"]["id"] == vnet_id + "/subnets/b"
    assert "publicIPAddress" not in config
    assert arm.resource("shared", "Microsoft.Network/virtualNetworks/sharedvm-vnet") is None
    # Deleting it leaves the user's group and network alone.
    assert wire.call("AZURE_VM_DELETE", str(auth_file), SUBSCRIPTION, "shared", "sharedvm") == [
        "NULL"
    ]
    assert "shared" in arm.store.groups
    assert arm.store.get(vnet_id) is not None
    assert not arm.store.of_type("microsoft.network/networkinterfaces", "shared")


def test_list_reports_name_and_power_state(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    created = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args("listvm", f"key={ssh_key_file}", "tag=pool=blue"),
    )
    assert created[0] == "NULL"
    result = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION)
    assert result[0] == "NULL"
    count = int(result[1])
    pairs = dict(zip(result[2::2], result[3::2], strict=True))
    assert len(pairs) == count
    assert pairs["listvm"] == "ProvisioningState/succeeded,PowerState/running"
    by_tag = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION, "tag=pool=blue")
    assert by_tag == ["NULL", "1", "listvm", "ProvisioningState/succeeded,PowerState/running"]
    by_group = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION, "listvm")
    assert by_group[:3] == ["NULL", "1", "listvm"]
    one = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION, "listvm", "listvm")
    assert one[:3] == ["NULL", "1", "listvm"]
    arm.resource("listvm", f"{VM_TYPE}/listvm").power = "deallocated"  # type: ignore[union-attr]
    again = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION, "listvm")
    assert again[3].rsplit("/", 1)[1] == "deallocated"


def test_delete_removes_nic_ip_disks_network_and_group(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    created = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args("gonevm", f"key={ssh_key_file}", "dataDisks=5"),
    )
    assert created[0] == "NULL"
    assert len(arm.store.of_type("microsoft.compute/disks", "gonevm")) == 2
    arm.clear_log()
    assert wire.call("AZURE_VM_DELETE", str(auth_file), SUBSCRIPTION, "gonevm") == ["NULL"]
    assert not [res.id for res in arm.store.resources.values() if res.group == "gonevm"]
    assert "gonevm" not in arm.store.groups
    deleted = [entry.path.rsplit("/", 2)[-2:] for entry in arm.requests("DELETE")]
    # The public IP and the VNet have no deleteOption: the GAHP removed them itself.
    assert ["publicIPAddresses", "gonevm-ip"] in deleted
    assert ["virtualNetworks", "gonevm-vnet"] in deleted
    [error] = wire.call("AZURE_VM_DELETE", str(auth_file), SUBSCRIPTION, "gonevm")
    assert "could not be found" in error  # what the grid manager's GM_CANCEL looks for
    info = Failure.of(error)
    assert info is not None and info.code == "ResourceNotFound" and not info.transient


def test_expiry_installs_an_auto_shutdown_schedule(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=3)
    schedule = soon.strftime("%Y%m%d%H%M")
    created = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args("leasevm", f"key={ssh_key_file}", f"schedule={schedule}"),
    )
    assert created[0] == "NULL", created
    found = arm.resource("leasevm", "Microsoft.DevTestLab/schedules/shutdown-computevm-leasevm")
    assert found is not None
    props = found.body["properties"]
    vm = arm.resource("leasevm", f"{VM_TYPE}/leasevm")
    assert vm is not None
    assert props["targetResourceId"] == vm.id
    assert props["dailyRecurrence"] == {"time": soon.strftime("%H%M")}
    assert props["timeZoneId"] == "UTC" and props["status"] == "Enabled"
    assert props["taskType"] == "ComputeVmShutdownTask"
    assert vm.body["tags"]["htgrid-expiry"] == soon.strftime("%Y-%m-%dT%H:%M:00Z")
    # The schedule was made with the generic resources API and its api-version.
    [put] = arm.requests("PUT", "schedules/shutdown-computevm-leasevm")
    assert put.query["api-version"] == "2018-09-15"
    assert wire.call("AZURE_VM_DELETE", str(auth_file), SUBSCRIPTION, "leasevm") == ["NULL"]
    assert not arm.store.of_type("microsoft.devtestlab/schedules")
    # A day or more ahead cannot be enforced by a daily schedule: refused, nothing made.
    late = (soon + datetime.timedelta(days=2)).strftime("%Y%m%d%H%M")
    [error] = wire.call(
        "AZURE_VM_CREATE",
        str(auth_file),
        SUBSCRIPTION,
        *vm_args("latevm", f"key={ssh_key_file}", f"schedule={late}"),
    )
    info = Failure.of(error)
    assert info is not None and info.code == "InvalidArgument" and not info.transient
    assert "latevm" not in arm.store.groups


def test_vhd_image_and_sdk_auth_json(
    wire: AzureWire, arm: ArmServer, tmp_path: Path, ssh_key_file: Path
) -> None:
    # The JSON `az ad sp create-for-rbac --sdk-auth` prints, pointed at the fake ARM.
    sdk_auth = tmp_path / "sdk-auth.json"
    sdk_auth.write_text(
        json.dumps(
            {
                "clientId": CLIENT_ID,
                "clientSecret": CLIENT_SECRET,
                "subscriptionId": SUBSCRIPTION,
                "tenantId": TENANT,
                "activeDirectoryEndpointUrl": arm.url,
                "resourceManagerEndpointUrl": arm.url + "/",
            }
        )
    )
    vhd = "https://acct.blob.core.windows.net/vhds/worker.vhd"
    result = wire.call(
        "AZURE_VM_CREATE",
        str(sdk_auth),
        SUBSCRIPTION,
        "name=vhdvm",
        "location=eastus",
        "size=Standard_B2s",
        f"image={vhd}",
        "osType=linux",
        f"key={ssh_key_file}",
    )
    assert result[0] == "NULL", result
    image = last_put(arm, "images/vhdvm-image$")
    assert image["properties"]["storageProfile"]["osDisk"]["blobUri"] == vhd
    vm = last_put(arm, f"{VM_TYPE}/vhdvm$")
    reference = vm["properties"]["storageProfile"]["imageReference"]
    assert reference["id"].endswith("/providers/Microsoft.Compute/images/vhdvm-image")
    # As HTCondor's server does, the image goes once the VM's disk is made from it.
    assert arm.resource("vhdvm", "Microsoft.Compute/images/vhdvm-image") is None
    assert wire.call("AZURE_VM_DELETE", str(sdk_auth), SUBSCRIPTION, "vhdvm") == ["NULL"]
