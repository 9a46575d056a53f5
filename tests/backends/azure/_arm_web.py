"""The fake ARM's parts for the annex's lease timer: storage accounts, App Service plans,
function apps (with a system-assigned managed identity and their app settings), and
Kudu's zip deployment, served at `<fake ARM>/scm/<app>/api/zipdeploy` (a real app's is
`https://<app>.scm.azurewebsites.net/api/zipdeploy`), which takes an ARM token of a
principal allowed `Microsoft.Web/sites/publish/Action` on the app.

What a function app runs is the test's to run: `Store.deployed[app]` is its package.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from . import _arm_rbac as rbac
from ._arm_annex import system_identity
from ._arm_types import PUT_RULES, ArmError, Res, Store, dig, need

STORAGE = "microsoft.storage/storageaccounts"
PLAN = "microsoft.web/serverfarms"
SITE = "microsoft.web/sites"
BLOB_OWNER = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
PUBLISH = "Microsoft.Web/sites/publish/Action"
_RUNTIME_SETTINGS = ("FUNCTIONS_EXTENSION_VERSION", "FUNCTIONS_WORKER_RUNTIME")

Reply = tuple[int, dict[str, str], Any]


def put_storage(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    need(dig(body, "sku", "name"), "sku.name is required", "BadRequest")
    need(body.get("kind") in ("StorageV2", "BlobStorage", "Storage"), "kind is required")
    name = rid.rsplit("/", 1)[1]
    need(3 <= len(name) <= 24 and name.isalnum() and name.islower(),
         f"{name} is not a valid storage account name", "AccountNameInvalid")  # fmt: skip


def put_plan(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    need(dig(body, "sku", "name"), "sku.name is required", "BadRequest")


def put_site(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.setdefault("properties", {})
    store.must(props.get("serverFarmId"), "App Service plan")
    need("functionapp" in str(body.get("kind", "")), "the fake ARM makes function apps only")
    settings = {
        str(s.get("name")): s.get("value")
        for s in dig(props, "siteConfig", "appSettings") or []
        if isinstance(s, dict)
    }
    for name in _RUNTIME_SETTINGS:
        need(settings.get(name), f"app setting {name} is required", "BadRequest")
    need(
        settings.get("AzureWebJobsStorage") or settings.get("AzureWebJobsStorage__accountName"),
        "the Functions host needs AzureWebJobsStorage",
        "BadRequest",
    )
    system_identity(store, body, old)
    name = rid.rsplit("/", 1)[1]
    props.update(state="Running", defaultHostName=f"{name}.azurewebsites.net")


def app_settings(res: Res) -> dict[str, str]:
    found = dig(res.body, "properties", "siteConfig", "appSettings") or []
    return {str(s["name"]): str(s["value"]) for s in found}


def zip_deploy(store: Store, app: str, principal: str | None, allowed: list[str] | None,
               managed: bool, raw: bytes) -> Reply:  # fmt: skip
    """Kudu's POST /api/zipdeploy: the package, checked to be a zip, kept for the app."""
    sites = [r for r in store.of_type(SITE) if r.body["name"].lower() == app.lower()]
    if not sites:
        raise ArmError(404, "NotFound", f"no function app {app}")
    (site,) = sites
    if principal is None:
        return 401, {}, {"Message": "Authorization has been denied for this request."}
    ok = (
        rbac.permits(allowed, PUBLISH)
        if allowed is not None
        else not managed or rbac.granted(store, principal, PUBLISH, site.id)
    )
    if not ok:
        return 403, {}, {"Message": f"{principal} may not deploy to {app}"}
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            need(archive.testzip() is None and "host.json" in archive.namelist(),
                 "a function app's package has host.json at its root", "BadRequest")  # fmt: skip
    except zipfile.BadZipFile:
        raise ArmError(400, "BadRequest", "the body is not a zip file") from None
    store.deployed[site.body["name"]] = raw
    return 200, {}, None


PUT_RULES.update({STORAGE: put_storage, PLAN: put_plan, SITE: put_site})
rbac.BUILT_IN[BLOB_OWNER] = {
    "roleName": "Storage Blob Data Owner",
    "type": "BuiltInRole",
    "permissions": [
        {
            "actions": ["Microsoft.Storage/storageAccounts/blobServices/containers/*"],
            "dataActions": ["Microsoft.Storage/storageAccounts/blobServices/containers/blobs/*"],
        }
    ],
    "assignableScopes": ["/"],
}
