"""The annex on Azure: a user's calls (create, add, extend, shutdown, describe), and the
administrator's one-time `setup --cloud azure`.

The cloud is the only record, as on AWS. In the setup's resource group an annex is

* its lease: a OneTime Automation schedule at the lease's end (`htgrid-annex-NAME-END`,
  its description the lease's event) and the job schedule that runs the lease runbook
  (`azure_runbook`) with that event; made first, before anything that spends;
* its Key Vault secrets `htgrid-annex-NAME-{lease,config,token}` in the user's own
  vault (`user_vault`: setup makes one for each user it is given; else the setup's),
  tagged `htgrid:AnnexName = NAME` and `htgrid:AnnexUser` (the token expiring with the
  lease); an annex made before its user had a vault is read in the setup's (add copies
  its token and lease to the user's; setup run again moves it: _azure_migrate);
* its scale sets, tagged `htgrid:AnnexName = NAME`, each with a system-assigned managed
  identity, created with capacity 0, then given its roles (Azure RBAC), then scaled to
  the count asked for. The identity may read its annex's token and lease secrets and no
  other (Key Vault Secrets User on each secret's scope, the vault being in RBAC mode)
  and delete instances of its own scale set and no other (the setup's node role on the
  set's scope): a node that stops, idle or at the lease's end, deletes its own VM.

So a crash of this tool at any moment leaves nothing the lease timer (setup's function
app, every minute: azure_timer), the runbook (at the lease's end) or its hourly sweeper
(for what no schedule rules) will not end.

Credentials: a service principal from AZURE_TENANT_ID, AZURE_CLIENT_ID and
AZURE_CLIENT_SECRET (AZURE_AUTHORITY_HOST, AZURE_RESOURCE_MANAGER_URL and
HTGRID_ANNEX_VAULT_URL for other clouds), the subscription from AZURE_SUBSCRIPTION_ID.
CA bundle: SSL_CERT_FILE, as Python's. HTGRID_ANNEX_POLL_ARM: seconds between polls of
a long-running operation (1).
"""

from __future__ import annotations

import datetime
import json
import os
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from htgrid.annex._azure_sets import annex_sets, evictions, instance, scale_set
from htgrid.annex._azure_vaults import (
    end_shared,
    left_note,
    shared_secret,
    shared_settings,
    token_principal,
    user_vault,
)
from htgrid.annex._errors import AnnexCloudError, AnnexNotFound, AnnexUsageError, SetupMissing
from htgrid.annex._spec import AnnexSpec, CloudAnnex, Instance
from htgrid.annex.azure_runbook import (
    ANNEX_TAG,
    ARM_URL,
    AUTHORIZATION_API,
    AUTOMATION_API,
    CAPACITY_TAG,
    COMPUTE_API,
    KEYVAULT_API,
    LEASE_TAG,
    USER_TAG,
    Arm,
    ArmFailure,
    Place,
    enforce,
    lease_event,
    leases,
    schedule_name,
    secret_name,
)

__all__ = [
    "ACCOUNT",
    "BLOB_OWNER",
    "GROUP",
    "MIN_LEASE",
    "NETWORK_API",
    "NODE_ROLE",
    "RBAC_ADMIN",
    "RESOURCES_API",
    "RUNBOOK",
    "RUNBOOK_ROLE",
    "SECRETS_OFFICER",
    "SECRETS_USER",
    "USER_TAG",
    "VAULT_TAG",
    "WEB_API",
    "AzureAnnexes",
    "assign",
    "assignment_path",
    "iso",
    "role_id",
    "timer_app",
    "vault_url",
]

