"""The fake ARM's Azure RBAC: role definitions (two built-in Key Vault roles, custom roles
PUT at a scope), role assignments at any scope (a resource group, a resource, a vault's
secret `<vault id>/secrets/<name>`), and the check of an action or data action against a
principal's assignments: an assignment at a scope grants its role's actions there and
below. An assignment's `condition` is honoured in the one form the annex uses: the role
definitions (`GuidEquals {...}`) a principal may assign or unassign.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from ._arm_types import ArmError, Store, dig, key, need

SECRETS_USER = "4633458b-17de-408a-b874-0445c86b69e6"
SECRETS_OFFICER = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
RBAC_ADMIN = "f58310d9-a9f6-439a-9e8d-f62e7b41a168"
BUILT_IN: dict[str, dict[str, Any]] = {
    SECRETS_USER: {
        "roleName": "Key Vault Secrets User",
        "type": "BuiltInRole",
        "permissions": [
            {
                "actions": [],
                "dataActions": [
                    "Microsoft.KeyVault/vaults/secrets/getSecret/action",
                    "Microsoft.KeyVault/vaults/secrets/readMetadata/action",
                ],
            }
        ],
        "assignableScopes": ["/"],
    },
    SECRETS_OFFICER: {
        "roleName": "Key Vault Secrets Officer",
        "type": "BuiltInRole",
        "permissions": [
            {
                "actions": ["Microsoft.KeyVault/vaults/*/read"],
                "dataActions": ["Microsoft.KeyVault/vaults/secrets/*"],
            }
        ],
        "assignableScopes": ["/"],
    },
    RBAC_ADMIN: {
        "roleName": "Role Based Access Control Administrator",
        "type": "BuiltInRole",
        "permissions": [
            {
                "actions": [
                    "Microsoft.Authorization/roleAssignments/write",
                    "Microsoft.Authorization/roleAssignments/delete",
                    "*/read",
                ],
                "dataActions": [],
            }
        ],
        "assignableScopes": ["/"],
    },
}
ASSIGNMENT_ACTIONS = frozenset(
    {
        "microsoft.authorization/roleassignments/write",
        "microsoft.authorization/roleassignments/delete",
    }
)
Reply = tuple[int, dict[str, str], Any]


def _guid(definition_id: Any) -> str:
    return str(definition_id or "").rstrip("/").rsplit("/", 1)[-1].lower()


def _under(scope: str, path: str) -> bool:
    scope, path = key(scope).rstrip("/"), key(path).rstrip("/")
    return path == scope or path.startswith(scope + "/")


def split(parts: list[str]) -> tuple[str, list[str]] | None:
    """(scope, what follows Microsoft.Authorization) of an RBAC request, else None."""
    lowered = [p.lower() for p in parts]
    for i in range(1, len(parts)):
        if lowered[i] == "microsoft.authorization" and lowered[i - 1] == "providers":
            return "/" + "/".join(parts[: i - 1]), parts[i + 1 :]
    return None


def action(method: str, rest: list[str]) -> str:
    kind = rest[0] if rest else ""
    verb = {"GET": "read", "PUT": "write", "DELETE": "delete"}.get(method, "action")
    return f"Microsoft.Authorization/{kind}/{verb}"


def role(store: Store, definition_id: Any) -> dict[str, Any] | None:
    guid = _guid(definition_id)
    found = BUILT_IN.get(guid)
    if found is not None:
        return found
    custom = store.role_definitions.get(guid)
    return None if custom is None else dict(custom["properties"])


def permits(patterns: list[str], wanted: str) -> bool:
    return any(fnmatch.fnmatchcase(wanted.lower(), p.lower()) for p in patterns)


def role_grants(definition: dict[str, Any], wanted: str, *, data: bool) -> bool:
    for permission in definition.get("permissions") or []:
        allow = permission.get("dataActions" if data else "actions") or []
        deny = permission.get("notDataActions" if data else "notActions") or []
        if permits(allow, wanted) and not permits(deny, wanted):
            return True
    return False


def condition_allows(condition: str | None, definition_id: str) -> bool:
    """An assignment's condition on which roles its principal may (un)assign."""
    if not condition:
        return True
    allowed = {
        g.strip().lower()
        for found in re.findall(r"GuidEquals\s*\{([^}]*)\}", condition)
        for g in found.split(",")
    }
    return _guid(definition_id) in allowed


def target_role(store: Store, scope: str, rest: list[str], method: str, body: Any) -> str:
    """The role definition a role-assignment write or delete is about."""
    if method == "PUT":
        return str(dig(body, "properties", "roleDefinitionId") or "")
    found = store.role_assignments.get(
        key(f"{scope}/providers/Microsoft.Authorization/{'/'.join(rest)}")
    )
    return str(dig(found, "properties", "roleDefinitionId") or "")


def granted(store: Store, principal: str, wanted: str, path: str, *, data: bool = False,
            target: str | None = None) -> bool:  # fmt: skip
    """Whether `principal`'s role assignments allow `wanted` on `path`."""
    for assignment in store.role_assignments.values():
        props = assignment["properties"]
        if props["principalId"] != principal or not _under(props["scope"], path):
            continue
        definition = role(store, props["roleDefinitionId"])
        if definition is None or not role_grants(definition, wanted, data=data):
            continue
        conditional = target is not None and wanted.lower() in ASSIGNMENT_ACTIONS
        if conditional and not condition_allows(props.get("condition"), str(target)):
            continue
        return True
    return False


