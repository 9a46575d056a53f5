"""A scale set's secret (a pool join token, say) in Key Vault, read by its instances at boot.

The secret never travels in custom data, which anyone who can read the VM model sees.
Instead:

1. The vault (`keyvaultName=`, in `keyvaultRG=` or the scale set's group) is created if
   missing (access policies, not RBAC, so no role-assignment rights are needed), and the
   secret `vaultKey=` is set from the file `vaultSecretFile=` through ARM, or must exist.
2. The scale set gets a system-assigned managed identity and a CustomScript extension
   whose script (protected settings) asks the instance metadata service for a vault token
   and writes the secret to `vaultSecretPath=` (default /etc/condor/tokens.d/<vaultKey>).
3. The identity is granted `get` on the vault's secrets before any instance exists: the
   scale set is created with capacity 0 and scaled up afterwards.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any
from urllib.parse import urlsplit

from htgrid.backends.azure._args import OWNER_TAG, KeyVaultRef
from htgrid.backends.azure._arm import Placement, dig, ensure_group, get_or_none
from htgrid.backends.azure._errors import AzureServiceError
from htgrid.backends.azure._session import Session

__all__ = ["VAULT_TAG", "fetch_extension", "fetch_script", "grant_secret_read", "prepare_vault"]

#: Tag on a scale set naming `<group>/<vault>` it was given access to (for deletion).
VAULT_TAG = "htgrid-keyvault"
EXTENSION_NAME = "htgrid-fetch-secret"


def prepare_vault(
    session: Session, ref: KeyVaultRef, group: str, location: str, owner: str
) -> dict[str, Any]:
    """The vault (created if missing) holding the secret (set from its file if given)."""
    vault_group = ref.resource_group or group
    vaults = session.keyvault.vaults
    vault = get_or_none(vaults.get, vault_group, ref.vault)
    if vault is None:
        if vault_group != group:
            ensure_group(session, Placement(vault_group, False), location, owner)
        vault = vaults.begin_create_or_update(
            vault_group,
            ref.vault,
            {
                "location": location,
                "tags": {OWNER_TAG: owner},
                "properties": {
                    "tenantId": session.settings.tenant_id,
                    "sku": {"family": "A", "name": "standard"},
                    "accessPolicies": [],
                    "enableRbacAuthorization": False,
                },
            },
        ).result()
    secrets = session.keyvault.secrets
    if ref.secret_file is not None:
        with open(ref.secret_file) as stream:
            value = stream.read().strip()
        secrets.create_or_update(
            vault_group, ref.vault, ref.secret, {"properties": {"value": value}}
        )
    elif get_or_none(secrets.get, vault_group, ref.vault, ref.secret) is None:
        raise AzureServiceError(
            f"secret '{ref.secret}' could not be found in key vault '{ref.vault}' "
            "(give vaultSecretFile= to create it)",
            code="SecretNotFound",
            status=404,
        )
    return dict(vault)


def access_policy(tenant: str, principal: str) -> dict[str, Any]:
    """Read access to the vault's secrets, nothing else."""
    return {"tenantId": tenant, "objectId": principal, "permissions": {"secrets": ["get"]}}


def grant_secret_read(session: Session, vault_id: str, tenant: str, principal: str) -> None:
    group, name = _group_and_name(vault_id)
    session.keyvault.vaults.update_access_policy(
        group, name, "add", {"properties": {"accessPolicies": [access_policy(tenant, principal)]}}
    )


def revoke_secret_read(session: Session, vault_ref: str, tenant: str, principal: str) -> None:
    """Drop a deleted scale set's access (the vault may be gone already)."""
    group, _, name = vault_ref.partition("/")
    get_or_none(
        session.keyvault.vaults.update_access_policy,
        group,
        name,
        "remove",
        {"properties": {"accessPolicies": [access_policy(tenant, principal)]}},
    )


def _group_and_name(vault_id: str) -> tuple[str, str]:
    parts = vault_id.strip("/").split("/")
    return parts[3], parts[-1]


def fetch_script(vault_uri: str, secret: str, destination: str) -> str:
    """The boot script: a managed-identity token from IMDS, then the secret, to a 0600 file."""
    host = urlsplit(vault_uri).hostname or ""
    resource = "https://" + host.split(".", 1)[1] if "." in host else "https://vault.azure.net"
    url = f"{vault_uri.rstrip('/')}/secrets/{secret}?api-version=7.4"
    imds = (
        "http://169.254.169.254/metadata/identity/oauth2/token"
        f"?api-version=2018-02-01&resource={resource}"
    )
    return f"""#!/bin/sh
# htgrid: fetch a Key Vault secret with this scale set's managed identity.
dest={shlex.quote(destination)}
value=
for attempt in $(seq 1 60); do
    token=$(curl -sf -H Metadata:true {shlex.quote(imds)} \\
        | sed -n 's/.*"access_token": *"\\([^"]*\\)".*/\\1/p')
    if [ -n "$token" ]; then
        value=$(curl -sf -H "Authorization: Bearer $token" {shlex.quote(url)} \\
            | sed -n 's/.*"value": *"\\([^"]*\\)".*/\\1/p')
        [ -n "$value" ] && break
    fi
    sleep 10  # the access policy may still be spreading
done
[ -n "$value" ] || exit 1
umask 077
mkdir -p "$(dirname "$dest")"
printf '%s' "$value" > "$dest"
"""


def fetch_extension(script: str) -> dict[str, Any]:
    """The CustomScript extension that runs `script` on every instance at provisioning."""
    return {
        "name": EXTENSION_NAME,
        "properties": {
            "publisher": "Microsoft.Azure.Extensions",
            "type": "CustomScript",
            "typeHandlerVersion": "2.1",
            "autoUpgradeMinorVersion": True,
            "protectedSettings": {"script": base64.b64encode(script.encode()).decode("ascii")},
        },
    }


def vault_uri(vault: Any) -> str:
    uri = dig(vault, "properties", "vaultUri")
    if not uri:
        raise AzureServiceError("the key vault has no vaultUri", code="InvalidVault")
    return str(uri)