RUNBOOK: Final = "htgrid-annex-lease"
#: The custom roles setup defines: an annex node's (delete its scale set's instances)
#: and the lease runbook's (end annexes).
NODE_ROLE: Final = "htgrid-annex-node"
RUNBOOK_ROLE: Final = "htgrid-annex-runbook"
ACCOUNT: Final = "htgrid-annex"
GROUP: Final = "htgrid-annex"
VAULT_TAG: Final = "htgrid:AnnexVault"
RESOURCES_API: Final = "2021-04-01"
NETWORK_API: Final = "2023-09-01"
WEB_API: Final = "2023-12-01"
#: Azure's built-in roles: read a secret's value; manage a vault's secrets.
SECRETS_USER: Final = "4633458b-17de-408a-b874-0445c86b69e6"
SECRETS_OFFICER: Final = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
#: Role Based Access Control Administrator: given on a user's own vault, conditioned to
#: assigning Secrets User only (to the user's annexes' identities).
RBAC_ADMIN: Final = "f58310d9-a9f6-439a-9e8d-f62e7b41a168"
#: Storage Blob Data Owner: the lease timer's function app keeps its state in blobs.
BLOB_OWNER: Final = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
#: Automation refuses a OneTime schedule less than 5 minutes ahead.
MIN_LEASE: Final = 360.0


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def role_id(place: Place, role: str) -> str:
    """A role definition's id: a built-in role's GUID, or the custom role `role` setup
    defines for this group (its GUID derived from the group, so users need not look)."""
    guid = (
        role
        if role in (SECRETS_USER, SECRETS_OFFICER, BLOB_OWNER, RBAC_ADMIN)
        else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{place.group_path()}/{role}"))
    )
    return f"/subscriptions/{place.subscription}/providers/Microsoft.Authorization/roleDefinitions/{guid}"


def timer_app(place: Place) -> str:
    """The lease timer's function app (a host name under azurewebsites.net, unique to
    the subscription and group, so users need not look it up)."""
    return f"htgrid-annex-{uuid.uuid5(uuid.NAMESPACE_URL, place.group_path()).hex[:12]}"


def assign(arm: Arm, scope: str, role: str, principal: str, condition: str = "",
           *, kind: str | None = "ServicePrincipal") -> None:  # fmt: skip
    """Give `principal` the role `role` (an id from role_id) on `scope`, once: the
    assignment's name is derived from the three. `kind`: the principal's type, if
    known (a managed identity just made may not have reached Entra ID's replicas yet:
    ARM then takes its word for it)."""
    props: dict[str, Any] = {"roleDefinitionId": role, "principalId": principal}
    if kind is not None:
        props["principalType"] = kind
    if condition:
        props.update(condition=condition, conditionVersion="2.0")
    arm.put(assignment_path(scope, principal, role), AUTHORIZATION_API, {"properties": props})


def assignment_path(scope: str, principal: str, role: str) -> str:
    """The path `assign` gives this assignment: its name derived from the three."""
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"{scope.lower()}|{principal}|{role.lower()}")
    return f"{scope}/providers/Microsoft.Authorization/roleAssignments/{name}"


def vault_url(vault: str) -> str:
    """A vault's data-plane address: HTGRID_ANNEX_VAULT_URL (with `{vault}`; another
    cloud's DNS suffix, a private endpoint), else Azure's public one."""
    template = os.environ.get("HTGRID_ANNEX_VAULT_URL") or "https://{vault}.vault.azure.net"
    return template.replace("{vault}", vault).rstrip("/")


