"""The fake ARM's Azure AD: OpenID discovery and the client credentials grant."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

Reply = tuple[int, dict[str, str], Any]


class AzureAd:
    """Issues bearer tokens to one service principal of one tenant."""

    def __init__(self, tenant: str, client_id: str, client_secret: str) -> None:
        self.tenant = tenant
        self.client_id = client_id
        self.client_secret = client_secret
        # token -> the principal (object id) it stands for; the service principal's
        # object id is its client id here.
        self._tokens: dict[str, str] = {}
        # Managed identities: Azure RBAC grants them only what is assigned to them.
        self.managed: set[str] = set()

    def valid(self, token: str) -> bool:
        return token in self._tokens

    def principal(self, token: str) -> str | None:
        return self._tokens.get(token)

    def issue(self, principal: str) -> str:
        """A token of a managed identity (what its IMDS endpoint hands out)."""
        token = _jwt(principal)
        self._tokens[token] = principal
        self.managed.add(principal)
        return token

    def openid(self, url: str, tenant: str) -> Reply:
        """What MSAL reads before it asks for a token (its tenant discovery)."""
        base = f"{url}/{tenant}"
        return (
            200,
            {},
            {
                "issuer": f"{base}/v2.0",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                "tenant_region_scope": None,
            },
        )

    def token(self, tenant: str, form: Any) -> Reply:
        """A token for the right tenant, client id and secret; AAD's errors otherwise."""
        form = form if isinstance(form, dict) else {}
        if tenant != self.tenant:
            return 400, {}, _error("invalid_request", "AADSTS90002: Tenant not found.")
        if form.get("grant_type") != "client_credentials" or not form.get("scope"):
            return 400, {}, _error("unsupported_grant_type", "only client_credentials here")
        if (
            form.get("client_id") != self.client_id
            or form.get("client_secret") != self.client_secret
        ):
            body = _error("invalid_client", "AADSTS7000215: Invalid client secret provided.")
            body["error_codes"] = [7000215]
            return 401, {}, body
        token = _jwt(self.client_id)
        self._tokens[token] = self.client_id
        return (
            200,
            {},
            {
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": token,
            },
        )


def _jwt(principal: str) -> str:
    """A token shaped as Entra ID's (a JWT whose `oid` claim is the principal's object
    id), its signature random: the fake knows its tokens by their whole text."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return ".".join((part({"typ": "JWT", "alg": "none"}), part({"oid": principal}),
                     secrets.token_urlsafe(24)))  # fmt: skip


def _error(error: str, description: str) -> dict[str, Any]:
    return {"error": error, "error_description": description}
