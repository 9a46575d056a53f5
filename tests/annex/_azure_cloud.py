"""The fake ARM (tests/backends/azure) stands in for Azure: one server for a module,
emptied for each test, with the annex's setup done in it; the lease runbook run
in-process with the Automation account's managed identity and the event its job has."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import AzureAnnexes, azure_setup, azure_timer
from htgrid.annex import azure_runbook as rb
from htgrid.testing.annex import BootHarness, Route, metadata_server

_ARM = Path(__file__).resolve().parents[1] / "grid" / "_azure_arm.py"


def _fake_arm() -> Any:
    name = "annex_tests_azure_arm"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, _ARM)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


_fake = _fake_arm()
ArmServer = _fake.ArmServer
SUBSCRIPTION: str = _fake.SUBSCRIPTION
arm = _fake.arm  # the module's server (fixture)
LOCATION = "eastus"
IMAGE = "Canonical:ubuntu-24_04-lts:server:latest"


@pytest.fixture
def azure(arm: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An empty subscription with the annex's setup done; the fake ARM."""
    arm.reset()
    server = _fake_arm_module()
    for key, value in {
        "AZURE_TENANT_ID": server.TENANT,
        "AZURE_CLIENT_ID": server.CLIENT_ID,
        "AZURE_CLIENT_SECRET": server.CLIENT_SECRET,
        "AZURE_AUTHORITY_HOST": arm.url,
        "AZURE_RESOURCE_MANAGER_URL": arm.url,
        "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
        "SSL_CERT_FILE": str(arm.ca_file),
        "HTGRID_ANNEX_VAULT_URL": f"{arm.url}/vault/{{vault}}",
        "HTGRID_ANNEX_SCM_URL": f"{arm.url}/scm/{{app}}",
        "HTGRID_ANNEX_POLL_ARM": "0.01",
        "NO_PROXY": "127.0.0.1,localhost",
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)
    made = azure_setup(AzureAnnexes(LOCATION), users=(server.CLIENT_ID,))
    arm.store.users.add(server.CLIENT_ID)
    arm.setup = made
    yield arm


def _fake_arm_module() -> Any:
    return sys.modules["backends.azure.arm_server"]


def cloud(clock: Any = None) -> AzureAnnexes:
    return AzureAnnexes(LOCATION) if clock is None else AzureAnnexes(LOCATION, clock=clock)


def runbook_arm(arm: Any, event: dict[str, Any]) -> rb.Arm:
    """The runbook's client as Automation would give it: the account's identity."""
    account = arm.resource("htgrid-annex", "Microsoft.Automation/automationAccounts/htgrid-annex")
    principal = account.body["identity"]["principalId"]
    token = arm.managed_identity_token(principal)
    place = rb.Place.of(event)
    return rb.Arm(
        place,
        lambda resource: token,
        vault_url=f"{arm.url}/vault/{place.vault}",
        context=ssl.create_default_context(cafile=str(arm.ca_file)),
        poll=0.01,
    )


def timer_arm(arm: Any) -> rb.Arm:
    """The lease timer's client as Functions would give it: the app's identity and the
    place in its app settings."""
    (site,) = arm.store.of_type("microsoft.web/sites")
    token = arm.managed_identity_token(site.body["identity"]["principalId"])
    settings = {s["name"]: s["value"] for s in site.body["properties"]["siteConfig"]["appSettings"]}
    place = rb.Place.of(json.loads(settings["HTGRID_ANNEX_PLACE"]))
    return rb.Arm(
        place,
        lambda resource: token,
        context=ssl.create_default_context(cafile=str(arm.ca_file)),
        poll=0.01,
    )


def tick(arm: Any, now: float) -> dict[str, Any]:
    """One run of the lease timer with the clock at `now` (a wait moves the clock)."""
    clock = [now]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return azure_timer.tick(timer_arm(arm), lambda: clock[0], sleep)