def _credential_token() -> Callable[[str], str]:
    """Tokens of the service principal in the environment (azure-identity)."""
    from azure.identity import ClientSecretCredential

    env = os.environ
    missing = [k for k in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET") if not env.get(k)]  # fmt: skip
    if missing:
        raise AnnexUsageError(f"--cloud azure needs {', '.join(missing)} (a service principal)")
    kwargs: dict[str, Any] = {}
    authority = env.get("AZURE_AUTHORITY_HOST")
    if authority:
        kwargs["authority"] = authority
        kwargs["disable_instance_discovery"] = "microsoftonline" not in authority
    if env.get("SSL_CERT_FILE"):
        kwargs["connection_verify"] = env["SSL_CERT_FILE"]
    credential = ClientSecretCredential(
        env["AZURE_TENANT_ID"], env["AZURE_CLIENT_ID"], env["AZURE_CLIENT_SECRET"], **kwargs
    )
    made: dict[str, tuple[str, float]] = {}

    def token(resource: str) -> str:
        held = made.get(resource)
        if held is None or held[1] < time.time() + 60:
            got = credential.get_token(f"{resource}/.default")
            made[resource] = held = (got.token, float(got.expires_on))
        return held[0]

    return token


class AzureAnnexes:
    """The annexes of one subscription's setup (resource group) in one location."""

    kind = "azure"

    def __init__(self, region: str, *, subscription: str | None = None, group: str = GROUP,
                 token: Callable[[str], str] | None = None, arm_url: str | None = None,
                 poll: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        subscription = subscription or os.environ.get("AZURE_SUBSCRIPTION_ID", "")
        if not subscription:
            raise AnnexUsageError("--cloud azure needs --subscription (or AZURE_SUBSCRIPTION_ID)")
        self.region = region
        self.scope = group
        self.clock = clock
        self.place = Place(
            subscription,
            group,
            ACCOUNT,
            "",
            arm_url
            or os.environ.get("AZURE_RESOURCE_MANAGER_URL")
            or "https://management.azure.com",
        )
        self._token = token
        self._poll = float(os.environ.get("HTGRID_ANNEX_POLL_ARM", poll))
        self._arm: Arm | None = None
        self._own = False  # a vault of the caller's own (else the setup's shared one)
        self._principal = ""
        self._shared = ""  # the setup's vault
        # Annexes found in the shared vault only (made before the caller had a vault).
        self._fallback: set[str] = set()

    @property
    def calls(self) -> int:
        return self._arm.calls if self._arm is not None else 0

    def arm(self, vault: str | None = None) -> Arm:
        """The ARM client (with the setup's vault once known)."""
        if self._arm is None:
            if self._token is None:
                self._token = _credential_token()
            token = self._token
            context = None
            if os.environ.get("SSL_CERT_FILE"):
                context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
            self._arm = Arm(self.place, token, context=context, poll=self._poll)
        if vault is not None and self.place.vault != vault:
            self.place.vault = vault
            self.place.vault_url = self._arm.vault_url = vault_url(vault)
        return self._arm

    def caller(self) -> str | None:
        """The object id of this client's principal (from its token), if it says."""
        self.arm()
        assert self._token is not None
        return token_principal(self._token(ARM_URL))

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ArmFailure as exc:
            raise AnnexCloudError(f"{what} in {self.region}: {exc}") from None
        except OSError as exc:
            raise AnnexCloudError(f"{what} in {self.region}: {exc}") from None

    # ---- the Cloud protocol -----------------------------------------------------------

    def check_setup(self) -> None:
        """The setup's Automation account, its runbook and vault (SetupMissing if not)."""

        def look() -> tuple[Any, Any, Any]:
            arm = self.arm()
            account = arm.get(self.place.automation(), AUTOMATION_API)
            runbook = arm.get(self.place.automation(f"/runbooks/{RUNBOOK}"), AUTOMATION_API)
            timer = arm.get(self.place.provider(f"Microsoft.Web/sites/{timer_app(self.place)}"), WEB_API)  # fmt: skip
            return account, runbook, timer

        account, runbook, timer = self.call("reading the annex setup", look)
        vault = ((account or {}).get("tags") or {}).get(VAULT_TAG)
        state = ((runbook or {}).get("properties") or {}).get("state")
        if not vault or state != "Published" or timer is None:
            raise SetupMissing(
                f"no annex lease runbook or timer in resource group {self.place.group}: the "
                "subscription's administrator runs `htgrid annex setup --cloud azure` once"
            )
        self._shared = str(vault)
        self.arm(self.call("finding your annex vault", self._own_vault) or vault)

    def _own_vault(self) -> str | None:
        """The vault setup made for the caller (its secrets readable by no other
        user), if any; else the setup's shared vault serves (an older setup)."""
        principal = self.caller()
        if principal is None:
            return None
        self._principal = principal
        name = user_vault(self.place, principal)
        found = self.arm().get(
            self.place.provider(f"Microsoft.KeyVault/vaults/{name}"), KEYVAULT_API
        )
        self._own = found is not None
        return name if self._own else None

    def _ready(self) -> Arm:
        if not self.place.vault:
            self.check_setup()
        return self.arm()

    def lease_of(self, name: str) -> float | None:
        ends = [end for _, a, end in self.call("listing leases", lambda: list(leases(self._ready()))) if a == name]  # fmt: skip
        return max(ends) if ends else None

    def start_lease(self, name: str, owner: str, expiration: float) -> None:
        """The schedule, then its job: from here on the annex ends by `expiration`."""
        if expiration - self.clock() < MIN_LEASE:
            raise AnnexUsageError(
                f"the lease ends in {max(0, int(expiration - self.clock()))} s: on Azure at "
                f"least {int(MIN_LEASE)} s (Automation schedules start 5 minutes ahead)"
            )
        arm = self._ready()
        event = json.dumps(lease_event(self.place, name, expiration), sort_keys=True)
        schedule = schedule_name(name, expiration)

        def install() -> None:
            arm.put(
                self.place.automation(f"/schedules/{schedule}"),
                AUTOMATION_API,
                {
                    "name": schedule,
                    "properties": {
                        "description": event,
                        "startTime": iso(expiration),
                        "frequency": "OneTime",
                        "timeZone": "UTC",
                    },
                },
            )
            job = uuid.uuid5(uuid.NAMESPACE_URL, f"{self.place.automation()}/{schedule}")
            arm.put(
                self.place.automation(f"/jobSchedules/{job}"),
                AUTOMATION_API,
                {
                    "properties": {
                        "schedule": {"name": schedule},
                        "runbook": {"name": RUNBOOK},
                        "parameters": {"event": event},
                    }
                },
            )

        self.call(f"installing annex {name}'s lease", install)

    def move_lease(self, name: str, expiration: float) -> None:
        """A schedule at the new end, the scale sets' tag, then the old schedules go
        (the runbook ignores an earlier schedule while a later one exists)."""
        self.start_lease(name, "", expiration)
        arm = self.arm()

        def retag() -> None:
            for annex, vmss in annex_sets(arm):
                if annex == name:
                    tags = {**(vmss.get("tags") or {}), LEASE_TAG: str(int(expiration))}
                    arm.patch(str(vmss["id"]), COMPUTE_API, {"tags": tags})
            # Removes the earlier schedules (leases are whole seconds, as the schedule's).
            enforce(arm, name, int(expiration), self.clock())

        self.call(f"extending annex {name}", retag)

    def put(self, name: str, what: str, value: str, *, secure: bool = False,
            expires: float | None = None) -> None:  # fmt: skip
        arm = self._ready()
        until = expires if secure and expires is not None else self.clock() + 10 * 365 * 86400

        def store() -> None:
            tags = {ANNEX_TAG: name} | ({USER_TAG: self._principal} if self._principal else {})
            try:
                arm.set_secret(secret_name(name, what), value, tags, until)
            except ArmFailure as exc:
                if exc.status != 403 or self._own:
                    raise
                raise SetupMissing(
                    f"{exc}: no Key Vault of your own in resource group {self.place.group}; "
                    "the administrator runs `htgrid annex setup --cloud azure "
                    f"--user-object-ids {self._principal or 'YOUR-OBJECT-ID'}`"
                ) from None

        self.call(f"storing annex {name}'s {what}", store)

    def _older(self) -> str:
        """The shared vault, if the caller has a vault of their own (else "")."""
        return self._shared if self._own and self._shared != self.place.vault else ""

    def get(self, name: str, what: str) -> str | None:
        """The annex's secret `what`: in the caller's vault, else (an annex made before
        they had one) in the shared vault, read only."""
        arm = self._ready()

        def read() -> str | None:
            found = arm.get_secret(secret_name(name, what))
            if found is None and self._older():
                found = shared_secret(arm, self._older(), name, what)
                if found is not None:
                    self._fallback.add(name)
            return found

        found = self.call(f"reading annex {name}'s {what}", read)
        return None if found is None else str(found)

    def _adopt(self, name: str, expiration: float) -> None:
        """An annex found in the shared vault gets its token and lease copied into the
        caller's own vault, where its new scale sets' identities may be given them."""
        if name not in self._fallback:
            return
        arm, shared = self.arm(), self._older()

        def copy(what: str) -> Callable[[], str | None]:
            def read() -> str | None:
                if arm.get_secret(secret_name(name, what)) is not None:
                    return None
                return shared_secret(arm, shared, name, what)

            return read

        for what in ("token", "lease"):
            value = self.call(f"reading annex {name}'s {what}", copy(what))
            if value is not None:
                self.put(name, what, value, secure=what == "token", expires=expiration)

    def boot_settings(self, name: str) -> dict[str, Any]:
        arm = self._ready()
        return {
            "cloud": "azure",
            "region": self.region,
            "vault_url": arm.vault_url,
            "token_secret": secret_name(name, "token"),
            "lease_secret": secret_name(name, "lease"),
            "arm_url": self.place.arm_url,
        }

    def request(self, spec: AnnexSpec, user_data: str, expiration: float) -> list[str]:
        """A scale set of `count` instances (or `slots` Spot instances): made empty with
        its identity, given its roles, then scaled up."""
        capacity = spec.count or spec.slots
        if not capacity:
            return []
        arm = self._ready()
        if spec.join:
            self._adopt(spec.name, expiration)
        name = f"{spec.name}-{uuid.uuid4().hex[:8]}"
        path = self.place.provider(f"Microsoft.Compute/virtualMachineScaleSets/{name}")
        body = scale_set(self.place, self.region, spec, user_data, expiration)

        def make() -> None:
            made = arm.put(path, COMPUTE_API, body)
            identity = (made or {}).get("identity") or {}
            if spec.join:
                if not identity.get("principalId"):
                    raise AnnexCloudError(f"scale set {name} got no managed identity")
                principal = str(identity["principalId"])
                assign(arm, path, role_id(self.place, NODE_ROLE), principal)
                for what in ("token", "lease"):
                    secret = f"{self.place.vault_path()}/secrets/{secret_name(spec.name, what)}"
                    assign(arm, secret, role_id(self.place, SECRETS_USER), principal)
            # A Spot set's target, kept by the lease timer against evictions, is set with
            # the capacity: not before the identity has its roles.
            tags = body["tags"] | ({CAPACITY_TAG: str(capacity)} if spec.slots else {})
            arm.patch(path, COMPUTE_API, {"sku": {"capacity": capacity}, "tags": tags})

        self.call(f"creating scale set {name}", make)
        return [name]

    def end(self, name: str) -> dict[str, Any]:
        """What the runbook does at the lease's end, now, with the user's rights."""
        arm = self._ready()
        done = self.call(
            f"shutting down annex {name}",
            lambda: enforce(arm, name, self.clock(), self.clock(), force=True),
        )
        notes = []
        if self._older():
            # An annex made before the caller had a vault: its secrets there too.
            more, left = self.call(
                f"ending annex {name}'s secrets in the shared vault",
                lambda: end_shared(arm, self._older(), name),
            )
            done["secrets"] = sorted([*done["secrets"], *more])
            if left or (left is None and name in self._fallback):
                notes.append(left_note(name, self._older()))
        return {**done, "terminated": done["deleted"], "cancelled": [], "notes": notes}

    def names(self) -> list[str]:
        arm = self._ready()
        return sorted({a for _, a, _ in self.call("listing leases", lambda: list(leases(arm)))})

    def describe(self, only: str | None = None) -> list[CloudAnnex]:
        """The annexes (or `only`): one listing of schedules, one of scale sets, one of
        each scale set's instances, and each annex's settings (for annexes not yet moved
        from the shared vault, one listing of it and a read of each there)."""
        arm = self._ready()

        def look() -> list[CloudAnnex]:
            ends: dict[str, float] = {}
            for _, annex, end in leases(arm):
                ends[annex] = max(end, ends.get(annex, end))
            if only is not None and only not in ends:
                raise AnnexNotFound(f"no annex {only!r} in {self.place.group}")
            names = [only] if only is not None else sorted(ends)
            sets: dict[str, list[Any]] = {}
            for annex, vmss in annex_sets(arm):
                if annex in names:
                    sets.setdefault(annex, []).append(vmss)
            texts = {n: arm.get_secret(secret_name(n, "config")) for n in names}
            missing = [n for n, text in texts.items() if text is None]
            if missing and self._older():
                # Annexes made before their user had a vault, not yet moved to it.
                older = shared_settings(arm, self._older(), missing)
                texts.update(older)
                self._fallback.update(older)
            out = []
            for name in names:
                try:
                    settings = json.loads(texts[name] or "{}")
                except ValueError:
                    settings = {}
                instances: list[Instance] = []
                states: list[tuple[str, str]] = []
                evicted = restored = 0
                for vmss in sets.get(name, []):
                    state = str((vmss.get("properties") or {}).get("provisioningState", "?"))
                    states.append((str(vmss["name"]), state))
                    listing = list(arm.listing(
                        f"{vmss['id']}/virtualMachines", COMPUTE_API, "&$expand=instanceView"
                    ))  # fmt: skip
                    size = str((vmss.get("sku") or {}).get("name", ""))
                    instances += [instance(vm, size) for vm in listing]
                    gone, again = evictions(vmss, len(listing))
                    evicted, restored = evicted + gone, restored + again
                out.append(
                    CloudAnnex(
                        name=name,
                        owner=str(settings.get("owner", "")),
                        lease_end=ends[name],
                        requested=int(settings.get("requested", 0)),
                        instances=tuple(instances),
                        fleets=tuple(states),
                        settings=settings,
                        evicted=evicted,
                        restored=restored,
                    )
                )
            return out

        result: list[CloudAnnex] = self.call("describing annexes", look)
        return result
