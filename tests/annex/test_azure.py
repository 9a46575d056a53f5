"""The annex on Azure, against the fake ARM: the lease (an Automation schedule at its end
running the lease runbook) is installed before any scale set is made, and the runbook
(run in-process with the job's event, the account's managed identity and an injected
clock) ends everything of the annex at its end: scale sets with their instances, the
vault access of their identities, the Key Vault secrets, the schedules."""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import (
    AnnexCloudError,
    Annexes,
    AnnexNotFound,
    AnnexSpec,
    SetupMissing,
    azure_setup,
    azure_user_role,
    runbook_source,
    settings_of,
)
from htgrid.annex import azure_runbook as rb
from htgrid.annex._azure import assign
from htgrid.client import StoredToken
from htgrid.testing import run_cli
from htgrid.testing.annex import metadata_server

from ._azure_cloud import (
    IMAGE,
    NOTHING,
    arm,
    azure,
    cloud,
    lease_events,
    run_jobs,
    run_with_identity,
    runbook_arm,
    sweeper_event,
    tick,
)
from .conftest import home, kill_creates_at_random

__all__ = ["arm", "azure", "home"]

SRC = Path(__file__).resolve().parents[2] / "src"


def annexes(home: Path, clock: Any = None) -> Annexes:
    return Annexes(cloud(clock), home, pool="127.0.0.1:1")


