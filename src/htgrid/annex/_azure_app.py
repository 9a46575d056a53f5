"""The lease's timer on Azure, as `htgrid annex setup --cloud azure` installs it: a
function app (Linux, Consumption plan, Python) with a system-assigned managed identity
holding the lease runbook's role, running azure_timer every minute.

Its package is azure_timer.py and azure_runbook.py as one function's folder, deployed
by zip (Kudu's /api/zipdeploy, with the administrator's ARM token, as
`az functionapp deployment source config-zip` does). HTGRID_ANNEX_SCM_URL (with `{app}`)
names the deployment endpoint for another cloud's DNS suffix.
"""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.request
import uuid
import zipfile
from importlib import resources
from typing import Any, Final

from htgrid.annex._azure import (
    BLOB_OWNER,
    RUNBOOK_ROLE,
    SECRETS_OFFICER,
    WEB_API,
    AzureAnnexes,
    assign,
    role_id,
    timer_app,
)
from htgrid.annex.azure_runbook import ARM_URL, Arm, ArmFailure, Place
from htgrid.annex.azure_timer import FUNCTION, function_json

__all__ = ["PLAN", "install_timer", "scm_url", "timer_package"]

STORAGE_API: Final = "2023-05-01"
PLAN: Final = "htgrid-annex-plan"
_RUNTIME: Final = "Python|3.11"


def _storage_name(place: Place) -> str:
    return f"htgridlease{uuid.uuid5(uuid.NAMESPACE_URL, place.group_path()).hex[:12]}"


def scm_url(app: str) -> str:
    template = os.environ.get("HTGRID_ANNEX_SCM_URL") or "https://{app}.scm.azurewebsites.net"
    return template.replace("{app}", app).rstrip("/")


def timer_package() -> bytes:
    """The app's zip: host.json and the timer function's folder."""
    annex = resources.files("htgrid.annex")
    host = {
        "version": "2.0",
        # A run waits up to a minute for a lease's end, then ends annexes.
        "functionTimeout": "00:04:00",
        "extensionBundle": {
            "id": "Microsoft.Azure.Functions.ExtensionBundle",
            "version": "[4.*, 5.0.0)",
        },
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("host.json", json.dumps(host, indent=2))
        archive.writestr("requirements.txt", "# the standard library only\n")
        archive.writestr(f"{FUNCTION}/function.json", json.dumps(function_json(), indent=2))
        archive.writestr(f"{FUNCTION}/__init__.py", annex.joinpath("azure_timer.py").read_text())
        archive.writestr(
            f"{FUNCTION}/azure_runbook.py", annex.joinpath("azure_runbook.py").read_text()
        )
    return buffer.getvalue()


def _deploy(arm: Arm, app: str, package: bytes) -> None:
    """Kudu's synchronous zip deployment."""
    request = urllib.request.Request(f"{scm_url(app)}/api/zipdeploy", data=package, method="POST")
    request.add_header("Authorization", f"Bearer {arm.token(ARM_URL)}")
    request.add_header("Content-Type", "application/zip")
    arm.calls += 1
    try:
        with urllib.request.urlopen(request, timeout=300, context=arm.context) as answer:
            answer.read()
    except urllib.error.HTTPError as err:
        raise ArmFailure(
            f"deploying the lease timer to {app}",
            err.code,
            "DeploymentFailed",
            err.read()[:200].decode(errors="replace"),
        ) from None


def install_timer(cloud: AzureAnnexes, vault_path: str, condition: str) -> dict[str, Any]:
    """The storage account, plan and function app; the app's identity's roles; the
    timer's code. Again: the same resources, the code deployed again."""
    place, arm, location = cloud.place, cloud.arm(), cloud.region
    storage = _storage_name(place)
    storage_path = place.provider(f"Microsoft.Storage/storageAccounts/{storage}")
    arm.put(
        storage_path,
        STORAGE_API,
        {
            "location": location,
            "kind": "StorageV2",
            "sku": {"name": "Standard_LRS"},
            "properties": {
                "minimumTlsVersion": "TLS1_2",
                "allowBlobPublicAccess": False,
                # The app reaches it with its identity: no account key anywhere.
                "allowSharedKeyAccess": False,
            },
        },
    )
    plan = place.provider(f"Microsoft.Web/serverfarms/{PLAN}")
    arm.put(
        plan,
        WEB_API,
        {
            "location": location,
            "kind": "functionapp",
            "sku": {"name": "Y1", "tier": "Dynamic"},
            "properties": {"reserved": True},
        },
    )
    app = timer_app(place)
    settings = {
        "FUNCTIONS_EXTENSION_VERSION": "~4",
        "FUNCTIONS_WORKER_RUNTIME": "python",
        "AzureWebJobsStorage__accountName": storage,
        "HTGRID_ANNEX_PLACE": json.dumps(place.event(), sort_keys=True),
    }
    site = arm.put(
        place.provider(f"Microsoft.Web/sites/{app}"),
        WEB_API,
        {
            "location": location,
            "kind": "functionapp,linux",
            "identity": {"type": "SystemAssigned"},
            "properties": {
                "serverFarmId": plan,
                "reserved": True,
                "httpsOnly": True,
                "siteConfig": {
                    "linuxFxVersion": _RUNTIME,
                    "ftpsState": "Disabled",
                    "appSettings": [{"name": k, "value": v} for k, v in settings.items()],
                },
            },
        },
    )
    principal = str(((site or {}).get("identity") or {})["principalId"])
    assign(arm, place.group_path(), role_id(place, RUNBOOK_ROLE), principal, condition)
    assign(arm, vault_path, role_id(place, SECRETS_OFFICER), principal)
    assign(arm, storage_path, role_id(place, BLOB_OWNER), principal)
    _deploy(arm, app, timer_package())
    return {"function_app": app, "function": FUNCTION, "storage_account": storage}
