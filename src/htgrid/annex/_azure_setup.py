"""`htgrid annex setup --cloud azure`: the one privileged step, once per subscription
and resource group. It makes the group, the nodes' network, the Automation account (with
a managed identity), the Key Vault (access policies: the account's identity and the
users may manage secrets), publishes the lease runbook (azure_runbook.py) and schedules
its hourly sweeper; and prints the custom role an ordinary user needs. Running it again
publishes the runbook's code again and changes nothing else.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from htgrid.annex._azure import (
    ACCOUNT,
    NETWORK_API,
    RESOURCES_API,
    RUNBOOK,
    SUBNET,
    VAULT_TAG,
    VNET,
    AzureAnnexes,
    iso,
)
from htgrid.annex.azure_runbook import AUTOMATION_API, KEYVAULT_API, SWEEPER_SCHEDULE, Place

__all__ = ["azure_setup", "azure_user_role", "runbook_source"]


def azure_user_role(place: Place) -> dict[str, Any]:
    """The custom role an annex user needs on the setup's resource group."""
    return {
        "Name": "htgrid annex user",
        "IsCustom": True,
        "Description": "create, extend and shut down htgrid annexes",
        "Actions": [
            "Microsoft.Automation/automationAccounts/read",
            "Microsoft.Automation/automationAccounts/runbooks/read",
            "Microsoft.Automation/automationAccounts/schedules/*",
            "Microsoft.Automation/automationAccounts/jobSchedules/*",
            "Microsoft.Compute/virtualMachineScaleSets/*",
            "Microsoft.Network/virtualNetworks/subnets/join/action",
            "Microsoft.KeyVault/vaults/read",
            "Microsoft.KeyVault/vaults/accessPolicies/write",
        ],
        "DataActions": [],
        "AssignableScopes": [place.group_path()],
    }


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
        everything = {"secrets": ["get", "list", "set", "delete", "purge"]}
        policies = [
            {"tenantId": tenant, "objectId": who, "permissions": everything}
            for who in (str(identity["principalId"]), *users)
        ]
        arm.put(
            place.provider(f"Microsoft.KeyVault/vaults/{vault}"),
            KEYVAULT_API,
            {
                "location": location,
                "properties": {
                    "tenantId": tenant,
                    "sku": {"family": "A", "name": "standard"},
                    "accessPolicies": policies,
                    "enableRbacAuthorization": False,
                },
            },
        )
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
        return {
            "region": location,
            "resource_group": place.group,
            "account": ACCOUNT,
            "runbook": RUNBOOK,
            "vault": vault,
            "sweeper": SWEEPER_SCHEDULE,
            "user_role": azure_user_role(place),
        }

    done: dict[str, Any] = cloud.call("setting up the annex", install)
    cloud.arm(vault)
    return done
