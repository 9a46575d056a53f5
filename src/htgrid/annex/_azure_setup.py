"""`htgrid annex setup --cloud azure`: the one privileged step, once per subscription
and resource group. It makes the group, the nodes' network, the Automation account (with
a managed identity), the Key Vault (in Azure RBAC mode: the account's identity and the
users are its Secrets Officers; each scale set's identity gets Secrets User on its own
annex's secrets only), the two custom roles (the lease runbook's, given to the account's
identity on the group; an annex node's: delete instances of a scale set), publishes the
lease runbook (azure_runbook.py) and schedules its hourly sweeper, installs the
lease timer (a function app running azure_timer every minute, _azure_app); and prints the custom
role an ordinary user needs, with the condition its assignment takes (the roles the
user may assign: the node's and Secrets User, no other). Running it again publishes the
runbook's code again and changes nothing else.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from htgrid.annex._azure import (
    ACCOUNT,
    NETWORK_API,
    NODE_ROLE,
    RESOURCES_API,
    RUNBOOK,
    RUNBOOK_ROLE,
    SECRETS_OFFICER,
    SECRETS_USER,
    SUBNET,
    VAULT_TAG,
    VNET,
    AzureAnnexes,
    assign,
    iso,
    role_id,
)
from htgrid.annex._azure_app import install_timer
from htgrid.annex.azure_runbook import (
    AUTHORIZATION_API,
    AUTOMATION_API,
    KEYVAULT_API,
    SWEEPER_SCHEDULE,
    Arm,
    Place,
)

__all__ = ["assignment_condition", "azure_setup", "azure_user_role", "runbook_source"]

_ASSIGNMENTS = ("Microsoft.Authorization/roleAssignments/read",
                "Microsoft.Authorization/roleAssignments/write",
                "Microsoft.Authorization/roleAssignments/delete")  # fmt: skip


def assignment_condition(place: Place) -> str:
    """The condition (Azure ABAC) on a role assignment that lets its holder assign and
    unassign the annex node's role and Key Vault Secrets User, and no other role."""
    roles = ", ".join(role_id(place, r).rsplit("/", 1)[1] for r in (NODE_ROLE, SECRETS_USER))
    return " AND ".join(
        f"((!(ActionMatches{{'Microsoft.Authorization/roleAssignments/{verb}'}})) OR "
        f"(@{side}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] "
        f"ForAnyOfAnyValues:GuidEquals {{{roles}}}))"
        for verb, side in (("write", "Request"), ("delete", "Resource"))
    )


def azure_user_role(place: Place) -> dict[str, Any]:
    """The custom role an annex user needs on the setup's resource group; assign it
    with assignment_condition() (without, the role could assign any role)."""
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
        "DataActions": ["Microsoft.KeyVault/vaults/secrets/*"],
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
    vault = vault or f"htgridannex{uuid.uuid5(uuid.NAMESPACE_URL, place.group_path()).hex[:12]}"
    location = cloud.region
    now = cloud.clock()

    def install() -> dict[str, Any]:
        arm.put(place.group_path(), RESOURCES_API, {"location": location})
        arm.put(
            place.provider(f"Microsoft.Network/virtualNetworks/{VNET}"),
            NETWORK_API,
            {
                "location": location,
                "properties": {
                    "addressSpace": {"addressPrefixes": [cidr]},
                    "subnets": [{"name": SUBNET, "properties": {"addressPrefix": cidr}}],
                },
            },
        )
        account = arm.put(
            place.automation(),
            AUTOMATION_API,
            {
                "location": location,
                "identity": {"type": "SystemAssigned"},
                "tags": {VAULT_TAG: vault},
                "properties": {"sku": {"name": "Basic"}},
            },
        )
        identity = account.get("identity") or {}
        tenant = str(identity.get("tenantId", ""))
        runbook = str(identity["principalId"])
        vault_path = place.provider(f"Microsoft.KeyVault/vaults/{vault}")
        arm.put(
            vault_path,
            KEYVAULT_API,
            {
                "location": location,
                "properties": {
                    "tenantId": tenant,
                    "sku": {"family": "A", "name": "standard"},
                    "accessPolicies": [],
                    # Per-secret roles: a scale set's identity reads its annex's only.
                    "enableRbacAuthorization": True,
                },
            },
        )
        _roles(arm, place)
        assign(arm, place.group_path(), role_id(place, RUNBOOK_ROLE), runbook,
               assignment_condition(place))  # fmt: skip
        for who in (runbook, *users):
            assign(arm, vault_path, role_id(place, SECRETS_OFFICER), who)
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
            "user_condition": assignment_condition(place),
        }

    done: dict[str, Any] = cloud.call("setting up the annex", install)
    cloud.arm(vault)
    return done
