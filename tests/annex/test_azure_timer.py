"""The annex's lease timer on Azure, against the fake ARM: setup deploys a function app
running azure_timer every minute with its own managed identity; the timer (run
in-process with the app's identity and settings, and an injected clock) ends an annex
within its lease's last second, whatever a killed `create` left, with no help from the
nodes or from Automation's jobs."""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import AnnexSpec, azure_runbook, azure_timer
from htgrid.annex import azure_runbook as rb
from htgrid.testing import run_cli

from ._azure_cloud import (
    IMAGE,
    NOTHING,
    arm,
    azure,
    cloud,
    lease_events,
    run_with_identity,
    tick,
)
from .conftest import home
from .test_azure import annexes

__all__ = ["arm", "azure", "home"]


def _site(azure: Any) -> Any:
    (site,) = azure.store.of_type("microsoft.web/sites")
    return site


def _package(azure: Any) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(azure.store.deployed[_site(azure).body["name"]]))


def test_setup_deploys_the_timer_with_its_own_identity_and_role(azure: Any, home: Path) -> None:
    site = _site(azure)
    assert site.body["kind"] == "functionapp,linux"
    package = _package(azure)
    binding = json.loads(package.read(f"{azure_timer.FUNCTION}/function.json"))["bindings"][0]
    assert binding["type"] == "timerTrigger" and binding["schedule"] == "0 * * * * *"
    # What the app runs is this package's two files, nothing of htgrid besides.
    init = package.read(f"{azure_timer.FUNCTION}/__init__.py").decode()
    assert init == Path(azure_timer.__file__).read_text() and "htgrid." not in init
    runbook = package.read(f"{azure_timer.FUNCTION}/azure_runbook.py").decode()
    assert runbook == Path(azure_runbook.__file__).read_text()
    principal = site.body["identity"]["principalId"]
    roles = {
        a["properties"]["roleDefinitionId"].rsplit("/", 1)[1]
        for a in azure.store.role_assignments.values()
        if a["properties"]["principalId"] == principal
    }
    runbook_role = next(
        g for g, d in azure.store.role_definitions.items()
        if d["properties"]["roleName"].startswith("htgrid-annex-runbook")
    )  # fmt: skip
    assert runbook_role in roles and "b86a8fe4-44ce-4948-aee5-eccb2c155cd7" in roles
    # Setup again: the same app and identity, the code deployed again.
    azure.store.deployed.clear()
    from htgrid.annex import azure_setup

    azure_setup(cloud())
    assert _site(azure).body["identity"]["principalId"] == principal
    assert _package(azure).namelist()
    # An older setup without the timer: users are told to have it set up again.
    azure.store.resources.pop(site.id.lower())
    from htgrid.annex import SetupMissing

    with pytest.raises(SetupMissing, match="runbook or timer"):
        annexes(home).create(AnnexSpec("o1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    assert azure.annex_leftovers()["schedules"] == []


def test_the_timer_ends_the_annex_at_its_lease_end_to_the_second(azure: Any, home: Path) -> None:
    annexes(home).create(AnnexSpec("t1", count=2, lifetime=900, image_ids=(IMAGE,)))
    (event,) = lease_events(azure)
    end = event["LeaseExpiration"]
    # Two minutes ahead: nothing to do. In the last minute: it waits for the end (the
    # injected clock), then ends everything, the lease itself last.
    assert tick(azure, end - 120)["ended"] == []
    assert len(azure.annex_leftovers()["instances"]) == 2
    done = tick(azure, end - 40)
    ((ended,),) = [done["ended"]]
    assert ended["expired"] is True and len(ended["deleted"]) == 1
    assert azure.annex_leftovers() == NOTHING
    assert tick(azure, end + 60)["ended"] == []


def test_the_timer_follows_an_extended_lease(azure: Any, home: Path) -> None:
    now = [time.time()]
    ann = annexes(home, clock=lambda: now[0])
    ann.create(AnnexSpec("e1", count=1, lifetime=900, image_ids=(IMAGE,)))
    (old,) = lease_events(azure)
    new = ann.extend("e1", lifetime=3600)
    assert tick(azure, old["LeaseExpiration"] + 1)["ended"] == []
    assert len(azure.annex_leftovers()["instances"]) == 1
    assert [e["annex"] for e in tick(azure, new)["ended"]] == ["e1"]
    assert azure.annex_leftovers() == NOTHING


def test_the_timer_ends_a_scale_set_no_lease_rules_once_its_tag_has_passed(
    azure: Any, home: Path
) -> None:
    annexes(home).create(AnnexSpec("u1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    (event,) = lease_events(azure)
    user = cloud()
    user.check_setup()
    user.arm().delete(user.place.automation(f"/schedules/{rb.schedule_name('u1', event['LeaseExpiration'])}"), rb.AUTOMATION_API)  # fmt: skip
    assert tick(azure, event["LeaseExpiration"] - 1)["unruled"] == []
    assert len(tick(azure, event["LeaseExpiration"])["unruled"]) == 1
    assert azure.annex_leftovers()["scale_sets"] == []


def test_the_deployed_timer_runs_alone_as_functions_runs_it(
    azure: Any, home: Path, tmp_path: Path
) -> None:
    """The package setup deployed, unzipped, imported as Functions imports a function's
    folder, in a Python without htgrid, with the app's settings and identity from
    IDENTITY_ENDPOINT: a VM that shut itself down is deleted."""
    annexes(home).create(AnnexSpec("r1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    (vmss,) = azure.store.of_type("microsoft.compute/virtualmachinescalesets")
    azure.store.instances[vmss.id.lower()][0]["power"] = "stopped"
    _package(azure).extractall(tmp_path / "app")
    site = _site(azure)
    settings = {s["name"]: s["value"] for s in site.body["properties"]["siteConfig"]["appSettings"]}
    run = (
        "import sys, logging; sys.path.insert(0, 'app'); "
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
        f"import {azure_timer.FUNCTION} as f; f.main(None)"
    )
    principal = site.body["identity"]["principalId"]
    ran = run_with_identity(azure, principal, ["-c", run], tmp_path, settings)
    assert ran.returncode == 0, ran.stderr
    done = json.loads(ran.stdout.split(":", 2)[2])
    assert done["stopped"] == [f"{vmss.body['name']}_0"] and done["ended"] == []
    assert len(azure.annex_leftovers()["instances"]) == 1


def test_a_spot_annex_gets_back_what_azure_evicts_not_what_went_idle(
    azure: Any, home: Path
) -> None:
    status, _, err = run_cli(
        home, "annex", "create", "p1", "--cloud", "azure", "--image-ids", IMAGE,
        "--pool", "127.0.0.1:1", "--slots", "3", "--spot-price", "0.05", "--lifetime", "1h",
    )  # fmt: skip
    assert status == 0, err
    (vmss,) = azure.store.of_type("microsoft.compute/virtualmachinescalesets")
    name = vmss.body["name"]
    assert vmss.body["tags"][rb.CAPACITY_TAG] == "3"
    (event,) = lease_events(azure)
    now = event["LeaseExpiration"] - 1800
    assert tick(azure, now)["restored"] == {}
    azure.evict(name, "0")
    azure.evict(name, "2")
    assert azure.annex_leftovers()["instances"] == [f"{name}_1"]
    assert tick(azure, now)["restored"] == {name: 2}
    assert azure.annex_leftovers()["instances"] == [f"{name}_1", f"{name}_3", f"{name}_4"]
    assert tick(azure, now + 60)["restored"] == {}
    # A VM that went idle shut itself down: deleted, and not asked for again.
    azure.store.instances[vmss.id.lower()][0]["power"] = "stopped"
    done = tick(azure, now + 120)
    assert done["stopped"] == [f"{name}_1"] and done["restored"] == {}
    assert vmss.body["tags"][rb.CAPACITY_TAG] == "2"
    assert tick(azure, now + 180)["restored"] == {}
    assert len(azure.annex_leftovers()["instances"]) == 2
    azure.evict(name, "3")
    assert tick(azure, now + 240)["restored"] == {name: 1}
    assert len(azure.annex_leftovers()["instances"]) == 2
    # At the lease's end nothing is asked again: all ends.
    azure.evict(name, "4")
    assert tick(azure, event["LeaseExpiration"])["restored"] == {}
    assert azure.annex_leftovers() == NOTHING


def _ad(home: Path, name: str) -> dict[str, Any]:
    status, out, err = run_cli(home, "annex", "status", name, "--cloud", "azure", "-json")
    assert status == 0, err
    (ad,) = json.loads(out)
    return dict(ad)


def test_an_eviction_counts_in_the_annex_ad_as_interrupted_then_replaced(
    azure: Any, home: Path
) -> None:
    """Azure deletes an evicted Spot VM: the ad counts it from the set short of its
    target, and, once the timer has asked for it again, as replaced."""
    status, _, err = run_cli(
        home, "annex", "create", "v1", "--cloud", "azure", "--image-ids", IMAGE,
        "--pool", "127.0.0.1:1", "--slots", "2", "--lifetime", "1h",
    )  # fmt: skip
    assert status == 0, err
    (vmss,) = azure.store.of_type("microsoft.compute/virtualmachinescalesets")
    name = vmss.body["name"]
    ad = _ad(home, "v1")
    assert (ad["Interrupted"], ad["Replaced"], ad["Booting"]) == (0, 0, 2)
    azure.evict(name, "1")
    ad = _ad(home, "v1")
    assert (ad["Interrupted"], ad["Replaced"], ad["Booting"]) == (1, 0, 1)
    (event,) = lease_events(azure)
    now = event["LeaseExpiration"] - 1800
    assert tick(azure, now)["restored"] == {name: 1}
    ad = _ad(home, "v1")
    assert (ad["Interrupted"], ad["Replaced"], ad["Booting"]) == (1, 1, 2)
    # A VM that went idle is neither: the timer deletes it and lowers the target.
    azure.store.instances[vmss.id.lower()][0]["power"] = "stopped"
    assert tick(azure, now + 60)["stopped"] == [f"{name}_0"]
    ad = _ad(home, "v1")
    assert (ad["Interrupted"], ad["Replaced"], ad["Booting"]) == (1, 1, 1)
    azure.evict(name, "2")
    assert (_ad(home, "v1")["Interrupted"], _ad(home, "v1")["Replaced"]) == (2, 1)
    tick(azure, now + 120)
    assert (_ad(home, "v1")["Interrupted"], _ad(home, "v1")["Replaced"]) == (2, 2)
