"""Failures: provider codes reach the result line, transient told from permanent, no orphans."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.gahp.commands.azure import Failure

from ._wire import AzureWire
from .arm_server import SUBSCRIPTION, ArmServer

URN = "Canonical:ubuntu-24_04-lts:server:latest"
VMS = "Microsoft.Compute/virtualMachines"


def vm_args(name: str, key: Path, *extra: str) -> list[str]:
    return [
        f"name={name}",
        "location=eastus",
        "size=Standard_D2s_v5",
        f"image={URN}",
        f"key={key}",
        *extra,
    ]


def leftovers(arm: ArmServer, group: str) -> list[str]:
    return [res.id for res in arm.store.resources.values() if res.group == group.lower()]


def test_quota_exceeded_is_permanent_with_its_code_and_rolls_back(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    message = "Operation could not be completed as it results in exceeding approved Total Regional Cores quota."
    arm.fault("PUT", f"{VMS}/quotavm$", 409, "QuotaExceeded", message)
    [error] = wire.call(
        "AZURE_VM_CREATE", str(auth_file), SUBSCRIPTION, *vm_args("quotavm", ssh_key_file)
    )
    info = Failure.of(error)
    assert info is not None, error
    assert (info.what, info.code, info.status, info.transient) == (
        "Error creating VM",
        "QuotaExceeded",
        409,
        False,
    )
    assert info.message == message
    # The NIC, IP and VNet made before the VM was refused are gone again, group and all.
    assert leftovers(arm, "quotavm") == []
    assert "quotavm" not in arm.store.groups
    [again] = wire.call("AZURE_VM_DELETE", str(auth_file), SUBSCRIPTION, "quotavm")
    assert "could not be found" in again


@pytest.mark.parametrize(
    ("status", "code"), [(429, "TooManyRequests"), (503, "ServiceUnavailable")]
)
def test_throttling_and_unavailability_are_transient(
    wire: AzureWire, arm: ArmServer, auth_file: Path, status: int, code: str
) -> None:
    # The GAHP runs with --retries 2: three refusals exhaust azure-core's retries.
    arm.fault("GET", f"/providers/{VMS}$", status, code, "try again later", times=3)
    [error] = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION)
    info = Failure.of(error)
    assert info is not None and info.transient and info.status == status, error
    assert info.code == code and info.what == "Error listing VMs"
    # One refusal is absorbed by azure-core's retry (Retry-After: 0): success.
    arm.fault("GET", f"/providers/{VMS}$", status, code, "try again later", times=1)
    assert wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION)[0] == "NULL"


def test_a_failed_long_running_operation_reports_its_code(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    arm.fail_operation(f"{VMS}/allocvm$", "AllocationFailed", "No capacity for Standard_D2s_v5.")
    [error] = wire.call(
        "AZURE_VM_CREATE", str(auth_file), SUBSCRIPTION, *vm_args("allocvm", ssh_key_file)
    )
    info = Failure.of(error)
    assert info is not None and info.code == "AllocationFailed" and info.transient, error
    assert "No capacity" in info.message
    assert leftovers(arm, "allocvm") == []


def test_malformed_arguments_give_an_error_result_not_an_abort(
    wire: AzureWire, auth_file: Path, ssh_key_file: Path
) -> None:
    cases = {
        "unknown parameter 'colour'": ["colour=red"],
        "missing required parameter size": ["name=x1", "location=eastus", f"image={URN}"],
        "invalid data disk size": ["dataDisks=10,99999"],
        "unrecognized image": ["image=ubuntu"],
        "an admin key": ["name=x2", "location=eastus", "size=S", f"image={URN}"],
    }
    for expected, args in cases.items():
        if args[0].startswith("name="):
            full = args
        else:
            full = [
                a for a in vm_args("x3", ssh_key_file) if a.split("=")[0] != args[0].split("=")[0]
            ]
            full.append(args[0])
        [error] = wire.call("AZURE_VM_CREATE", str(auth_file), SUBSCRIPTION, *full)
        info = Failure.of(error)
        assert info is not None and info.code == "InvalidArgument" and not info.transient
        assert expected in info.message, (expected, error)
    # Too few arguments for the command itself is a syntax error: E.
    assert wire.send("AZURE_VM_DELETE", "99", str(auth_file), SUBSCRIPTION)[0] == "E"
    assert wire.send("AZURE_NO_SUCH_THING", "100")[0] == "E"


def test_unreadable_auth_file(wire: AzureWire, tmp_path: Path) -> None:
    [error] = wire.call("AZURE_PING", str(tmp_path / "missing.auth"), SUBSCRIPTION)
    info = Failure.of(error)
    assert info is not None and info.code == "InvalidAuthFile" and not info.transient


def test_one_list_call_for_a_hundred_vms(wire: AzureWire, arm: ArmServer, auth_file: Path) -> None:
    names = [f"condorc{cluster}p0" for cluster in range(100)]
    arm.seed_vms("pool", names)
    arm.resource("pool", f"{VMS}/condorc7p0").power = "deallocated"  # type: ignore[union-attr]
    arm.clear_log()
    result = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION)
    statuses = dict(zip(result[2::2], result[3::2], strict=True))
    assert result[0] == "NULL" and int(result[1]) == len(statuses) >= 100
    assert statuses["condorc7p0"].endswith("PowerState/deallocated")
    assert statuses["condorc99p0"].endswith("PowerState/running")
    listing = arm.requests("GET", f"/subscriptions/{SUBSCRIPTION}/providers/{VMS}$")
    first = [entry for entry in listing if "$skiptoken" not in entry.query]
    assert len(first) == 1  # one list operation; the rest are its pages (nextLink)
    assert first[0].query["$expand"] == "instanceView"
    assert len(listing) == -(-len(statuses) // arm.page_size)
    # Nothing per VM: every request of this poll was the list or its pages.
    assert len(arm.log) == len(listing)
    # A resource group's VMs: one call too.
    arm.clear_log()
    result = wire.call("AZURE_VM_LIST", str(auth_file), SUBSCRIPTION, "pool")
    assert result[1] == "100"
    assert {entry.path for entry in arm.log} == {
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/pool/providers/{VMS}"
    }


def test_a_failure_before_anything_exists_keeps_its_own_error(
    wire: AzureWire, arm: ArmServer, auth_file: Path, ssh_key_file: Path
) -> None:
    arm.fault("PUT", "/resourcegroups/earlyvm$", 500, "InternalServerError", "boom", times=3)
    [error] = wire.call(
        "AZURE_VM_CREATE", str(auth_file), SUBSCRIPTION, *vm_args("earlyvm", ssh_key_file)
    )
    info = Failure.of(error)
    # Not the roll-back's "could not be found": the error that stopped the creation.
    assert info is not None and info.code == "InternalServerError" and info.transient, error
    assert "earlyvm" not in arm.store.groups
