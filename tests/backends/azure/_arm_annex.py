"""The fake ARM's parts for the annex: Automation (accounts with a managed identity,
Python runbooks with draft content and publishing, schedules, job schedules), a scale
set's instances, and one vault's Key Vault data plane (secrets, checked against the
vault's access policies for the caller's principal, or Azure RBAC's role assignments
for a vault with enableRbacAuthorization), and Azure RBAC for ARM (_arm_rbac): a
managed identity may do only what its role assignments grant.

The data plane is served at `<fake ARM>/vault/<vault name>/...` (a real vault is at
`https://<name>.vault.azure.net/...`, which 127.0.0.1 cannot be); its paths, query
and bodies are Key Vault's (api-version 7.x).
"""

from __future__ import annotations

import datetime
import fnmatch
import time
import uuid
from typing import Any

from . import _arm_rbac as rbac
from ._arm_types import NO_LOCATION, PUT_RULES, VAULT, VMSS, ArmError, Res, Store, dig, key, need

ACCOUNT = "microsoft.automation/automationaccounts"
RUNBOOK = "microsoft.automation/automationaccounts/runbooks"
SCHEDULE = "microsoft.automation/automationaccounts/schedules"
JOB_SCHEDULE = "microsoft.automation/automationaccounts/jobschedules"
AUTOMATION_TYPES = frozenset({ACCOUNT, RUNBOOK, SCHEDULE, JOB_SCHEDULE})
#: Children listed under their parent: `GET <parent>/<kind>`.
NESTED_LISTS = frozenset({RUNBOOK, SCHEDULE, JOB_SCHEDULE})
_FREQUENCIES = ("OneTime", "Day", "Hour", "Week", "Month", "Minute")
#: Automation: a schedule's first run at least this far ahead of its creation.
SCHEDULE_LEAD = 300.0

Reply = tuple[int, dict[str, str], Any]


def _when(text: Any) -> float:
    need(isinstance(text, str), "startTime is required", "BadRequest")
    try:
        moment = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise ArmError(400, "BadRequest", f"startTime {text!r} is not a date") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _account_of(rid: str) -> str:
    return rid.split("/runbooks/")[0].split("/schedules/")[0].split("/jobSchedules/")[0]