def _create(home: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(
        home, "annex", "create", "--cloud", "azure", *args, "--image-ids", IMAGE,
        "--pool", "127.0.0.1:1",
    )  # fmt: skip


def _scale_sets(arm: Any) -> list[Any]:
    return arm.store.of_type("microsoft.compute/virtualmachinescalesets")


def test_setup_publishes_the_runbook_and_its_hourly_sweeper(azure: Any, home: Path) -> None:
    account = "Microsoft.Automation/automationAccounts/htgrid-annex"
    book = azure.resource("htgrid-annex", f"{account}/runbooks/htgrid-annex-lease")
    assert book.body["properties"]["runbookType"] == "Python3"
    assert book.body["properties"]["state"] == "Published"
    # What Automation runs is this package's azure_runbook.py, alone: no htgrid import.
    (content,) = azure.store.published.values()
    assert content == runbook_source() and "import htgrid" not in content
    sweeper = azure.resource("htgrid-annex", f"{account}/schedules/{rb.SWEEPER_SCHEDULE}")
    assert sweeper.body["properties"]["frequency"] == "Hour"
    assert sweeper_event(azure)["htgrid"] == "annex-sweep"
    # Setup again: nothing fails, nothing doubles.
    status, out, err = run_cli(home, "annex", "setup", "--cloud", "azure")
    assert status == 0, err
    assert "Microsoft.Compute/virtualMachineScaleSets/*" in out
    assert len(azure.jobs_due(float("inf"))) == 1


def test_without_setup_create_refuses_and_makes_nothing(azure: Any, home: Path) -> None:
    azure.reset()
    with pytest.raises(SetupMissing, match="htgrid annex setup --cloud azure"):
        annexes(home).create(AnnexSpec("a1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    assert _scale_sets(azure) == []


def test_the_lease_is_installed_before_any_scale_set(azure: Any, home: Path) -> None:
    azure.clear_log()
    annexes(home).create(AnnexSpec("a1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    puts = [(e.method, e.path.lower()) for e in azure.requests() if e.method in ("PUT", "PATCH")]

    def first(fragment: str, method: str = "PUT") -> int:
        return next(i for i, (m, p) in enumerate(puts) if m == method and fragment in p)

    assert first("/schedules/") < first("/jobschedules/") < first("virtualmachinescalesets")
    assert first("/vault/") < first("virtualmachinescalesets")  # the token
    # The identity has its roles before the set has an instance.
    assert first("/roleassignments/") < first("virtualmachinescalesets", "PATCH")
    assert azure.annex_leftovers()["instances"] != []


def test_the_runbook_ends_the_annex_at_its_lease_end_and_not_before(azure: Any, home: Path) -> None:
    status, _, err = _create(home, "a1", "--count", "3", "--lifetime", "2h")
    assert status == 0, err
    assert len(azure.annex_leftovers()["instances"]) == 3
    (event,) = lease_events(azure)
    end = event["LeaseExpiration"]
    # The lease's schedule has not come yet (only the sweeper's has).
    assert [r for r in run_jobs(azure, end - 1) if "annex" in r] == []
    early = rb.handler(event, runbook_arm(azure, event), end - 1)
    assert early["expired"] is False
    # The sweeper leaves a live lease alone.
    rb.handler(sweeper_event(azure), runbook_arm(azure, event), end - 1)
    assert len(azure.annex_leftovers()["instances"]) == 3
    # The lease's job, as Automation starts it at the schedule's time.
    (due,) = [json.loads(p["event"]) for s, p in azure.jobs_due(end) if s != rb.SWEEPER_SCHEDULE]
    assert due == event
    done = rb.handler(due, runbook_arm(azure, due), end)
    assert done["expired"] is True and len(done["deleted"]) == 1
    assert azure.annex_leftovers() == NOTHING
    # Run again (a second job raced the first): nothing fails.
    assert rb.handler(event, runbook_arm(azure, event), end + 60)["deleted"] == []


def test_the_token_reaches_instances_through_key_vault_not_custom_data(
    azure: Any, home: Path
) -> None:
    now = time.time()
    made = annexes(home, clock=lambda: now).create(
        AnnexSpec("t1", count=1, lifetime=5400, image_ids=(IMAGE,), owners=("alice",))
    )
    (vmss,) = _scale_sets(azure)
    assert made.ids == (vmss.body["name"],)
    assert vmss.body["tags"][rb.ANNEX_TAG] == "t1"
    (secrets,) = [s for s in azure.store.vault_secrets.values() if s]
    token = secrets[rb.secret_name("t1", "token")]
    assert token["attributes"]["exp"] == int(now + 5400)  # Key Vault refuses it after
    claims = StoredToken.read(token["value"]).claims
    assert claims["exp"] == int(now + 5400) and claims["sub"].startswith("t1.annex@")
    profile = vmss.body["properties"]["virtualMachineProfile"]
    user_data = base64.b64decode(profile["osProfile"]["customData"]).decode()
    assert token["value"] not in user_data and token["value"].split(".")[1] not in user_data
    settings = settings_of(user_data)
    assert settings["cloud"] == "azure" and settings["token_secret"] == rb.secret_name(
        "t1", "token"
    )
    # The scale set's identity may read its annex's token and lease (Key Vault Secrets
    # User on those two secrets) and delete its own set's instances: nothing more.
    principal = vmss.body["identity"]["principalId"]
    # The user's own vault, the one setup made for them.
    (vault,) = [
        v for v in azure.store.of_type("microsoft.keyvault/vaults")
        if v.body["name"] in azure.setup["user_vaults"].values()
    ]  # fmt: skip
    roles = {
        (a["properties"]["scope"], a["properties"]["roleDefinitionId"].rsplit("/", 1)[1])
        for a in azure.store.role_assignments.values()
        if a["properties"]["principalId"] == principal
    }
    ((node_guid, node_def),) = [
        (g, d)
        for g, d in azure.store.role_definitions.items()
        if d["properties"]["roleName"].startswith("htgrid-annex-node")
    ]
    assert node_def["properties"]["permissions"][0]["actions"] == [
        "Microsoft.Compute/virtualMachineScaleSets/delete/action"
    ]
    user = "4633458b-17de-408a-b874-0445c86b69e6"  # Key Vault Secrets User
    assert roles == {
        (f"{vault.id}/secrets/{rb.secret_name('t1', 'token')}", user),
        (f"{vault.id}/secrets/{rb.secret_name('t1', 'lease')}", user),
        (vmss.id, node_guid),
    }


def test_extend_moves_the_lease_in_azure(azure: Any, home: Path) -> None:
    now = [time.time()]
    ann = annexes(home, clock=lambda: now[0])
    ann.create(AnnexSpec("e1", count=1, lifetime=600, image_ids=(IMAGE,)))
    (old,) = lease_events(azure)
    now[0] += 120
    new = ann.extend("e1", lifetime=3600)
    (event,) = lease_events(azure)  # the earlier schedule is gone
    assert event["LeaseExpiration"] == int(new) and int(new) > old["LeaseExpiration"]
    assert _scale_sets(azure)[0].body["tags"][rb.LEASE_TAG] == str(int(new))
    # Its job, had it started anyway, finds the later lease and ends nothing.
    assert rb.handler(old, runbook_arm(azure, old), old["LeaseExpiration"])["expired"] is False
    assert len(azure.annex_leftovers()["instances"]) == 1
    (secrets,) = [s for s in azure.store.vault_secrets.values() if s]
    token = secrets[rb.secret_name("e1", "token")]["value"]
    assert StoredToken.read(token).claims["exp"] == int(new)
    run_jobs(azure, new)
    assert azure.annex_leftovers() == NOTHING
    with pytest.raises(AnnexNotFound):
        ann.extend("e1", lifetime=3600)


def test_shutdown_and_add(azure: Any, home: Path) -> None:
    assert _create(home, "s1", "--count", "1", "--lifetime", "1h")[0] == 0
    assert _create(home, "s2", "--count", "2", "--lifetime", "1h")[0] == 0
    status, _, err = run_cli(home, "annex", "add", "s1", "--cloud", "azure", "--count", "2")
    assert status == 0, err
    (s1,) = annexes(home).describe("s1")
    assert s1.requested == 3 and len(s1.instances) == 3 and len(s1.fleets) == 2
    assert {i.state for i in s1.instances} == {"running"}
    status, out, err = run_cli(home, "annex", "status", "s1", "--cloud", "azure", "-json")
    assert status == 0, err
    (ad,) = json.loads(out)
    assert ad["Cloud"] == "azure" and ad["Requested"] == 3 and ad["Booting"] == 3
    status, out, err = run_cli(home, "annex", "shutdown", "s1", "--cloud", "azure")
    assert status == 0, err
    assert "2 scale sets deleted with their VMs, 3 secrets purged" in out
    left = azure.annex_leftovers()
    assert len(left["scale_sets"]) == 1 and all(i.startswith("s2-") for i in left["instances"])
    assert run_cli(home, "annex", "shutdown", "s1", "--cloud", "azure")[0] == 1
    assert run_cli(home, "annex", "list", "--cloud", "azure")[1].split() == ["s2"]
    assert run_cli(home, "annex", "shutdown", "s2", "--cloud", "azure")[0] == 0
    assert azure.annex_leftovers() == NOTHING
    revoked = (home / "etc" / "tokens.revoked").read_text()
    assert revoked.count("annex s1 shut down") == 1


def test_a_spot_annex_is_a_spot_scale_set(azure: Any, home: Path) -> None:
    status, _, err = _create(home, "p1", "--slots", "2", "--spot-price", "0.05", "--lifetime", "1h")
    assert status == 0, err
    (vmss,) = _scale_sets(azure)
    profile = vmss.body["properties"]["virtualMachineProfile"]
    assert profile["priority"] == "Spot" and profile["evictionPolicy"] == "Delete"
    assert profile["billingProfile"] == {"maxPrice": 0.05}
    assert vmss.body["sku"]["capacity"] == 2


def test_a_lease_too_short_for_automation_is_refused_before_anything_is_made(
    azure: Any, home: Path
) -> None:
    status, _, err = _create(home, "x1", "--count", "1", "--lifetime", "2m")
    assert status == 2 and "at least 360 s" in err
    # A scale set has one size and one image.
    status, _, err = _create(
        home,
        "x2",
        "--count",
        "1",
        "--lifetime",
        "1h",
        "--instance-types",
        "Standard_D2s_v3,Standard_F4s",
    )
    assert status == 2 and "one size" in err
    assert azure.annex_leftovers() == NOTHING


@pytest.mark.timeout(600)
@pytest.mark.parametrize("enforcer", ["automation", "timer"])
def test_kill_9_of_create_at_any_moment_leaves_nothing_past_the_lease(
    azure: Any, home: Path, enforcer: str
) -> None:
    """Past the lease, either cloud layer alone ends all: Automation's jobs (the
    leases', then the sweeper's), or one run of the function app's timer."""
    args = ["--cloud", "azure", "--image-ids", IMAGE, "--pool", "127.0.0.1:1", "--count", "2"]
    done = kill_creates_at_random(home, 5, [args])
    assert azure.annex_leftovers()["instances"], f"{done}: no instance at all"
    later = time.time() + 3600 + 60
    if enforcer == "timer":
        tick(azure, later)
    else:
        run_jobs(azure, later)
        event = sweeper_event(azure)
        rb.handler(event, runbook_arm(azure, event), later)
    assert azure.annex_leftovers() == NOTHING, done


def test_a_status_refresh_makes_as_many_calls_for_100_instances_as_for_1_but_pages(
    azure: Any, home: Path
) -> None:
    """One listing of a scale set's instances however many: ARM pages it (the fake at
    50 an answer), and each further page is one more call."""

    def calls(name: str) -> int:
        ann = annexes(home)
        ann.cloud.check_setup()
        before = ann.cloud.calls
        (annex,) = ann.describe(name)
        assert annex.instances
        return ann.cloud.calls - before

    annexes(home).create(AnnexSpec("one", count=1, lifetime=3600, image_ids=(IMAGE,)))
    annexes(home).create(AnnexSpec("many", count=100, lifetime=3600, image_ids=(IMAGE,)))
    assert calls("many") == calls("one") + 100 // azure.page_size - 1


def test_only_a_joining_scale_sets_identity_may_read_the_token(
    azure: Any, home: Path, tmp_path: Path
) -> None:
    boot = tmp_path / "glidein.sh"
    boot.write_text("#!/bin/sh\necho my own startd\n")
    status, _, err = _create(
        home, "g1", "--count", "1", "--lifetime", "1h", "--no-join", "--user-data", str(boot)
    )
    assert status == 0, err
    (own,) = _scale_sets(azure)
    profile = own.body["properties"]["virtualMachineProfile"]
    assert base64.b64decode(profile["osProfile"]["customData"]).decode() == boot.read_text()
    assert "identity" not in own.body  # no token, no identity to read one
    annexes(home).create(AnnexSpec("j1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    (joining,) = [s for s in _scale_sets(azure) if s.body["tags"][rb.ANNEX_TAG] == "j1"]
    event = lease_events(azure)[0]
    vault = rb.Place.of(event).vault

    def read_as(principal: str) -> str | None:
        reader = runbook_arm(azure, event)
        token = azure.managed_identity_token(principal)
        reader.token = lambda resource: token
        reader.vault_url = f"{azure.url}/vault/{vault}"
        return reader.get_secret(rb.secret_name("j1", "token"))

    assert read_as(joining.body["identity"]["principalId"])
    with pytest.raises(rb.ArmFailure, match=r"Forbidden.*getSecret"):
        read_as("00000000-0000-0000-0000-0000000000aa")
    # Past the lease, Key Vault itself refuses the token (its expiry), runbook or not.
    secret = next(s for s in azure.store.vault_secrets.values() if s)
    secret[rb.secret_name("j1", "token")]["attributes"]["exp"] = int(time.time()) - 1
    with pytest.raises(rb.ArmFailure, match="not allowed"):
        read_as(joining.body["identity"]["principalId"])


def test_an_annex_identity_reads_its_own_token_and_deletes_its_own_vms_only(
    azure: Any, home: Path
) -> None:
    """Two annexes in one vault and group: A's scale-set identity reads A's token and
    deletes an instance of A's scale set; Key Vault refuses it B's token, ARM the
    deletion of B's instance, and of A's whole scale set."""
    for name in ("ia", "ib"):
        annexes(home).create(AnnexSpec(name, count=2, lifetime=3600, image_ids=(IMAGE,)))
    sets = {s.body["tags"][rb.ANNEX_TAG]: s for s in _scale_sets(azure)}
    event = lease_events(azure)[0]
    place = rb.Place.of(event)

    def as_identity(annex: str) -> rb.Arm:
        arm = runbook_arm(azure, event)
        token = azure.managed_identity_token(sets[annex].body["identity"]["principalId"])
        arm.token = lambda resource: token
        arm.vault_url = f"{azure.url}/vault/{place.vault}"
        return arm

    a = as_identity("ia")
    assert a.get_secret(rb.secret_name("ia", "token"))
    assert a.get_secret(rb.secret_name("ia", "lease"))
    with pytest.raises(rb.ArmFailure, match=r"Forbidden.*getSecret.*htgrid-annex-ib-token"):
        a.get_secret(rb.secret_name("ib", "token"))
    with pytest.raises(rb.ArmFailure, match="Forbidden"):
        list(a.secrets())
    with pytest.raises(rb.ArmFailure, match=r"AuthorizationFailed.*delete/action"):
        a.post(f"{sets['ib'].id}/delete", rb.COMPUTE_API, {"instanceIds": ["0"]})
    with pytest.raises(rb.ArmFailure, match="AuthorizationFailed"):
        a.delete(sets["ia"].id, rb.COMPUTE_API)
    a.post(f"{sets['ia'].id}/delete", rb.COMPUTE_API, {"instanceIds": ["0"]})
    left = azure.annex_leftovers()["instances"]
    assert f"{sets['ia'].body['name']}_0" not in left and len(left) == 3
    assert sets["ia"].body["sku"]["capacity"] == 1  # the set does not make it again
    # A node cut off from ARM only shuts its VM down: the hourly sweeper deletes it.
    azure.store.instances[sets["ib"].id.lower()][1]["power"] = "stopped"
    sweep = sweeper_event(azure)
    done = rb.handler(sweep, runbook_arm(azure, sweep), time.time())
    assert done["stopped"] == [f"{sets['ib'].body['name']}_1"] and done["deleted"] == []
    # The lease's end takes the identities' roles with their scale sets.
    run_jobs(azure, time.time() + 3600 + 60)
    assert azure.annex_leftovers() == NOTHING


def test_the_published_runbook_runs_alone_as_automation_runs_it(
    azure: Any, home: Path, tmp_path: Path
) -> None:
    """The code setup published, as a file of its own, in a Python without htgrid, with
    the account's identity from IDENTITY_ENDPOINT: the sweeper's job ends what no lease
    rules (here a scale set whose lease schedule someone deleted)."""
    annexes(home).create(AnnexSpec("r1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    (event,) = lease_events(azure)
    user = cloud()
    user.check_setup()
    for name, _, _ in rb.leases(user.arm()):
        user.arm().delete(user.place.automation(f"/schedules/{name}"), rb.AUTOMATION_API)
    (content,) = azure.store.published.values()
    script = tmp_path / "runbook.py"
    script.write_text(content)
    account = azure.resource("htgrid-annex", "Microsoft.Automation/automationAccounts/htgrid-annex")
    principal = account.body["identity"]["principalId"]
    argv = [str(script), json.dumps(sweeper_event(azure))]
    ran = run_with_identity(azure, principal, argv, tmp_path)
    assert ran.returncode == 0, ran.stderr
    done = json.loads(ran.stdout)
    assert [d.rsplit("-", 1)[0] for d in done["deleted"]] == [event["AnnexName"]]
    assert azure.annex_leftovers() == NOTHING


def test_a_user_with_the_printed_role_runs_an_annex_and_cannot_set_up(
    azure: Any, home: Path
) -> None:
    """Azure RBAC in the fake ARM: the service principal holds only the role setup
    printed (its actions), as an annex user would."""
    user = cloud()
    user.check_setup()
    server = sys.modules["backends.azure.arm_server"]
    azure.restrict(
        server.CLIENT_ID, azure_user_role(user.place)["Actions"], azure.setup["user_condition"]
    )
    ann = annexes(home)
    ann.create(AnnexSpec("u1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    ann.add("u1", count=1)
    ann.extend("u1", lifetime=7200)
    (u1,) = ann.describe("u1")
    assert len(u1.instances) == 3
    ann.shutdown("u1")
    assert azure.annex_leftovers() == NOTHING
    # The privileged step is not theirs, nor any role but the annex's two (Owner here).
    with pytest.raises(AnnexCloudError, match="AuthorizationFailed"):
        azure_setup(cloud())
    owner = user.place.group_path().split("/resourceGroups/")[0] + (
        "/providers/Microsoft.Authorization/roleDefinitions/8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
    )
    with pytest.raises(rb.ArmFailure, match=r"AuthorizationFailed.*roleAssignments/write"):
        assign(user.arm(), user.place.group_path(), owner, server.CLIENT_ID)


@pytest.mark.parametrize("priority", ["Regular", "Spot"])
def test_a_node_cut_off_from_arm_and_key_vault_still_shuts_its_vm_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path,
    priority: str,
) -> None:  # fmt: skip
    """A node that cannot read its token (Key Vault out of reach, past the lease's end)
    or delete its own VM (ARM out of reach) shuts the VM down anyway, for the sweeper,
    rather than leave it running for nothing. A Spot VM's node does not try to delete
    it: a Spot set one smaller looks evicted, and the lease timer would ask for it
    again; the timer deletes it once stopped, and lowers the set's target."""
    from htgrid.annex import node

    caplog.set_level(logging.INFO, "htgrid.annex.node")
    vm = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/a-1/virtualMachines/0"  # fmt: skip

    def imds(method: str, path: str) -> tuple[int, str] | None:
        if path.startswith("/metadata/instance/compute?"):
            compute = {"name": "a-1_0", "resourceId": vm, "priority": priority}
            return 200, json.dumps(compute)
        return 200, json.dumps({"access_token": "t"})

    server = metadata_server("127.0.0.1", imds, lambda: None)
    settings = {"annex": "a", "cloud": "azure", "lease_end": time.time() - 1,
                "vault_url": "https://127.0.0.1:9/vault/v", "token_secret": "t",
                "lease_secret": "l", "arm_url": "https://127.0.0.1:9"}  # fmt: skip
    monkeypatch.setenv("HTGRID_ANNEX_METADATA_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HTGRID_ANNEX_SHUTDOWN", "exit 7")
    monkeypatch.setattr(node.time, "sleep", lambda seconds: None)
    try:
        assert node.run(settings, tmp_path) == 7
    finally:
        server.shutdown()
        server.server_close()
    assert "cannot read the instance's metadata or the annex's secrets" in caplog.text
    if priority == "Spot":
        assert "leaving this Spot VM to the lease timer" in caplog.text
        assert "cannot delete this instance" not in caplog.text
    else:
        assert "cannot delete this instance" in caplog.text
