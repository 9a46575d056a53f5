"""A user's own Key Vault of the Azure annex: its name, and the caller's object id that
picks it."""

from __future__ import annotations

import base64
import json
import uuid

from htgrid.annex.azure_runbook import Place

__all__ = ["token_principal", "user_vault"]


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