def put_account(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    props = body.setdefault("properties", {})
    need(dig(props, "sku", "name") in ("Free", "Basic"), "sku.name: Free or Basic", "BadRequest")
    system_identity(store, body, old)
    props["state"] = "Ok"


def system_identity(store: Store, body: dict[str, Any], old: Res | None) -> None:
    """A system-assigned managed identity: a new principal, or the one it had."""
    identity = body.get("identity")
    if identity is not None:
        need(identity.get("type") == "SystemAssigned", "only SystemAssigned identities here")
        before = dig(old.body, "identity", "principalId") if old else None
        identity["principalId"] = before or str(uuid.uuid4())
        identity["tenantId"] = store.tenant


def put_runbook(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    store.must(_account_of(rid), "Automation account")
    props = body.setdefault("properties", {})
    need(
        props.get("runbookType") in ("Python3", "Python2", "PowerShell", "PowerShell72"),
        "properties.runbookType is required",
        "BadRequest",
    )
    props["state"] = dig(old.body, "properties", "state") if old else "New"


def put_schedule(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    store.must(_account_of(rid), "Automation account")
    props = body.setdefault("properties", {})
    need(props.get("frequency") in _FREQUENCIES, "properties.frequency is required", "BadRequest")
    start = _when(props.get("startTime"))
    need(
        start >= time.time() + SCHEDULE_LEAD - 5,
        "The start time of the schedule must be at least 5 minutes after the time you "
        "create the schedule.",
        "BadRequest",
    )
    if props["frequency"] != "OneTime":
        need(isinstance(props.get("interval"), int), "an interval is required", "BadRequest")
    props["nextRun"] = props["startTime"]
    props["isEnabled"] = True


def put_job_schedule(store: Store, rid: str, body: dict[str, Any], old: Res | None) -> None:
    if old is not None:
        raise ArmError(409, "Conflict", "A job schedule with this id already exists.")
    account = _account_of(rid)
    props = body.setdefault("properties", {})
    schedule = dig(props, "schedule", "name")
    runbook = dig(props, "runbook", "name")
    store.must(f"{account}/schedules/{schedule}", "Schedule")
    book = store.must(f"{account}/runbooks/{runbook}", "Runbook")
    need(
        dig(book.body, "properties", "state") == "Published",
        f"The runbook {runbook} is not published.",
        "BadRequest",
    )
    props["jobScheduleId"] = rid.rsplit("/", 1)[1]
    props["runOn"] = None


def draft_content(store: Store, runbook_id: str, text: str) -> None:
    book = store.must(runbook_id, "Runbook")
    need(text, "the runbook's content is empty", "BadRequest")
    store.drafts[key(runbook_id)] = text
    book.body["properties"]["state"] = "Edit"


def publish(store: Store, runbook_id: str) -> None:
    book = store.must(runbook_id, "Runbook")
    need(key(runbook_id) in store.drafts, "the runbook has no draft", "BadRequest")
    store.published[key(runbook_id)] = store.drafts[key(runbook_id)]
    book.body["properties"]["state"] = "Published"


def remove_schedule(store: Store, res: Res) -> None:
    """A schedule deleted takes its job schedules with it, as Automation does."""
    for job in store.of_type(JOB_SCHEDULE):
        if (
            key(_account_of(job.id)) == key(_account_of(res.id))
            and dig(job.body, "properties", "schedule", "name") == res.body["name"]
        ):
            store.resources.pop(key(job.id), None)


def due_events(store: Store, now: float) -> list[tuple[str, dict[str, Any]]]:
    """(schedule, parameters) of every job whose schedule's next run is at or before
    `now`: what Automation would start."""
    out = []
    for job in store.of_type(JOB_SCHEDULE):
        account = _account_of(job.id)
        name = dig(job.body, "properties", "schedule", "name")
        schedule = store.get(f"{account}/schedules/{name}")
        if schedule is None:
            continue
        if _when(dig(schedule.body, "properties", "nextRun")) <= now:
            out.append((str(name), dict(dig(job.body, "properties", "parameters") or {})))
    return out


# ---- a scale set's instances ----------------------------------------------------------


def sync_instances(store: Store, res: Res) -> None:
    """Instances for the scale set's capacity: new ids for more, the highest go first."""
    have = store.instances.setdefault(key(res.id), [])
    capacity = int(dig(res.body, "sku", "capacity") or 0)
    while len(have) < capacity:
        number = store.next_instance.get(key(res.id), 0)
        store.next_instance[key(res.id)] = number + 1
        have.append({"instanceId": str(number), "power": "running", "created": time.time()})
    while len(have) > capacity:
        have.pop()


def instance_views(res: Res, instances: list[dict[str, Any]], expand: str | None) -> list[Any]:
    out = []
    for vm in instances:
        name = f"{res.body['name']}_{vm['instanceId']}"
        body: dict[str, Any] = {
            "id": f"{res.id}/virtualMachines/{vm['instanceId']}",
            "instanceId": vm["instanceId"],
            "name": name,
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            "location": res.body["location"],
            "sku": res.body["sku"],
            "properties": {
                "provisioningState": "Succeeded",
                "latestModelApplied": True,
                "osProfile": {"computerName": f"{res.body['name']}{int(vm['instanceId']):06x}"},
            },
        }
        priority = dig(res.body, "properties", "virtualMachineProfile", "priority")
        if priority:
            body["properties"]["priority"] = priority
        if expand is not None:
            need(expand == "instanceView", f"unsupported $expand {expand!r}", "InvalidParameter")
            stamp = datetime.datetime.fromtimestamp(vm["created"], datetime.UTC).isoformat()
            body["properties"]["instanceView"] = {
                "statuses": [
                    {"code": "ProvisioningState/succeeded", "level": "Info", "time": stamp},
                    {"code": f"PowerState/{vm['power']}", "level": "Info"},
                ]
            }
        out.append(body)
    return out


def delete_instances(store: Store, res: Res, body: Any) -> None:
    wanted = dig(body, "instanceIds")
    need(isinstance(wanted, list) and wanted, "instanceIds is required", "InvalidParameter")
    have = store.instances.get(key(res.id), [])
    store.instances[key(res.id)] = [vm for vm in have if vm["instanceId"] not in wanted]
    res.body["sku"]["capacity"] = len(store.instances[key(res.id)])


# ---- Azure RBAC ---------------------------------------------------------------------------


def action_of(method: str, parts: list[str]) -> str | None:
    """The RBAC action of an ARM request (None: polling an operation, always allowed
    to whoever started it)."""
    lowered = [p.lower() for p in parts]
    if "operations" in lowered or "operationresults" in lowered:
        return None
    verb = {"GET": "read", "HEAD": "read", "PUT": "write", "PATCH": "write", "DELETE": "delete"}
    if len(parts) <= 4:
        return f"Microsoft.Resources/subscriptions/resourceGroups/{verb.get(method, 'write')}"
    namespace, rest = parts[5], parts[6:]
    types = "/".join([namespace, *rest[0::2]])
    if method == "POST" and len(rest) % 2:
        return f"{'/'.join([namespace, *rest[0:-1:2]])}/{rest[-1]}/action"
    return f"{types}/{verb.get(method, 'action')}"


def permits(allowed: list[str], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in allowed)


# ---- Key Vault's data plane -------------------------------------------------------------


def _vault(store: Store, name: str) -> Res:
    for res in store.of_type(VAULT):
        if res.body["name"].lower() == name.lower():
            return res
    raise ArmError(404, "VaultNotFound", f"No vault named {name}.")


_DATA_ACTIONS = {
    "get": "getSecret/action",
    "list": "readMetadata/action",
    "set": "setSecret/action",
    "delete": "delete",
    "purge": "purge/action",
}


def _allowed(store: Store, vault: Res, principal: str, permission: str, secret: str = "") -> None:
    if dig(vault.body, "properties", "enableRbacAuthorization"):
        wanted = f"Microsoft.KeyVault/vaults/secrets/{_DATA_ACTIONS[permission]}"
        scope = f"{vault.id}/secrets/{secret}" if secret else vault.id
        if rbac.granted(store, principal, wanted, scope, data=True):
            return
        raise ArmError(
            403,
            "Forbidden",
            f"Caller is not authorized to perform action on resource. Caller: "
            f"oid={principal}; Action: '{wanted}'; Resource: '{scope}' (ForbiddenByRbac)",
        )
    for policy in dig(vault.body, "properties", "accessPolicies") or []:
        if policy.get("objectId") == principal and permission in (
            dig(policy, "permissions", "secrets") or []
        ):
            return
    raise ArmError(
        403,
        "Forbidden",
        f"The user, group or application 'oid={principal}' does not have secrets "
        f"{permission} permission on key vault '{vault.body['name']}'.",
    )


def data_plane(
    store: Store, method: str, parts: list[str], query: dict[str, str], principal: str, body: Any
) -> Reply:
    """`/vault/<name>/secrets[/<secret>]` and `/vault/<name>/deletedsecrets/<secret>`."""
    need(
        query.get("api-version", "").startswith("7."),
        "api-version 7.x is required",
        "BadParameter",
    )
    vault = _vault(store, parts[1])
    kept = store.vault_secrets.setdefault(key(vault.id), {})
    deleted = store.deleted_secrets.setdefault(key(vault.id), {})
    uri = f"https://{vault.body['name']}.vault.azure.net"
    if parts[2:3] == ["secrets"] and len(parts) == 3 and method == "GET":
        _allowed(store, vault, principal, "list")
        items = [
            {"id": f"{uri}/secrets/{name}", "tags": s["tags"], "attributes": s["attributes"]}
            for name, s in sorted(kept.items())
        ]
        return 200, {}, {"value": items, "nextLink": None}
    need(len(parts) == 4, "bad Key Vault path", "BadParameter")
    name = parts[3]
    if parts[2] == "deletedsecrets" and method == "DELETE":
        _allowed(store, vault, principal, "purge", name)
        if deleted.pop(name, None) is None:
            raise ArmError(404, "SecretNotFound", f"Deleted Secret not found: {name}")
        return 204, {}, None
    need(parts[2] == "secrets", "bad Key Vault path", "BadParameter")
    if method == "PUT":
        _allowed(store, vault, principal, "set", name)
        need(isinstance(body, dict) and isinstance(body.get("value"), str), "value is required")
        if name in deleted:
            raise ArmError(
                409, "Conflict", f"Secret {name} is currently in a deleted but recoverable state."
            )
        attributes = {"enabled": True, **(body.get("attributes") or {})}
        kept[name] = {
            "value": body["value"],
            "tags": body.get("tags") or {},
            "attributes": attributes,
        }
        return 200, {}, {"id": f"{uri}/secrets/{name}/1", **kept[name]}
    found = kept.get(name)
    if method == "GET":
        _allowed(store, vault, principal, "get", name)
        if found is None:
            raise ArmError(404, "SecretNotFound", f"A secret with (name/id) {name} was not found in this key vault.")  # fmt: skip
        exp = found["attributes"].get("exp")
        if not found["attributes"].get("enabled") or (exp is not None and exp <= time.time()):
            raise ArmError(403, "Forbidden", "Operation get is not allowed on a disabled secret.")
        return 200, {}, {"id": f"{uri}/secrets/{name}/1", **found}
    if method == "DELETE":
        _allowed(store, vault, principal, "delete", name)
        if found is None:
            raise ArmError(404, "SecretNotFound", f"A secret with (name/id) {name} was not found in this key vault.")  # fmt: skip
        deleted[name] = kept.pop(name)
        return 200, {}, {"recoveryId": f"{uri}/deletedsecrets/{name}", "tags": found["tags"]}
    raise ArmError(400, "UnsupportedByFakeArm", f"the fake Key Vault does not implement {method}")


def leftovers(store: Store) -> dict[str, list[str]]:
    """What could spend or hold a secret: scale sets and instances, schedules and job
    schedules of annexes, secrets (kept or deleted), access policies of scale sets."""
    keep = store.users | {
        str(dig(res.body, "identity", "principalId"))
        for kind in (ACCOUNT, "microsoft.web/sites")  # the runbook's, the lease timer's
        for res in store.of_type(kind)
    }
    assignments = [
        f"{a['properties']['principalId']}@{a['properties']['scope']}"
        for a in store.role_assignments.values()
        if a["properties"]["principalId"] not in keep
    ]
    policies = [
        str(policy["objectId"])
        for vault in store.of_type(VAULT)
        for policy in dig(vault.body, "properties", "accessPolicies") or []
        if policy["objectId"] not in keep
    ]
    return {
        "scale_sets": sorted(r.body["name"] for r in store.of_type(VMSS)),
        "instances": sorted(
            f"{k.rsplit('/', 1)[1]}_{vm['instanceId']}"
            for k, vms in store.instances.items()
            if store.get(k) is not None
            for vm in vms
        ),
        "schedules": sorted(
            r.body["name"]
            for r in store.of_type(SCHEDULE)
            if r.body["name"].startswith("htgrid-annex-")
        ),
        "job_schedules": sorted(
            str(dig(r.body, "properties", "schedule", "name"))
            for r in store.of_type(JOB_SCHEDULE)
            if str(dig(r.body, "properties", "schedule", "name")).startswith("htgrid-annex-")
        ),
        "secrets": sorted(
            n for v in [*store.vault_secrets.values(), *store.deleted_secrets.values()] for n in v
        ),
        "access_policies": sorted(policies),
        "role_assignments": sorted(assignments),
    }


class AnnexArm:
    """ArmServer's parts for the annex: RBAC for a restricted principal, the vault's
    data plane, and the test controls (jobs due, leftovers, identity tokens)."""

    _lock: Any
    aad: Any
    store: Store
    url: str
    ops: Any
    rbac: dict[str, list[str]]
    conditions: dict[str, str]

    def _authorize(self, method: str, parts: list[str], headers: dict[str, str], body: Any) -> str:
        """Azure RBAC: a principal `restrict()` was given actions for, or a managed
        identity (by its role assignments); anyone else may do anything (an owner).
        The caller's object id."""
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        principal = self.aad.principal(auth[7:]) or ""
        allowed = self.rbac.get(principal)
        if allowed is None and principal not in self.aad.managed:
            return principal
        on_rbac = rbac.split(parts)
        action = rbac.action(method, on_rbac[1]) if on_rbac else action_of(method, parts)
        if action is None:
            return principal
        target = None
        if on_rbac is not None and action.lower() in rbac.ASSIGNMENT_ACTIONS:
            target = rbac.target_role(self.store, *on_rbac, method, body)
        # What restrict() gave, and (as Azure sums them) the principal's role assignments.
        ok = (
            allowed is not None
            and permits(allowed, action)
            and (target is None or rbac.condition_allows(self.conditions.get(principal), target))
        )
        ok = ok or rbac.granted(self.store, principal, action, "/" + "/".join(parts), target=target)
        if not ok:
            raise ArmError(
                403,
                "AuthorizationFailed",
                f"The client '{principal}' with object id '{principal}' does not have "
                f"authorization to perform action '{action}' over scope "
                f"'/{'/'.join(parts)}' or the scope is invalid.",
            )
        return principal

    def restrict(self, principal: str, actions: list[str], condition: str | None = None) -> None:
        """Give `principal` only these RBAC actions (wildcards as Azure's), under the
        condition of their role assignment (which roles it may assign), if any."""
        with self._lock:
            self.rbac[principal] = list(actions)
            if condition:
                self.conditions[principal] = condition

    def _data_plane(
        self,
        method: str,
        parts: list[str],
        query: dict[str, str],
        headers: dict[str, str],
        body: Any,
    ) -> Reply:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        principal = self.aad.principal(auth[7:] if auth.startswith("Bearer ") else "")
        if principal is None:
            return 401, {"WWW-Authenticate": f'Bearer authorization="{self.url}/{self.aad.tenant}", resource="https://vault.azure.net"'}, {
                "error": {"code": "Unauthorized", "message": "AKV10000: Request is missing a Bearer or PoP token."}
            }  # fmt: skip
        return data_plane(self.store, method, parts, query, principal, body)

    def jobs_due(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """(schedule, job parameters) of each job Automation would start by `now`."""
        with self._lock:
            return due_events(self.store, now)

    def evict(self, scale_set: str, instance_id: str) -> None:
        """Azure takes a Spot VM back under eviction policy Delete: the VM and its disks
        go, and the scale set has one instance fewer."""
        with self._lock:
            self.ops.settle()
            (res,) = [r for r in self.store.of_type(VMSS) if r.body["name"] == scale_set]
            profile = dig(res.body, "properties", "virtualMachineProfile") or {}
            assert profile.get("priority") == "Spot" and profile.get("evictionPolicy") == "Delete"
            delete_instances(self.store, res, {"instanceIds": [instance_id]})

    def annex_leftovers(self) -> dict[str, list[str]]:
        with self._lock:
            self.ops.settle()
            return leftovers(self.store)

    def managed_identity_token(self, principal: str) -> str:
        with self._lock:
            return self.aad.issue(principal)


PUT_RULES.update(
    {
        ACCOUNT: put_account,
        RUNBOOK: put_runbook,
        SCHEDULE: put_schedule,
        JOB_SCHEDULE: put_job_schedule,
    }
)
NO_LOCATION.update({SCHEDULE, JOB_SCHEDULE})
