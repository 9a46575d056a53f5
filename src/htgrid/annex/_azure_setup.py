"""`htgrid annex setup --cloud azure`: the one privileged step, once per subscription
and resource group. It makes the group, the nodes' network, the Automation account (with
a managed identity), the Key Vault (in Azure RBAC mode, the account's identity its
Secrets Officer), a Key Vault of each user's own (`--user-object-ids`; named from the
user's object id: the user its Secrets Officer and, by a Role Based Access Control
Administrator assignment conditioned to that one role, the giver of Secrets User on it,
which each scale set's identity gets on its own annex's secrets only; the runbook's and
the lease timer's identities its Secrets Officers too; no user has any right on
another's), the two custom roles (the lease runbook's, given to the account's identity
on the group; an annex node's: delete instances of a scale set), publishes the lease
runbook (azure_runbook.py) and schedules its hourly sweeper, installs the lease timer (a
function app running azure_timer every minute, _azure_app); and prints the custom role
an ordinary user needs on the group, with the condition its assignment takes (the one
role the user may assign there: the node's; no data action). Running it again publishes
the code again and takes nothing away (more users get their vaults, and the annexes
they made before move to them: _azure_migrate): the vault the
Automation account names stays its vault (unless --vault names another), a VNet there
keeps its subnets, and a vault an older setup left in access-policy mode is switched to
Azure RBAC only after each policy's secret permissions are given as a role on the vault
(its annexes' identities and users keep their access; the policies stay, inert).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

from htgrid.annex._azure import (
    ACCOUNT,
    NETWORK_API,
    NODE_ROLE,
    RBAC_ADMIN,
    RESOURCES_API,
    RUNBOOK,
    RUNBOOK_ROLE,
    SECRETS_OFFICER,
    SECRETS_USER,
    USER_TAG,
    VAULT_TAG,
    WEB_API,
    AzureAnnexes,
    assign,
    iso,
    role_id,
)
from htgrid.annex._azure_app import install_timer
from htgrid.annex._azure_migrate import migrate
from htgrid.annex._azure_sets import SUBNET, VNET
from htgrid.annex._azure_vaults import user_vault
from htgrid.annex.azure_runbook import (
    AUTHORIZATION_API,
    AUTOMATION_API,
    KEYVAULT_API,
    SWEEPER_SCHEDULE,
    Arm,
    Place,
)

__all__ = [
    "assignment_condition",
    "azure_setup",
    "azure_user_role",
    "runbook_source",
    "user_condition",
]

_ASSIGNMENTS = ("Microsoft.Authorization/roleAssignments/read",
                "Microsoft.Authorization/roleAssignments/write",
                "Microsoft.Authorization/roleAssignments/delete")  # fmt: skip


def assignment_condition(place: Place, roles: tuple[str, ...] = (NODE_ROLE, SECRETS_USER)) -> str:
    """The condition (Azure ABAC) on a role assignment that lets its holder assign and
    unassign these roles (the annex node's role and Key Vault Secrets User) and no other."""
    guids = ", ".join(role_id(place, r).rsplit("/", 1)[1] for r in roles)
    return " AND ".join(
        f"((!(ActionMatches{{'Microsoft.Authorization/roleAssignments/{verb}'}})) OR "
        f"(@{side}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] "
        f"ForAnyOfAnyValues:GuidEquals {{{guids}}}))"
        for verb, side in (("write", "Request"), ("delete", "Resource"))
    )


def user_condition(place: Place) -> str:
    """The condition of the user role's assignment on the group: the node's role only
    (Secrets User a user assigns on their own vault only, by that vault's RBAC
    Administrator assignment, so no user can open another's vault to themselves)."""
    return assignment_condition(place, (NODE_ROLE,))


def azure_user_role(place: Place) -> dict[str, Any]:
    """The custom role an annex user needs on the setup's resource group; assign it
    with user_condition() (without, the role could assign any role). No data action:
    a user's secrets are in their own vault, where setup makes them Secrets Officer."""
    return {
        "Name": "htgrid annex user",
        "IsCustom": True,
        "Description": "create, extend and shut down htgrid annexes",
        "Actions": [
            "Microsoft.Automation/automationAccounts/read",
            "Microsoft.Automation/automationAccounts/runbooks/read",
            "Microsoft.Web/sites/read",
            "Microsoft.Automation/automationAccounts/schedules/*",
            "Microsoft.Automation/automationAccounts/jobSchedules/*",
            "Microsoft.Compute/virtualMachineScaleSets/*",
            "Microsoft.Network/virtualNetworks/subnets/join/action",
            "Microsoft.KeyVault/vaults/read",
            *_ASSIGNMENTS,
        ],
        "DataActions": [],
        "AssignableScopes": [place.group_path()],
    }


def _roles(arm: Arm, place: Place) -> None:
    """The node's role (its own scale set's instances) and the lease runbook's."""
    roles = {
        NODE_ROLE: ("htgrid annex node: delete the instances of its own scale set",
                    ["Microsoft.Compute/virtualMachineScaleSets/delete/action"]),
        RUNBOOK_ROLE: ("htgrid annex lease runbook: end annexes", [
            "Microsoft.Compute/virtualMachineScaleSets/read",
            # The timer's: a Spot set's capacity asked again after evictions.
            "Microsoft.Compute/virtualMachineScaleSets/write",
            "Microsoft.Compute/virtualMachineScaleSets/delete",
            "Microsoft.Compute/virtualMachineScaleSets/delete/action",
            "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
            "Microsoft.Automation/automationAccounts/schedules/read",
            "Microsoft.Automation/automationAccounts/schedules/delete",
            "Microsoft.Automation/automationAccounts/jobSchedules/read",
            "Microsoft.Automation/automationAccounts/jobSchedules/delete",
            "Microsoft.KeyVault/vaults/read",
            *_ASSIGNMENTS[::2],
        ]),
    }  # fmt: skip
    for role, (description, actions) in roles.items():
        guid = role_id(place, role).rsplit("/", 1)[1]
        arm.put(
            place.provider(f"Microsoft.Authorization/roleDefinitions/{guid}"),
            AUTHORIZATION_API,
            {
                "properties": {
                    "roleName": f"{role} ({place.group})",
                    "description": description,
                    "type": "CustomRole",
                    "permissions": [{"actions": actions, "notActions": []}],
                    "assignableScopes": [place.group_path()],
                }
            },
        )


def runbook_source() -> str:
    """The runbook's code: azure_runbook.py."""
    from importlib import resources

    return resources.files("htgrid.annex").joinpath("azure_runbook.py").read_text()


def azure_setup(cloud: AzureAnnexes, *, users: tuple[str, ...] = (),
                vault: str | None = None, cidr: str = "10.64.0.0/16") -> dict[str, Any]:  # fmt: skip
    """Install the resource group, network, vault, Automation account, runbook and its
    sweeper schedule; what was made (and the users' role), as a dict."""
    place = cloud.place
    arm = cloud.arm()
    location = cloud.region
    now = cloud.clock()

    def install() -> dict[str, Any]:
        arm.put(place.group_path(), RESOURCES_API, {"location": location})
        before = arm.get(place.automation(), AUTOMATION_API) or {}
        # Again: the vault the account names, unless another is asked for.
        tags = dict(before.get("tags") or {})
        name = vault or tags.get(VAULT_TAG) or _default_vault(place)
        vnet = place.provider(f"Microsoft.Network/virtualNetworks/{VNET}")
        if arm.get(vnet, NETWORK_API) is None:  # one there may have more subnets now
            _vnet(arm, vnet, location, cidr)
        account = arm.put(
            place.automation(),
            AUTOMATION_API,
            {
                "location": location,
                "identity": {"type": "SystemAssigned"},
                "tags": {**tags, VAULT_TAG: name},
                "properties": {"sku": {"name": "Basic"}},
            },
        )
        identity = account.get("identity") or {}
        tenant = str(identity.get("tenantId", ""))
        runbook = str(identity["principalId"])
        vault_path = place.provider(f"Microsoft.KeyVault/vaults/{name}")
        migrated = _rbac_vault(arm, place, vault_path, location, tenant)
        _roles(arm, place)
        assign(arm, place.group_path(), role_id(place, RUNBOOK_ROLE), runbook,
               assignment_condition(place))  # fmt: skip
        assign(arm, vault_path, role_id(place, SECRETS_OFFICER), runbook)
        made = _publish(cloud, name, now, vault_path)
        site = arm.get(place.provider(f"Microsoft.Web/sites/{made['function_app']}"), WEB_API)
        timer = str(((site or {}).get("identity") or {})["principalId"])
        vaults = {user: _user_vault(arm, place, location, tenant, user, (runbook, timer))
                  for user in users}  # fmt: skip
        # Annexes made before their users had vaults move to them.
        moved = migrate(arm, place, name, cloud.caller(), now)
        return made | {"migrated": migrated, "user_vaults": vaults, "moved": moved}

    done: dict[str, Any] = cloud.call("setting up the annex", install)
    cloud.arm(done["vault"])
    return done


def _user_vault(arm: Arm, place: Place, location: str, tenant: str, user: str,
                machinery: tuple[str, ...]) -> str:  # fmt: skip
    """The user's own vault: they are its Secrets Officer and may give Secrets User on
    it (to their annexes' identities) and no other role; the runbook and the lease timer
    are its Secrets Officers too, to end what a lease ends. Its name."""
    name = user_vault(place, user)
    path = place.provider(f"Microsoft.KeyVault/vaults/{name}")
    _rbac_vault(arm, place, path, location, tenant, {USER_TAG: user})
    officer = role_id(place, SECRETS_OFFICER)
    # The user's object id may be a user's or a group's as well as a service principal's.
    assign(arm, path, officer, user, kind=None)
    assign(arm, path, role_id(place, RBAC_ADMIN), user,
           assignment_condition(place, (SECRETS_USER,)), kind=None)  # fmt: skip
    for who in machinery:
        assign(arm, path, officer, who)
    return name


def _default_vault(place: Place) -> str:
    return f"htgridannex{uuid.uuid5(uuid.NAMESPACE_URL, place.group_path()).hex[:12]}"


def _vnet(arm: Arm, path: str, location: str, cidr: str) -> None:
    arm.put(
        path,
        NETWORK_API,
        {
            "location": location,
            "properties": {
                "addressSpace": {"addressPrefixes": [cidr]},
                "subnets": [{"name": SUBNET, "properties": {"addressPrefix": cidr}}],
            },
        },
    )


#: An access policy's secret permissions that only Key Vault Secrets Officer covers.
_OFFICER_PERMISSIONS: Final = frozenset({"set", "delete", "purge", "recover", "restore", "all"})


def _rbac_vault(arm: Arm, place: Place, path: str, location: str, tenant: str,
                tags: dict[str, str] | None = None) -> list[str]:  # fmt: skip
    """The vault, in Azure RBAC mode (per-secret roles: a scale set's identity reads its
    annex's secrets only). One there already keeps all it has. One of an older setup,
    in access-policy mode, has each policy's grants given first as the role on the vault
    that covers them (Secrets Officer for set, delete or purge; Secrets User for get,
    list), so its annexes' identities and users keep their access; its policies stay,
    inert under RBAC, there again should it be switched back. The principals so granted."""
    old = arm.get(path, KEYVAULT_API)
    if old is None:
        arm.put(
            path,
            KEYVAULT_API,
            {
                "location": location,
                "tags": tags or {},
                "properties": {
                    "tenantId": tenant,
                    "sku": {"family": "A", "name": "standard"},
                    "accessPolicies": [],
                    "enableRbacAuthorization": True,
                },
            },
        )
        return []
    props = dict(old.get("properties") or {})
    if props.get("enableRbacAuthorization"):
        return []
    migrated = []
    for policy in props.get("accessPolicies") or []:
        granted = {str(p).lower() for p in (policy.get("permissions") or {}).get("secrets") or []}
        if not granted or not policy.get("objectId"):
            continue
        role = SECRETS_OFFICER if granted & _OFFICER_PERMISSIONS else SECRETS_USER
        # A user's or a group's object id as well as a service principal's: no type said.
        assign(arm, path, role_id(place, role), str(policy["objectId"]), kind=None)
        migrated.append(str(policy["objectId"]))
    props["enableRbacAuthorization"] = True
    body = {"location": old.get("location", location), "tags": old.get("tags") or {}}
    arm.put(path, KEYVAULT_API, {**body, "properties": props})
    return migrated


def _publish(cloud: AzureAnnexes, vault: str, now: float, vault_path: str) -> dict[str, Any]:
    """The runbook, its hourly sweeper, the lease timer; what setup made."""
    place, arm, location = cloud.place, cloud.arm(), cloud.region
    book = place.automation(f"/runbooks/{RUNBOOK}")
    arm.put(
        book,
        AUTOMATION_API,
        {
            "location": location,
            "properties": {
                "runbookType": "Python3",
                "logProgress": False,
                "logVerbose": False,
                "description": "htgrid annex: ends annexes at their lease's end",
            },
        },
    )
    _, headers, _ = arm.request(
        "PUT", f"{book}/draft/content?api-version={AUTOMATION_API}", text=runbook_source()
    )
    arm.follow(f"PUT {book}/draft/content", headers)
    arm.post(f"{book}/publish", AUTOMATION_API)
    start = now + 600  # Automation wants a start 5 minutes ahead at least
    cloud.arm(vault)
    sweeper = {"htgrid": "annex-sweep", **place.event()}
    arm.put(
        place.automation(f"/schedules/{SWEEPER_SCHEDULE}"),
        AUTOMATION_API,
        {
            "name": SWEEPER_SCHEDULE,
            "properties": {
                "description": "htgrid annex sweeper",
                "startTime": iso(start),
                "frequency": "Hour",
                "interval": 1,
                "timeZone": "UTC",
            },
        },
    )
    job = uuid.uuid5(uuid.NAMESPACE_URL, f"{place.automation()}/{SWEEPER_SCHEDULE}")
    if arm.get(place.automation(f"/jobSchedules/{job}"), AUTOMATION_API) is None:
        arm.put(
            place.automation(f"/jobSchedules/{job}"),
            AUTOMATION_API,
            {
                "properties": {
                    "schedule": {"name": SWEEPER_SCHEDULE},
                    "runbook": {"name": RUNBOOK},
                    "parameters": {"event": json.dumps(sweeper, sort_keys=True)},
                }
            },
        )
    timer = install_timer(cloud, vault_path, assignment_condition(place))
    return {
        **timer,
        "region": location,
        "resource_group": place.group,
        "account": ACCOUNT,
        "runbook": RUNBOOK,
        "vault": vault,
        "sweeper": SWEEPER_SCHEDULE,
        "user_role": azure_user_role(place),
        "user_condition": user_condition(place),
    }
