"""A user's own Key Vault of the Azure annex: its name, the caller's object id that
picks it, and the setup's shared vault, where annexes made before their user had a
vault of their own keep their secrets (read when the user's vault has none, ended when
the user's role there still allows)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Collection

from htgrid.annex.azure_runbook import ANNEX_TAG, Arm, ArmFailure, Place, secret_name

__all__ = [
    "end_shared",
    "left_note",
    "shared_secret",
    "shared_settings",
    "token_principal",
    "user_vault",
]


def user_vault(place: Place, principal: str) -> str:
    """The name of the vault setup makes for the user (object id) `principal`: derived
    from the group and the user, so `annex create` finds it without asking."""
    digest = uuid.uuid5(uuid.NAMESPACE_URL, f"{place.group_path()}|{principal.lower()}")
    return f"htgriduser{digest.hex[:12]}"


def token_principal(token: str) -> str | None:
    """The object id (`oid` claim) of an Entra ID access token, unverified: it only
    picks the caller's vault (the vault's role assignments are what guard it)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        return None
    oid = claims.get("oid") if isinstance(claims, dict) else None
    return oid if isinstance(oid, str) and oid else None


def shared_secret(arm: Arm, shared: str, annex: str, what: str) -> str | None:
    """The annex's secret `what` in the shared vault, if there and the caller may read
    it (a role setup has since taken away: as if not there)."""
    try:
        return arm.on_vault(shared).get_secret(secret_name(annex, what))
    except ArmFailure as exc:
        if exc.status == 403:
            return None
        raise


def shared_settings(arm: Arm, shared: str, annexes: Collection[str]) -> dict[str, str]:
    """The launch settings of those of `annexes` that keep them in the shared vault: one
    listing of its secrets (so that the annexes in their users' own vaults cost no
    call each), then a read of each found there (Key Vault lists no values). What the
    caller may not list or read there is as if not there."""
    wanted = {secret_name(annex, "config"): annex for annex in annexes}
    if not wanted:
        return {}
    vault = arm.on_vault(shared)
    found: dict[str, str] = {}
    try:
        there = [name for name, _ in vault.secrets() if name in wanted]
        for name in there:
            value = vault.get_secret(name)
            if value is not None:
                found[wanted[name]] = value
    except ArmFailure as exc:
        if exc.status != 403:
            raise
    return found


def end_shared(arm: Arm, shared: str, annex: str) -> tuple[list[str], bool | None]:
    """Purge the annex's secrets in the shared vault: (those purged, and whether some
    were left: True if the caller may list but not delete them, None if it may not
    even list the vault's secrets, so cannot tell, False if none are left)."""
    vault = arm.on_vault(shared)
    ended: list[str] = []
    try:
        found = [name for name, tags in vault.secrets() if tags.get(ANNEX_TAG) == annex]
    except ArmFailure as exc:
        if exc.status != 403:
            raise
        return ended, None
    try:
        for name in found:
            vault.delete_secret(name)
            ended.append(name)
    except ArmFailure as exc:
        if exc.status != 403:
            raise
        return ended, True
    return ended, False


def left_note(annex: str, shared: str) -> str:
    return (
        f"annex {annex}'s secrets in the shared Key Vault {shared} are not yours to "
        "delete (setup has taken that role away): the lease runbook's hourly sweeper "
        "purges them"
    )