def run_with_identity(arm: Any, principal: str, argv: list[str], cwd: Path,
                      env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`argv` run alone (a Python without htgrid's path), with `principal`'s managed
    identity at IDENTITY_ENDPOINT, as Automation and Functions give it."""
    token = arm.managed_identity_token(principal)

    def identity(method: str, path: str) -> tuple[int, str] | None:
        if method == "GET" and path.startswith("/msi/token?"):
            return 200, json.dumps({"access_token": token, "token_type": "Bearer"})
        return None

    server = metadata_server("127.0.0.1", identity, lambda: None)
    try:
        full = {
            **(env or {}),
            "IDENTITY_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}/msi/token",
            "IDENTITY_HEADER": "identity-secret",
            "SSL_CERT_FILE": str(arm.ca_file),
            "NO_PROXY": "*",
            "PATH": os.environ["PATH"],
        }
        return subprocess.run(
            [sys.executable, "-I", *argv], env=full, capture_output=True, text=True,
            timeout=120, cwd=cwd,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()


def run_jobs(arm: Any, now: float) -> list[dict[str, Any]]:
    """Every job Automation would have started by `now`, run with the clock at `now`."""
    results = []
    for _, parameters in arm.jobs_due(now):
        event = json.loads(parameters["event"])
        results.append(rb.handler(event, runbook_arm(arm, event), now))
    return results


def lease_events(arm: Any) -> list[dict[str, Any]]:
    """The events of the annexes' lease jobs (not the sweeper's)."""
    events = [json.loads(p["event"]) for _, p in arm.jobs_due(float("inf"))]
    return [e for e in events if e["htgrid"] == "annex-lease"]


def sweeper_event(arm: Any) -> dict[str, Any]:
    (event,) = [
        json.loads(p["event"]) for s, p in arm.jobs_due(float("inf")) if s == rb.SWEEPER_SCHEDULE
    ]
    return dict(event)


NOTHING = {
    "scale_sets": [],
    "instances": [],
    "schedules": [],
    "job_schedules": [],
    "secrets": [],
    "access_policies": [],
    "role_assignments": [],
}


class AzureHarness(BootHarness):
    """Boots the instances of the annexes' scale sets in the fake ARM. A scale set's VM
    has Azure's metadata service (its compute name and resource id, its managed
    identity's tokens); one that shuts itself down is `stopped` (Azure keeps it
    allocated, and billed), one deleted through ARM is gone."""

    def __init__(self, workdir: Path, arm: Any, **kwargs: Any) -> None:
        super().__init__(workdir, **kwargs)
        self.arm = arm

    def _sets(self) -> dict[str, tuple[Any, dict[str, Any]]]:
        with self.arm._lock:
            return {
                f"{res.body['name']}_{vm['instanceId']}": (res, vm)
                for res in self.arm.store.of_type("microsoft.compute/virtualmachinescalesets")
                if rb.ANNEX_TAG in (res.body.get("tags") or {})
                for vm in self.arm.store.instances.get(res.id.lower(), [])
            }

    def states(self) -> dict[str, str]:
        found = self._sets()
        states = {i: "running" if vm["power"] == "running" else "shutting-down"
                  for i, (_, vm) in found.items()}  # fmt: skip
        states.update({i: "terminated" for i in self.booted() if i not in found})
        return states

    def user_data(self, instance_id: str) -> str:
        res, _ = self._sets()[instance_id]
        profile = res.body["properties"]["virtualMachineProfile"]
        return base64.b64decode(profile["osProfile"]["customData"]).decode()

    def routes(self, instance_id: str) -> Route:
        res, _ = self._sets()[instance_id]
        principal = res.body["identity"]["principalId"]

        def route(method: str, path: str) -> tuple[int, str] | None:
            if method != "GET":
                return None
            if path.startswith("/metadata/instance/compute?"):
                number = instance_id.rsplit("_", 1)[1]
                compute = {
                    "name": instance_id,
                    "vmScaleSetName": res.body["name"],
                    "resourceId": f"{res.id}/virtualMachines/{number}",
                    "priority": res.body["properties"]["virtualMachineProfile"].get(
                        "priority", "Regular"
                    ),
                }
                return 200, json.dumps(compute)
            if path.startswith("/metadata/identity/oauth2/token?"):
                token = self.arm.managed_identity_token(principal)
                return 200, json.dumps({"access_token": token, "token_type": "Bearer"})
            return None

        return route

    def shut_down(self, instance_id: str) -> None:
        _, vm = self._sets().get(instance_id, (None, None))
        if vm is not None:
            vm["power"] = "stopped"
