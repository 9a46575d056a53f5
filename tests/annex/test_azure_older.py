"""Annexes made before their user had a Key Vault of their own keep their secrets in the
setup's shared vault: the user's `add` finds them there (reading only), the user's
`shutdown` ends them there while the user's role allows (else says the sweeper will),
and setup run again copies them into their owners' vaults and takes the owners' role on
the shared vault away, the lease timer then keeping the copies there (which the annexes'
running nodes read) as `extend` changes them. Against the fake ARM, which checks every restricted principal's
call by Azure RBAC."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import Annexes, AnnexSpec, AzureAnnexes, azure_setup
from htgrid.annex import _azure_migrate as azure_migrate
from htgrid.annex import _azure_setup as azure_setup_code
from htgrid.annex import azure_runbook as rb
from htgrid.annex._azure import SECRETS_OFFICER, SECRETS_USER, USER_TAG, assign, role_id
from htgrid.annex._azure_setup import assignment_condition
from htgrid.testing import run_cli

from ._azure_cloud import IMAGE, LOCATION, arm, azure, runbook_arm, sweeper_event, tick
from .conftest import home
from .test_azure_vaults import _A, _B, _user

__all__ = ["arm", "azure", "home"]


def _shared(azure: Any) -> str:
    return str(azure.setup["vault"])


def _vault_path(client: AzureAnnexes, vault: str) -> str:
    return client.place.provider(f"Microsoft.KeyVault/vaults/{vault}")


def _secrets(azure: Any, client: AzureAnnexes, vault: str) -> dict[str, Any]:
    """The vault's secrets, by name: value and tags."""
    kept = azure.store.vault_secrets.get(_vault_path(client, vault).lower(), {})
    return {n: (s["value"], dict(s["tags"])) for n, s in kept.items()}


def _officers(azure: Any, client: AzureAnnexes, vault: str) -> set[str]:
    scope = _vault_path(client, vault).lower()
    return {
        a["properties"]["principalId"]
        for a in azure.store.role_assignments.values()
        if a["properties"]["scope"].lower() == scope
        and a["properties"]["roleDefinitionId"].endswith(SECRETS_OFFICER)
    }


def _older_user(azure: Any, principal: str) -> AzureAnnexes:
    """A user as an older setup left them: Secrets Officer on the shared vault, and a
    user role that may give Secrets User anywhere in the group."""
    admin = AzureAnnexes(LOCATION)
    admin.check_setup()
    shared = _vault_path(admin, _shared(azure))
    assign(admin.arm(), shared, role_id(admin.place, SECRETS_OFFICER), principal, kind=None)
    client = _user(azure, principal, assignment_condition(admin.place))
    assert client.place.vault == _shared(azure)
    return client


def _make(client: AzureAnnexes, home: Path, name: str, *, join: bool = True) -> None:
    own = None if join else "#!/bin/sh\n"
    spec = AnnexSpec(name, count=1, lifetime=3600, image_ids=(IMAGE,), join=join, user_data=own)
    Annexes(client, home, pool="127.0.0.1:1").create(spec)


def _untag(azure: Any, client: AzureAnnexes, annex: str) -> None:
    """Secrets as htgrid wrote them before it tagged their user."""
    kept = azure.store.vault_secrets[_vault_path(client, _shared(azure)).lower()]
    for secret in kept.values():
        if secret["tags"].get(rb.ANNEX_TAG) == annex:
            secret["tags"].pop(USER_TAG, None)


def _read_as(azure: Any, client: AzureAnnexes, vault: str, principal: str, secret: str) -> Any:
    token = azure.managed_identity_token(principal)
    reader = rb.Arm(client.place, lambda resource: token, context=client.arm().context)
    return reader.on_vault(vault).get_secret(secret)


def _identities(azure: Any, annex: str) -> list[str]:
    return [
        r.body["identity"]["principalId"]
        for r in azure.store.of_type("microsoft.compute/virtualmachinescalesets")
        if r.body["tags"].get(rb.ANNEX_TAG) == annex
    ]