def _scope_exists(store: Store, scope: str) -> bool:
    parts = scope.strip("/").split("/")
    if len(parts) == 2:
        return True
    if len(parts) == 4:
        return parts[3].lower() in store.groups
    if len(parts) >= 4 and parts[-2].lower() == "secrets":
        vault = "/" + "/".join(parts[:-2])
        return store.get(vault) is not None and parts[-1] in store.vault_secrets.get(key(vault), {})
    return store.get(scope) is not None


def handle(store: Store, method: str, scope: str, rest: list[str], query: dict[str, str],
           body: Any, caller: str = "") -> Reply:  # fmt: skip
    """`<scope>/providers/Microsoft.Authorization/{roleDefinitions,roleAssignments}[/<id>]`."""
    kind = rest[0].lower() if rest else ""
    if kind == "roledefinitions" and len(rest) == 2:
        return _definition(store, method, scope, rest[1], body)
    if kind == "roleassignments" and len(rest) == 1 and method == "GET":
        return 200, {}, {"value": _assignments(store, scope, query.get("$filter", ""))}
    if kind == "roleassignments" and len(rest) == 2:
        return _assignment(store, method, scope, rest[1], body, caller)
    raise ArmError(400, "UnsupportedByFakeArm", f"the fake ARM does not implement {method} {scope}/{'/'.join(rest)}")  # fmt: skip


def _definition(store: Store, method: str, scope: str, guid: str, body: Any) -> Reply:
    rid = f"/subscriptions/{store.subscription}/providers/Microsoft.Authorization/roleDefinitions/{guid}"
    if method == "GET":
        found = role(store, guid)
        if found is None:
            raise ArmError(404, "RoleDefinitionDoesNotExist", f"The specified role definition with ID '{guid}' does not exist.")  # fmt: skip
        return 200, {}, {"id": rid, "name": guid, "properties": found}
    need(method == "PUT", f"{method} of a role definition", "UnsupportedByFakeArm")
    props = dig(body, "properties") or {}
    need(props.get("roleName"), "properties.roleName is required", "InvalidRoleDefinition")
    need(isinstance(props.get("permissions"), list), "properties.permissions is required", "InvalidRoleDefinition")  # fmt: skip
    scopes = props.get("assignableScopes") or []
    need(scopes and all(_under(s, scope) or _under(scope, s) for s in scopes),
         "assignableScopes must be given", "InvalidRoleDefinition")  # fmt: skip
    stored = {"id": rid, "name": guid, "properties": {**props, "type": "CustomRole"}}
    store.role_definitions[guid.lower()] = stored
    return 201, {}, stored


def _assignments(store: Store, scope: str, query: str) -> list[Any]:
    wanted = re.fullmatch(r"\s*principalId\s+eq\s+'([^']+)'\s*", query)
    out = []
    for assignment in store.role_assignments.values():
        props = assignment["properties"]
        if wanted is not None:
            if props["principalId"] != wanted.group(1):
                continue
        elif query.strip() == "atScope()":
            if not _under(props["scope"], scope):
                continue
        elif not (_under(props["scope"], scope) or _under(scope, props["scope"])):
            continue
        out.append(assignment)
    return sorted(out, key=lambda a: key(a["id"]))


def _assignment(store: Store, method: str, scope: str, name: str, body: Any, caller: str) -> Reply:
    rid = f"{scope}/providers/Microsoft.Authorization/roleAssignments/{name}"
    found = store.role_assignments.get(key(rid))
    if method == "GET":
        if found is None:
            raise ArmError(404, "RoleAssignmentNotFound", f"The role assignment '{name}' is not found.")  # fmt: skip
        return 200, {}, found
    if method == "DELETE":
        if found is None:
            return 204, {}, None
        del store.role_assignments[key(rid)]
        return 200, {}, found
    need(method == "PUT", f"{method} of a role assignment", "UnsupportedByFakeArm")
    props = dict(dig(body, "properties") or {})
    need(props.get("principalId"), "properties.principalId is required", "InvalidRoleAssignmentRequest")  # fmt: skip
    if role(store, props.get("roleDefinitionId")) is None:
        raise ArmError(400, "RoleDefinitionDoesNotExist", f"The specified role definition with ID '{_guid(props.get('roleDefinitionId'))}' does not exist.")  # fmt: skip
    if not _scope_exists(store, scope):
        raise ArmError(404, "ResourceNotFound", f"The scope '{scope}' does not exist.")
    props["scope"] = scope
    props["createdBy"] = caller  # as Azure's: the object id of who made it
    if found is not None:
        same = all(found["properties"].get(k) == props.get(k) for k in ("principalId", "roleDefinitionId"))  # fmt: skip
        need(same, "Role assignment update is not permitted.", "RoleAssignmentUpdateNotPermitted")
        return 200, {}, found
    for other in store.role_assignments.values():
        o = other["properties"]
        if (key(o["scope"]), o["principalId"], _guid(o["roleDefinitionId"])) == (key(scope), props["principalId"], _guid(props["roleDefinitionId"])):  # fmt: skip
            raise ArmError(409, "RoleAssignmentExists", "The role assignment already exists.")
    stored = {"id": rid, "name": name, "type": "Microsoft.Authorization/roleAssignments", "properties": props}  # fmt: skip
    store.role_assignments[key(rid)] = stored
    return 201, {}, stored
