"""`htgrid annex setup --cloud azure` run again moves annexes made before their users had
vaults of their own: each one's secrets in the shared vault are copied into its owner's
vault (a copy already there is newer: kept), then the owners' Secrets Officer role on
the shared vault goes, so no user reads another's token there any more.

The copies in the shared vault stay: the running nodes read their token and lease there
(their boot settings name the vault); the lease runbook and its sweeper purge them
with the annex (an annex whose lease is over is not moved). The owner is the secret's htgrid:AnnexUser tag, else whoever gave the
annex's nodes Secrets User on its token (the role assignment's createdBy): an annex
with neither (no token, made by an older htgrid) stays in the shared vault, to its
lease. Setup reads and writes secrets with a Secrets Officer role it gives itself on
the vaults concerned and takes back once done; Key Vault applies a new role some minutes
late, so a refusal leaves the roles as they are and says to run setup again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from htgrid.annex._azure import (
    SECRETS_OFFICER,
    SECRETS_USER,
    USER_TAG,
    assign,
    assignment_path,
    role_id,
)
from htgrid.annex.azure_runbook import (
    ANNEX_TAG,
    AUTHORIZATION_API,
    KEYVAULT_API,
    Arm,
    ArmFailure,
    Place,
    leases,
    secret_name,
)

__all__ = ["migrate"]

_ASSIGNMENTS = "providers/Microsoft.Authorization/roleAssignments"


def _vault_path(place: Place, name: str) -> str:
    return place.provider(f"Microsoft.KeyVault/vaults/{name}")


def _user_vaults(arm: Arm, place: Place) -> dict[str, str]:
    """Each user with a vault of their own (object id, lowered) -> the vault's name."""
    found = arm.listing(place.provider("Microsoft.KeyVault/vaults"), KEYVAULT_API)
    return {
        str(tags[USER_TAG]).lower(): str(v["name"])
        for v in found
        if (tags := v.get("tags") or {}).get(USER_TAG)
    }


class _Access:
    """Secrets Officer for setup itself on the vaults it copies between, given where it
    had none, taken back by `release`."""

    def __init__(self, arm: Arm, place: Place, admin: str | None) -> None:
        self.arm, self.place, self.admin = arm, place, admin
        self.given: list[str] = []
        self.seen: set[str] = set()

    def need(self, vault: str) -> None:
        scope = _vault_path(self.place, vault)
        if self.admin is None or scope in self.seen:
            return
        self.seen.add(scope)
        officer = role_id(self.place, SECRETS_OFFICER)
        if self.arm.get(assignment_path(scope, self.admin, officer), AUTHORIZATION_API):
            return
        try:
            assign(self.arm, scope, officer, self.admin, kind=None)
        except ArmFailure as exc:
            if exc.status != 409:  # RoleAssignmentExists: held by another assignment
                raise
            return
        self.given.append(assignment_path(scope, self.admin, officer))

    def release(self) -> None:
        for path in self.given:
            self.arm.delete(path, AUTHORIZATION_API)


def _owners(arm: Arm, place: Place, shared: str, found: Mapping[str, list[Any]]) -> dict[str, str]:
    """annex -> its owner's object id (lowered), by tag or by its token's assignment."""
    owners = {}
    for annex, items in found.items():
        tagged = [t[USER_TAG] for _, t, _ in items if t.get(USER_TAG)]
        if tagged:
            owners[annex] = str(tagged[0]).lower()
    if len(owners) == len(found):
        return owners
    user = role_id(place, SECRETS_USER).rsplit("/", 1)[1].lower()
    scope = _vault_path(place, shared)
    for a in arm.listing(f"{scope}/{_ASSIGNMENTS}", AUTHORIZATION_API):
        props = a.get("properties") or {}
        on = str(props.get("scope", "")).rsplit("/secrets/", 1)
        if len(on) != 2 or not str(props.get("roleDefinitionId", "")).lower().endswith(user):
            continue
        for annex in found:
            if on[1] == secret_name(annex, "token") and props.get("createdBy"):
                owners.setdefault(annex, str(props["createdBy"]).lower())
    return owners


def migrate(arm: Arm, place: Place, shared: str, admin: str | None, now: float) -> dict[str, Any]:
    """Copy the shared vault's annexes into their owners' vaults, then take the owners'
    Secrets Officer role on the shared vault away. What was done, as a dict: copied
    (annex -> vault), unowned (annexes left to their leases), revoked (principals),
    pending (why setup should run again, if it should)."""
    vaults = _user_vaults(arm, place)
    done: dict[str, Any] = {"copied": {}, "unowned": [], "revoked": [], "pending": ""}
    if not vaults:
        return done
    access = _Access(arm, place, admin)
    source = arm.on_vault(shared)
    try:
        access.need(shared)
        found: dict[str, list[Any]] = {}
        for name, tags, expires in source.secret_items():
            if tags.get(ANNEX_TAG):
                found.setdefault(tags[ANNEX_TAG], []).append((name, tags, expires))
        # An annex whose lease has ended (or was shut down) is the sweeper's to purge.
        live = {annex for _, annex, end in leases(arm) if end > now}
        found = {annex: items for annex, items in found.items() if annex in live}
        owners = _owners(arm, place, shared, found)
        for annex, items in sorted(found.items()):
            vault = vaults.get(owners.get(annex, ""))
            if vault is None:
                done["unowned"].append(annex)
                continue
            access.need(vault)
            target = arm.on_vault(vault)
            copied = 0
            for name, tags, expires in items:
                if expires is not None and expires <= now:
                    continue  # its lease over: the runbook purges it
                if target.get_secret(name) is not None:
                    continue  # copied before, and perhaps changed since (extend)
                value = source.get_secret(name)
                if value is None:
                    continue
                copy = {**tags, USER_TAG: owners[annex]}
                target.set_secret(name, value, copy, expires or now + 10 * 365 * 86400)
                copied += 1
            if copied:
                done["copied"][annex] = vault
    except ArmFailure as exc:
        if exc.status != 403:
            raise
        # Key Vault applies a role given minutes ago only minutes later.
        done["pending"] = f"{exc}: Key Vault has not applied setup's role yet"
        return done
    access.release()
    done["revoked"] = _revoke(arm, place, shared, set(vaults))
    return done


def _revoke(arm: Arm, place: Place, shared: str, users: set[str]) -> list[str]:
    """Remove the Secrets Officer role of `users` on the shared vault (at its scope)."""
    scope = _vault_path(place, shared)
    officer = role_id(place, SECRETS_OFFICER).rsplit("/", 1)[1].lower()
    revoked = []
    for a in arm.listing(f"{scope}/{_ASSIGNMENTS}", AUTHORIZATION_API):
        props = a.get("properties") or {}
        if (
            str(props.get("scope", "")).lower() == scope.lower()
            and str(props.get("roleDefinitionId", "")).lower().endswith(officer)
            and str(props.get("principalId", "")).lower() in users
        ):
            arm.delete(str(a["id"]), AUTHORIZATION_API)
            revoked.append(str(props["principalId"]))
    return sorted(revoked)