def test_a_users_add_and_shutdown_find_an_annex_in_the_shared_vault(
    azure: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = _older_user(azure, _A)
    _make(older, home, "o1")
    _make(older, home, "o2")
    _untag(azure, older, "o1")
    # The setup before this one: A gets a vault, nothing moves.
    monkeypatch.setattr(azure_setup_code, "migrate", lambda *args: {}, raising=False)
    azure_setup(AzureAnnexes(LOCATION), users=(_A,))
    a = _user(azure, _A, assignment_condition(older.place))
    mine = a.place.vault
    assert mine != _shared(azure) and _secrets(azure, a, mine) == {}
    shared_before = _secrets(azure, a, _shared(azure))

    added = Annexes(a, home, pool="127.0.0.1:1").add("o1", count=1)
    # The shared vault only read; the token and lease copied to A's vault, which the
    # new scale set's identity reads (and no other vault's).
    assert _secrets(azure, a, _shared(azure)) == shared_before
    token = rb.secret_name("o1", "token")
    assert _secrets(azure, a, mine)[token][0] == shared_before[token][0]
    (node,) = [
        r.body["identity"]["principalId"]
        for r in azure.store.of_type("microsoft.compute/virtualmachinescalesets")
        if r.body["name"] == added.ids[0]
    ]
    assert _read_as(azure, a, mine, node, token) == shared_before[token][0]
    with pytest.raises(rb.ArmFailure, match="ForbiddenByRbac"):
        _read_as(azure, a, _shared(azure), node, token)

    # A's role on the shared vault still allows: shutdown ends o2's secrets there.
    done = Annexes(a, home, pool="127.0.0.1:1").shutdown("o2")
    assert sorted(done["secrets"]) == sorted(rb.secret_name("o2", w) for w in ("config", "lease", "token"))  # fmt: skip
    assert done["notes"] == []
    assert not [n for n in _secrets(azure, a, _shared(azure)) if "-o2-" in n]

    # Read only now (Secrets User): o1's secrets there are left, and the output says who
    # ends them; the sweeper does.
    scope = _vault_path(a, _shared(azure))
    admin = AzureAnnexes(LOCATION)
    admin.check_setup()
    for assignment in list(azure.store.role_assignments.values()):
        p = assignment["properties"]
        if p["principalId"] == _A and p["scope"].lower() == scope.lower():
            admin.arm().delete(assignment["id"], rb.AUTHORIZATION_API)
    assign(admin.arm(), scope, role_id(a.place, SECRETS_USER), _A, kind=None)
    a = _user(azure, _A, assignment_condition(older.place))
    done = Annexes(a, home, pool="127.0.0.1:1").shutdown("o1")
    (note,) = done["notes"]
    assert f"shared Key Vault {_shared(azure)}" in note and "sweeper purges them" in note
    assert not [n for n in _secrets(azure, a, mine) if "-o1-" in n]
    assert [n for n in _secrets(azure, a, _shared(azure)) if "-o1-" in n]
    rb.sweep(runbook_arm(azure, sweeper_event(azure)), time.time())
    assert azure.annex_leftovers()["secrets"] == []
    assert azure.annex_leftovers()["scale_sets"] == []


def test_setup_again_moves_older_annexes_to_their_owners_vaults(azure: Any, home: Path) -> None:
    older = _older_user(azure, _A)
    _make(older, home, "m1")
    _make(older, home, "m2", join=False)
    _untag(azure, older, "m1")  # its owner: who gave its nodes their token
    b = _older_user(azure, _B)
    _make(b, home, "b1", join=False)
    shared = _shared(azure)
    before = _secrets(azure, older, shared)

    made = azure_setup(AzureAnnexes(LOCATION), users=(_A,))
    a = _user(azure, _A, assignment_condition(older.place))
    moved = made["moved"]
    assert moved["copied"] == {"m1": a.place.vault, "m2": a.place.vault}
    assert moved["unowned"] == ["b1"] and moved["revoked"] == [_A] and not moved["pending"]
    mine = _secrets(azure, a, a.place.vault)
    assert {n: v for n, (v, _) in mine.items()} == {
        n: v for n, (v, _) in before.items() if "-m1-" in n or "-m2-" in n
    }
    assert all(tags[USER_TAG] == _A for _, tags in mine.values())
    # The copies stay for the running nodes; A's role there is gone, B's (no vault) not,
    # and setup kept no role of its own there.
    assert _secrets(azure, a, shared) == before
    token = rb.secret_name("m1", "token")
    (node,) = _identities(azure, "m1")
    assert _read_as(azure, a, shared, node, token) == before[token][0]
    assert _officers(azure, a, shared) & {_A, _B} == {_B}
    with pytest.raises(rb.ArmFailure) as refused:
        a.arm().on_vault(shared).get_secret(token)
    assert refused.value.status == 403

    # Again: nothing more moves, nothing copied over (A's lease secret changed since).
    a.put("m1", "lease", "changed")
    roles = set(azure.store.role_assignments)
    again = azure_setup(AzureAnnexes(LOCATION), users=(_A,))["moved"]
    assert again == {"copied": {}, "unowned": ["b1"], "revoked": [], "pending": ""}
    assert set(azure.store.role_assignments) == roles
    assert a.get("m1", "lease") == "changed"

    # A extends m1 (in A's vault): the lease timer writes the new lease and token where
    # m1's running node reads them, the shared vault, once.
    new = Annexes(a, home, pool="127.0.0.1:1").extend("m1", lifetime=7200)
    assert tick(azure, time.time())["followed"] == ["m1"]
    assert _read_as(azure, a, shared, node, rb.secret_name("m1", "lease")) == str(int(new))
    assert _read_as(azure, a, shared, node, token) == a.get("m1", "token") != before[token][0]
    assert tick(azure, time.time())["followed"] == []

    # A's own commands find the annex in A's vault; its shutdown ends the copies there.
    Annexes(a, home, pool="127.0.0.1:1").add("m1", count=1)
    done = Annexes(a, home, pool="127.0.0.1:1").shutdown("m1")
    assert done["notes"] == [] and len(done["secrets"]) == 3
    rb.sweep(runbook_arm(azure, sweeper_event(azure)), time.time())
    left = azure.annex_leftovers()["secrets"]
    assert not [n for n in left if "-m1-" in n]
    assert {n.rsplit("-", 1)[0] for n in left} == {"htgrid-annex-m2", "htgrid-annex-b1"}


def test_setup_refused_by_key_vault_moves_nothing_and_says_to_run_again(
    azure: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key Vault applies a new role minutes late: setup's reads refused, the roles stay
    as they were, and setup run again (the role applied) finishes the move."""
    older = _older_user(azure, _A)
    _make(older, home, "k1")
    shared = _shared(azure)
    with monkeypatch.context() as late:
        late.setattr(azure_migrate, "_Access", _NotYet)
        status, out, err = run_cli(
            home, "annex", "setup", "--cloud", "azure", "--user-object-ids", _A
        )  # fmt: skip
    assert status == 0, err
    assert "run setup again in a few minutes" in out and "ForbiddenByRbac" in out
    a = _user(azure, _A, assignment_condition(older.place))
    assert _secrets(azure, a, a.place.vault) == {}
    assert _A in _officers(azure, a, shared)
    status, out, err = run_cli(home, "annex", "setup", "--cloud", "azure", "--user-object-ids", _A)
    assert status == 0, err
    assert f"Annex k1: its secrets copied from Key Vault {shared} to its owner's {a.place.vault}" in out  # fmt: skip
    assert f"Secrets Officer on Key Vault {shared} taken from {_A}" in out
    assert len(_secrets(azure, a, a.place.vault)) == 3 and _A not in _officers(azure, a, shared)


class _NotYet:
    """Setup's own role on the vaults, given but not yet applied by Key Vault."""

    def __init__(self, *args: Any) -> None:
        pass

    def need(self, vault: str) -> None:
        pass

    def release(self) -> None:
        pass


def test_status_reads_annexes_not_yet_moved_in_the_shared_vault_with_one_listing(
    azure: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = _older_user(azure, _A)
    _make(older, home, "o1")
    _make(older, home, "o2", join=False)
    monkeypatch.setattr(azure_setup_code, "migrate", lambda *args: {}, raising=False)
    azure_setup(AzureAnnexes(LOCATION), users=(_A, _B))
    condition = assignment_condition(older.place)
    b = _user(azure, _B, condition)
    for name in ("b1", "b2", "b3"):  # in B's own vault, which A cannot read
        _make(b, home, name, join=False)
    a = _user(azure, _A, condition)
    shared = _shared(azure)
    seen: list[tuple[str, str]] = []
    request = rb.Arm.request

    def counted(self: rb.Arm, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((method, url))
        return request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(rb.Arm, "request", counted)
    ads = {ad["Name"]: ad for ad in Annexes(a, home, pool="127.0.0.1:1").ads(publish=False)}
    # The shared vault: one listing of its secrets, and a read of each of the two annexes
    # kept there; none for the three in B's vault.
    there = sorted(
        (m, u.partition("?")[0].rsplit("/", 1)[1]) for m, u in seen if f"/vault/{shared}/" in u
    )
    assert there == [
        ("GET", rb.secret_name("o1", "config")),
        ("GET", rb.secret_name("o2", "config")),
        ("GET", "secrets"),
    ]
    (made,) = Annexes(older, home).describe("o1")
    assert made.owner
    for name in ("o1", "o2"):
        assert (ads[name]["Owner"], ads[name]["Requested"]) == (made.owner, 1), name
    assert {ads[n]["Owner"] for n in ("b1", "b2", "b3")} == {""}
