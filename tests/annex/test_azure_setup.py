"""`htgrid annex setup --cloud azure` run again, against the fake ARM: it changes nothing
an earlier setup or the administrator made that annexes rely on. A vault of an older
setup, in access-policy mode, is switched to Azure RBAC only after each policy's grants
are given as roles on the vault (its annexes' identities still read their tokens); the
vault the Automation account names stays its vault; the nodes' VNet keeps its subnets."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from htgrid.annex import azure_runbook as rb
from htgrid.annex import azure_setup
from htgrid.testing import run_cli

from ._azure_cloud import arm, azure, cloud
from .conftest import home

__all__ = ["arm", "azure", "home"]

_OLD_NODE = "00000000-0000-0000-0000-0000000000a1"
_OLD_USER = "00000000-0000-0000-0000-0000000000b2"


def _vault(azure: Any) -> Any:
    """The setup's shared vault (each user named to setup has one of their own too)."""
    (vault,) = [
        v for v in azure.store.of_type("microsoft.keyvault/vaults")
        if v.body["name"] == azure.setup["vault"]
    ]  # fmt: skip
    return vault


def _reader(azure: Any, principal: str) -> rb.Arm:
    """A data-plane client as `principal` (a managed identity's token)."""
    user = cloud()
    user.check_setup()
    token = azure.managed_identity_token(principal)
    return rb.Arm(
        user.place,
        lambda resource: token,
        vault_url=f"{azure.url}/vault/{azure.setup['vault']}",
        context=ssl.create_default_context(cafile=str(azure.ca_file)),
    )


def test_setup_again_migrates_an_access_policy_vault_without_cutting_anyone_off(
    azure: Any, home: Path
) -> None:
    reader = _reader(azure, _OLD_NODE)
    # The vault as an older setup left it: access policies (an old annex's scale-set
    # identity may get secrets; a user may manage them), no Azure RBAC.
    vault = _vault(azure)
    tenant = vault.body["properties"]["tenantId"]
    policies = [
        {"tenantId": tenant, "objectId": _OLD_NODE, "permissions": {"secrets": ["get"]}},
        {"tenantId": tenant, "objectId": _OLD_USER,
         "permissions": {"secrets": ["get", "list", "set", "delete", "purge"]}},
    ]  # fmt: skip
    vault.body["properties"].update(enableRbacAuthorization=False, accessPolicies=policies)
    secrets = azure.store.vault_secrets.setdefault(vault.id.lower(), {})
    secrets["htgrid-annex-old-token"] = {
        "value": "old annex token",
        "tags": {rb.ANNEX_TAG: "old"},
        "attributes": {"enabled": True},
    }
    assert reader.get_secret("htgrid-annex-old-token") == "old annex token"
    status, out, err = run_cli(home, "annex", "setup", "--cloud", "azure")
    assert status == 0, err
    assert "switched to Azure RBAC" in out and _OLD_NODE in out
    props = _vault(azure).body["properties"]
    assert props["enableRbacAuthorization"] is True
    assert props["accessPolicies"] == policies  # kept, inert under RBAC
    # The old annex's identity reads its token as before; the user manages secrets.
    assert reader.get_secret("htgrid-annex-old-token") == "old annex token"
    roles = {
        (a["properties"]["principalId"], a["properties"]["roleDefinitionId"].rsplit("/", 1)[1])
        for a in azure.store.role_assignments.values()
        if a["properties"]["scope"].lower() == vault.id.lower()
    }
    assert (_OLD_NODE, "4633458b-17de-408a-b874-0445c86b69e6") in roles  # Secrets User
    assert (_OLD_USER, "b86a8fe4-44ce-4948-aee5-eccb2c155cd7") in roles  # Secrets Officer
    # Again: nothing more to migrate, nothing changes.
    assert azure_setup(cloud())["migrated"] == []


def test_setup_again_keeps_the_accounts_vault_and_the_vnets_subnets(azure: Any) -> None:
    other = azure_setup(cloud(), vault="htgridannexother1")
    assert other["vault"] == "htgridannexother1"
    (vnet,) = azure.store.of_type("microsoft.network/virtualnetworks")
    subnets = vnet.body["properties"]["subnets"]
    subnets.append({"name": "admins", "properties": {"addressPrefix": "10.64.200.0/24"}})
    again = azure_setup(cloud())
    assert again["vault"] == "htgridannexother1"
    account = azure.resource("htgrid-annex", "Microsoft.Automation/automationAccounts/htgrid-annex")
    assert account.body["tags"]["htgrid:AnnexVault"] == "htgridannexother1"
    (vnet,) = azure.store.of_type("microsoft.network/virtualnetworks")
    assert [s["name"] for s in vnet.body["properties"]["subnets"]] == ["nodes", "admins"]
