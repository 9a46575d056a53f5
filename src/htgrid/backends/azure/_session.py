"""Credentials and SDK clients: the auth file, ClientSecretCredential, the four mgmt clients.

Every request names an auth file (`AzureAuthFile`, or `NULL`) and a subscription. The file
is either of:

* HTCondor's text form, one `key value` per line: `client_id`, `secret` (or
  `client_secret`), `tenant_id`; htgrid also reads `authority` (the Azure AD endpoint),
  `resource_manager_url` and `resource_group` (where VMs go by default).
* The JSON that `az ad sp create-for-rbac --sdk-auth` prints: `clientId`, `clientSecret`,
  `tenantId`, `activeDirectoryEndpointUrl`, `resourceManagerEndpointUrl` (and htgrid's
  optional `resourceGroup`).

`NULL` takes the service principal from AZURE_TENANT_ID, AZURE_CLIENT_ID and
AZURE_CLIENT_SECRET (AZURE_AUTHORITY_HOST and AZURE_RESOURCE_MANAGER_URL optional).
Clients are built once per (file, its modification time, subscription) and shared by the
worker threads; azure-core clients and credentials are thread-safe.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from htgrid.backends.azure._errors import AzureServiceError

__all__ = ["AuthSettings", "ClientOptions", "Session", "SessionCache", "read_auth_file"]

PUBLIC_AUTHORITY = "https://login.microsoftonline.com"
PUBLIC_ARM = "https://management.azure.com"
# Hosts MSAL knows; for any other authority its instance discovery would ask
# login.microsoftonline.com about it, so discovery is turned off there.
_KNOWN_AUTHORITY_HOSTS = frozenset(
    {
        "login.microsoftonline.com",
        "login.microsoftonline.us",
        "login.chinacloudapi.cn",
        "login.partner.microsoftonline.cn",
    }
)
_TEXT_KEYS = {
    "client_id": "client_id",
    "secret": "client_secret",
    "client_secret": "client_secret",
    "tenant_id": "tenant_id",
    "authority": "authority",
    "resource_manager_url": "arm_url",
    "resource_group": "resource_group",
}
_JSON_KEYS = {
    "clientid": "client_id",
    "clientsecret": "client_secret",
    "tenantid": "tenant_id",
    "activedirectoryendpointurl": "authority",
    "resourcemanagerendpointurl": "arm_url",
    "resourcegroup": "resource_group",
}


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """A service principal and the endpoints it is used against."""

    tenant_id: str
    client_id: str
    client_secret: str = field(repr=False)
    authority: str = PUBLIC_AUTHORITY
    arm_url: str = PUBLIC_ARM
    resource_group: str | None = None


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How the SDK clients behave (from the command line)."""

    #: The CA bundle to trust (the grid manager's GAHP_SSL_CAFILE); None: the system's.
    ca_file: str | None = None
    #: azure-core's own retries of throttled or failed calls before we report an error.
    retries: int = 3
    #: azure-core's back-off factor between those retries (it ignores `Retry-After: 0`).
    retry_backoff: float = 0.8
    #: Seconds between polls of a long-running operation when Azure names no Retry-After.
    polling_interval: float = 5.0
    connection_timeout: float = 30.0
    read_timeout: float = 120.0


def _settings(values: Mapping[str, str], where: str) -> AuthSettings:
    missing = [key for key in ("tenant_id", "client_id", "client_secret") if not values.get(key)]
    if missing:
        raise AzureServiceError(f"{where} lacks {', '.join(missing)}", code="InvalidAuthFile")
    return AuthSettings(
        tenant_id=values["tenant_id"],
        client_id=values["client_id"],
        client_secret=values["client_secret"],
        authority=(values.get("authority") or PUBLIC_AUTHORITY).rstrip("/"),
        arm_url=(values.get("arm_url") or PUBLIC_ARM).rstrip("/"),
        resource_group=values.get("resource_group") or None,
    )


