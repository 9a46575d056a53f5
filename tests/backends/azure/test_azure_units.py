"""The Azure GAHP's pure parts: argument parsing, auth files, error strings, ARM bodies."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from htgrid.backends.azure._args import (
    ImageRef,
    ListQuery,
    Target,
    parse_list,
    parse_scale,
    parse_schedule,
    parse_target,
    parse_vm_create,
    parse_vmss_create,
)
from htgrid.backends.azure._errors import (
    AzureArgumentError,
    AzureServiceError,
    translate_errors,
)
from htgrid.backends.azure._expiry import autoscale_body, check_vm_expiry, shutdown_schedule_body
from htgrid.backends.azure._keyvault import fetch_script
from htgrid.backends.azure._session import PUBLIC_ARM, read_auth_file
from htgrid.errors import HTGridError
from htgrid.gahp.commands.azure import Failure

BASE = ["name=vm1", "location=EastUS", "size=Standard_B1s", "image=a:b:c:d"]
UTC = datetime.UTC


def test_vm_create_keys_are_case_insensitive_and_null_means_unset() -> None:
    spec = parse_vm_create(
        [*BASE, "ADMINUSERNAME=bob", "adminSshKey=ssh-rsa AAA", "customData=NULL", "NULL"]
    )
    assert spec.location == "eastus" and spec.admin_username == "bob"
    assert spec.admin_key == "ssh-rsa AAA" and spec.custom_data is None
    assert spec.image == ImageRef(urn=("a", "b", "c", "d")) and spec.os_type == "Linux"
    assert spec.public_ip == "create" and spec.resource_group is None


def test_images_aliases_ids_and_vhds() -> None:
    windows = parse_vm_create([*BASE[:3], "image=windows-server-latest"])
    assert windows.os_type == "Windows" and windows.image.urn is not None
    image_id = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/images/i"
    by_id = parse_vm_create([*BASE[:3], f"image={image_id}"])
    assert by_id.image.reference() == {"id": image_id}
    vhd = parse_vm_create([*BASE[:3], "image=https://acct.blob.core.windows.net/v/x.vhd"])
    assert vhd.image.vhd_uri is not None and vhd.image.reference("made") == {"id": "made"}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([*BASE, "tag=htgrid-owner=me"], "reserved"),
        ([*BASE, "dataDisks=0"], "data disk size"),
        ([*BASE, "publicIPAddress=somewhere"], "publicIPAddress"),
        ([*BASE, "name=again"], "given twice"),
        ([*BASE[1:], "name=-bad-"], "invalid name"),
        ([*BASE, "osType=Plan9"], "osType"),
        ([*BASE, "schedule=2026-01-01T00:00"], "time zone"),
        ([*BASE, "bare"], "key=value"),
    ],
)
def test_bad_vm_arguments(args: list[str], words: str) -> None:
    with pytest.raises(AzureArgumentError, match=words) as caught:
        parse_vm_create(args)
    assert isinstance(caught.value, HTGridError) and not caught.value.transient


def test_tags_follow_the_protocol_text() -> None:
    spec = parse_vm_create([*BASE, "tag=owner=alice", "tag=flag", "tag=team=a=b"])
    assert spec.tags == (("owner", "alice"), ("flag", ""), ("team", "a=b"))


def test_vmss_arguments() -> None:
    spec = parse_vmss_create(
        [
            *BASE,
            "nodecount=4",
            "keyvaultName=kv",
            "vaultKey=tok",
            "deletionjob",
            "schedule=203001021530",
        ]
    )
    assert spec.node_count == 4 and spec.key_vault is not None
    assert spec.key_vault.destination == "/etc/condor/tokens.d/tok"
    assert spec.vm.expiry == datetime.datetime(2030, 1, 2, 15, 30, tzinfo=UTC)
    with pytest.raises(AzureArgumentError, match="deletionjob"):
        parse_vmss_create([*BASE, "deletionjob"])
    with pytest.raises(AzureArgumentError, match="go together"):
        parse_vmss_create([*BASE, "keyvaultName=kv"])
    with pytest.raises(AzureArgumentError, match="nodecount"):
        parse_vmss_create([*BASE, "nodecount=-1"])


def test_targets_lists_and_scaling() -> None:
    assert parse_target(["vm1"]) == Target("vm1")
    assert parse_target(["rg", "vm1"]) == Target("vm1", "rg")
    assert parse_list([]) == ListQuery()
    assert parse_list(["rg", "tag=a", "tag=b=c"]) == ListQuery(
        "rg", None, (("a", None), ("b", "c"))
    )
    assert parse_scale(["name=s", "nodecount=3"]).node_count == 3
    assert parse_scale(["rg", "s", "2"]).target == Target("s", "rg")
    assert parse_scale(["s", "0"]).node_count == 0
    with pytest.raises(AzureArgumentError):
        parse_scale(["s"])


def test_schedules() -> None:
    assert parse_schedule("202612312359") == datetime.datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert parse_schedule("2026-12-31T23:59:00+01:00").hour == 22
    now = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    check_vm_expiry(now + datetime.timedelta(hours=23), now)
    for bad in (now, now + datetime.timedelta(hours=24)):
        with pytest.raises(AzureArgumentError):
            check_vm_expiry(bad, now)


def test_expiry_bodies() -> None:
    moment = datetime.datetime(2030, 5, 6, 7, 8, tzinfo=UTC)
    schedule = shutdown_schedule_body("/vm/id", "eastus", moment, "vm1")
    assert schedule["properties"]["dailyRecurrence"] == {"time": "0708"}
    assert schedule["tags"] == {"htgrid-owner": "vm1", "htgrid-expiry": "2030-05-06T07:08:00Z"}
    scale = autoscale_body("/vmss/id", "eastus", moment, "pool")
    fixed = scale["properties"]["profiles"][1]["fixedDate"]
    assert fixed["start"] == "2030-05-06T07:08:00Z" and fixed["end"] > fixed["start"]


def test_fetch_script_uses_the_vaults_own_cloud() -> None:
    script = fetch_script("https://kv1.vault.usgovcloudapi.net/", "tok", "/tmp/my dir/tok")
    assert "resource=https://vault.usgovcloudapi.net" in script
    assert "https://kv1.vault.usgovcloudapi.net/secrets/tok?api-version=7.4" in script
    assert "dest='/tmp/my dir/tok'" in script


def test_auth_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = tmp_path / "text.auth"
    text.write_text("# comment\nclient_id abc\nsecret s e\ntenant_id t\nresource_group pool\n")
    settings = read_auth_file(str(text))
    assert (settings.client_id, settings.client_secret, settings.tenant_id) == ("abc", "s e", "t")
    assert settings.arm_url == PUBLIC_ARM and settings.resource_group == "pool"
    assert "s e" not in repr(settings)
    sdk_auth = tmp_path / "sdk.json"
    sdk_auth.write_text(
        json.dumps(
            {
                "clientId": "c",
                "clientSecret": "x",
                "tenantId": "t",
                "activeDirectoryEndpointUrl": "https://login.microsoftonline.us/",
                "resourceManagerEndpointUrl": "https://management.usgovcloudapi.net/",
            }
        )
    )
    gov = read_auth_file(str(sdk_auth))
    assert gov.authority == "https://login.microsoftonline.us"
    assert gov.arm_url == "https://management.usgovcloudapi.net"
    incomplete = tmp_path / "bad.auth"
    incomplete.write_text("client_id abc\n")
    with pytest.raises(AzureServiceError, match="secret"):
        read_auth_file(str(incomplete))
    monkeypatch.setenv("AZURE_TENANT_ID", "te")
    monkeypatch.setenv("AZURE_CLIENT_ID", "ci")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "cs")
    assert read_auth_file("NULL").client_id == "ci"


def test_error_strings_round_trip() -> None:
    error = AzureServiceError(
        "Rate  limit\nexceeded", code="TooManyRequests", status=429, transient=True
    )
    text = error.error_string("Error listing VMs")
    assert text == "Error listing VMs: TooManyRequests (HTTP 429, transient): Rate limit exceeded"
    info = Failure.of(text)
    assert info is not None and info.transient and info.status == 429
    no_status = Failure.of(AzureServiceError("x", code="ConnectionError").error_string("E"))
    assert no_status is not None and no_status.status is None
    assert Failure.of("some other text") is None


def test_translate_errors_maps_azure_core_exceptions() -> None:
    from azure.core.exceptions import ServiceRequestError

    with pytest.raises(AzureServiceError) as caught, translate_errors():
        raise ServiceRequestError("connection refused")
    assert caught.value.transient and caught.value.code == "ConnectionError"
    with pytest.raises(AzureServiceError) as local, translate_errors():
        open("/nonexistent/file")  # noqa: SIM115
    assert local.value.code == "LocalError" and not local.value.transient


def test_a_key_that_is_not_an_ssh_key_is_the_admin_password() -> None:
    from htgrid.backends.azure._vm import os_profile

    windows = parse_vm_create(
        [*BASE[1:3], "image=windows-server-latest", "name=averylongwindowsname"]
    )
    profile = os_profile(windows, "Sup3r-secret!", scale_set=False)
    assert profile["adminPassword"] == "Sup3r-secret!" and "linuxConfiguration" not in profile
    assert profile["computerName"] == "averylongwindow"  # Windows names stop at 15
    with pytest.raises(AzureArgumentError, match="admin key"):
        os_profile(windows, None, scale_set=True)


def test_a_request_past_its_time_is_a_transient_timeout(tmp_path: Path) -> None:
    import asyncio
    import time

    from htgrid.backends.azure.server import AzureGahp, AzureOptions
    from htgrid.gahp import Call, Credentials

    auth = tmp_path / "azure.auth"
    auth.write_text("client_id c\nsecret s\ntenant_id t\n")
    gahp = AzureGahp(AzureOptions(timeout=0.2))

    def slow(session: object, args: tuple[str, ...]) -> list[str]:
        time.sleep(1.0)
        return ["NULL"]

    call = Call("AZURE_PING", 1, (str(auth), "sub"), Credentials())
    try:
        [error] = asyncio.run(gahp.run(call, "Error pinging Azure", slow))
    finally:
        gahp.close()
    info = Failure.of(error)
    assert info is not None and info.code == "Timeout" and info.transient
