"""Each Azure annex user's own Key Vault, against the fake ARM (whose Azure RBAC checks
every call of a managed identity against its role assignments' scopes): a user's annex
token is readable by that user and the annex's nodes, by no other user, and no user can
give themselves a role on another's vault; the lease's end still purges every user's
secrets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from htgrid.annex import AzureAnnexes, SetupMissing, azure_setup
from htgrid.annex import azure_runbook as rb
from htgrid.annex._azure import RBAC_ADMIN, SECRETS_OFFICER, SECRETS_USER, assign, role_id
from htgrid.annex._azure_setup import azure_user_role

from ._azure_cloud import LOCATION, NOTHING, arm, azure, runbook_arm, sweeper_event

__all__ = ["arm", "azure"]

_A = "00000000-0000-0000-0000-00000000aaaa"
_B = "00000000-0000-0000-0000-00000000bbbb"
_C = "00000000-0000-0000-0000-00000000cccc"  # holds the user role, not named to setup
_NODE = "00000000-0000-0000-0000-00000000c0de"  # an annex node's identity


def _user(azure: Any, principal: str, condition: str) -> AzureAnnexes:
    """`principal`'s client, the printed user role on the group its only right there."""
    token = azure.managed_identity_token(principal)
    client = AzureAnnexes(LOCATION, token=lambda resource: token)
    azure.restrict(principal, azure_user_role(client.place)["Actions"], condition)
    azure.store.users.add(principal)
    client.check_setup()
    return client


@pytest.fixture
def users(azure: Any) -> dict[str, AzureAnnexes]:
    """Users A and B, named to setup (run again), each holding only the printed user
    role on the group and what setup gave them: their calls are checked by Azure RBAC."""
    made = azure_setup(AzureAnnexes(LOCATION), users=(_A, _B))
    assert set(made["user_vaults"]) == {_A, _B}
    return {p: _user(azure, p, made["user_condition"]) for p in (_A, _B)}


def test_each_user_keeps_annex_secrets_in_a_vault_of_their_own(
    azure: Any, users: dict[str, AzureAnnexes]
) -> None:
    a, b = users[_A], users[_B]
    assert a.place.vault != b.place.vault
    assert azure.setup["vault"] not in (a.place.vault, b.place.vault)
    a.put("ann", "token", "A's annex token", secure=True, expires=time.time() + 3600)
    assert a.get("ann", "token") == "A's annex token"
    secrets = azure.store.vault_secrets
    assert rb.secret_name("ann", "token") in secrets[a.place.vault_path().lower()]
    # B's own client looks in B's vault; B's token on A's vault is refused.
    assert b.get("ann", "token") is None
    with pytest.raises(rb.ArmFailure) as refused:
        b.arm().on_vault(a.place.vault).get_secret(rb.secret_name("ann", "token"))
    assert refused.value.status == 403 and "ForbiddenByRbac" in str(refused.value)
    with pytest.raises(rb.ArmFailure) as refused:
        list(b.arm().on_vault(a.place.vault).secrets())
    assert refused.value.status == 403


def test_a_user_gives_secrets_user_on_their_own_vault_only(
    azure: Any, users: dict[str, AzureAnnexes]
) -> None:
    a, b = users[_A], users[_B]
    a.put("ann", "token", "A's annex token", secure=True, expires=time.time() + 3600)
    secret = f"{a.place.vault_path()}/secrets/{rb.secret_name('ann', 'token')}"
    place = a.place
    # B may not open A's secret or vault to itself, by any role.
    for scope, role in (
        (secret, SECRETS_USER),
        (a.place.vault_path(), SECRETS_USER),
        (a.place.vault_path(), SECRETS_OFFICER),
        (a.place.vault_path(), RBAC_ADMIN),
    ):
        with pytest.raises(rb.ArmFailure, match="AuthorizationFailed"):
            assign(b.arm(), scope, role_id(place, role), _B)
    with pytest.raises(rb.ArmFailure):
        b.arm().on_vault(a.place.vault).get_secret(rb.secret_name("ann", "token"))
    # Nor give itself more than Secrets User on its own vault.
    with pytest.raises(rb.ArmFailure, match="AuthorizationFailed"):
        assign(b.arm(), b.place.vault_path(), role_id(place, RBAC_ADMIN), _A)
    # A gives its annex's node Secrets User on its own secret: the node reads it.
    assign(a.arm(), secret, role_id(place, SECRETS_USER), _NODE)
    node = azure.managed_identity_token(_NODE)
    reader = rb.Arm(a.place, lambda resource: node, context=a.arm().context)
    assert reader.get_secret(rb.secret_name("ann", "token")) == "A's annex token"


def test_the_sweeper_purges_every_users_secrets(azure: Any, users: dict[str, AzureAnnexes]) -> None:
    for who, client in users.items():
        client.put(f"an{who[-1]}", "token", "secret", secure=True, expires=time.time() + 3600)
    assert len(azure.annex_leftovers()["secrets"]) == 2
    done = rb.sweep(runbook_arm(azure, sweeper_event(azure)), time.time())
    assert done["secrets"] == [rb.secret_name("ana", "token"), rb.secret_name("anb", "token")]
    assert azure.annex_leftovers() == NOTHING


def test_a_user_setup_did_not_name_is_told_how_to_get_a_vault(
    azure: Any, users: dict[str, AzureAnnexes]
) -> None:
    c = _user(azure, _C, azure.setup["user_condition"])
    assert c.place.vault == azure.setup["vault"]  # the shared vault: not C's to write
    with pytest.raises(SetupMissing, match=f"--user-object-ids {_C}"):
        c.put("anc", "token", "secret", secure=True, expires=time.time() + 3600)
    assert azure.annex_leftovers()["secrets"] == []


def test_a_user_ending_an_annex_ends_its_secrets_and_no_others(
    azure: Any, users: dict[str, AzureAnnexes]
) -> None:
    a, b = users[_A], users[_B]
    a.put("ana", "token", "A's", secure=True, expires=time.time() + 3600)
    b.put("anb", "token", "B's", secure=True, expires=time.time() + 3600)
    done = rb.enforce(a.arm(), "ana", 0, time.time(), force=True)
    assert done["secrets"] == [rb.secret_name("ana", "token")]
    assert azure.annex_leftovers()["secrets"] == [rb.secret_name("anb", "token")]
    assert b.get("anb", "token") == "B's"