def read_auth_file(path: str) -> AuthSettings:
    """The settings in an auth file (either form), or from the environment for `NULL`."""
    if path.upper() == "NULL":
        env = os.environ
        return _settings(
            {
                "tenant_id": env.get("AZURE_TENANT_ID", ""),
                "client_id": env.get("AZURE_CLIENT_ID", ""),
                "client_secret": env.get("AZURE_CLIENT_SECRET", ""),
                "authority": env.get("AZURE_AUTHORITY_HOST", ""),
                "arm_url": env.get("AZURE_RESOURCE_MANAGER_URL", ""),
            },
            "the environment (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET)",
        )
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise AzureServiceError(
            f"cannot read auth file {path}: {err.strerror or err}", code="InvalidAuthFile"
        ) from err
    values: dict[str, str] = {}
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as err:
            raise AzureServiceError(f"auth file {path}: {err}", code="InvalidAuthFile") from err
        if not isinstance(data, dict):
            raise AzureServiceError(f"auth file {path} is not an object", code="InvalidAuthFile")
        for key, value in data.items():
            mapped = _JSON_KEYS.get(str(key).lower())
            if mapped and isinstance(value, str):
                values[mapped] = value
    else:
        for line in text.splitlines():
            words = line.split(None, 1)
            if len(words) == 2 and not words[0].startswith("#"):
                mapped = _TEXT_KEYS.get(words[0].lower())
                if mapped:
                    values[mapped] = words[1].strip()
    return _settings(values, f"auth file {path}")


@dataclass(frozen=True, slots=True)
class Session:
    """The clients for one auth file and subscription. SDK objects are typed Any."""

    settings: AuthSettings
    subscription: str
    credential: Any
    compute: Any
    network: Any
    resource: Any
    keyvault: Any

    @property
    def default_resource_group(self) -> str | None:
        """Where VMs go when a request names no resource group."""
        return self.settings.resource_group


def build_session(settings: AuthSettings, subscription: str, options: ClientOptions) -> Session:
    """A credential and the compute, network, resource and keyvault clients."""
    # Imported here: the SDKs are an optional extra and slow to import.
    from azure.identity import ClientSecretCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.keyvault import KeyVaultManagementClient
    from azure.mgmt.network import NetworkManagementClient
    from azure.mgmt.resource.resources import ResourceManagementClient

    transport: dict[str, Any] = {
        "connection_timeout": options.connection_timeout,
        "read_timeout": options.read_timeout,
    }
    if options.ca_file:
        transport["connection_verify"] = options.ca_file
    host = urlsplit(settings.authority).hostname or ""
    credential = ClientSecretCredential(
        settings.tenant_id,
        settings.client_id,
        settings.client_secret,
        authority=settings.authority,
        disable_instance_discovery=host not in _KNOWN_AUTHORITY_HOSTS,
        **transport,
    )
    common: dict[str, Any] = {
        "base_url": settings.arm_url,
        "credential_scopes": [f"{settings.arm_url}/.default"],
        "retry_total": options.retries,
        "retry_backoff_factor": options.retry_backoff,
        "polling_interval": options.polling_interval,
        **transport,
    }
    return Session(
        settings=settings,
        subscription=subscription,
        credential=credential,
        compute=ComputeManagementClient(credential, subscription, **common),
        network=NetworkManagementClient(credential, subscription, **common),
        resource=ResourceManagementClient(credential, subscription, **common),
        keyvault=KeyVaultManagementClient(credential, subscription, **common),
    )


class SessionCache:
    """Sessions by auth file and subscription, rebuilt when the file changes."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], tuple[object, Session]] = {}

    def get(self, auth_file: str, subscription: str) -> Session:
        """The session for this request (called from worker threads)."""
        if not subscription or subscription.upper() == "NULL":
            raise AzureServiceError("no subscription given", code="InvalidSubscriptionId")
        stamp = _stamp(auth_file)
        key = (auth_file, subscription)
        with self._lock:
            cached = self._sessions.get(key)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            session = build_session(read_auth_file(auth_file), subscription, self._options)
            self._sessions[key] = (stamp, session)
            return session


def _stamp(auth_file: str) -> object:
    if auth_file.upper() == "NULL":
        env = os.environ
        return tuple(env.get(name) for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID"))
    try:
        info = os.stat(auth_file)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)
