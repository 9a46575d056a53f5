"""The annex's lease on Azure: the Python 3 runbook `htgrid annex setup --cloud azure`
publishes in the setup's Automation account (this file alone, standard library only, so
it runs in Automation's sandbox as it runs in the tests).

Its one argument is a JSON event, the job schedule's parameter:

* an annex's own lease, a OneTime schedule at the lease's end (`htgrid-annex-NAME-END`,
  made by `htgrid annex create` BEFORE any instance is requested; `extend` makes a later
  one, then removes the earlier), whose description and job carry

      {"htgrid": "annex-lease", "AnnexName": "NAME", "LeaseExpiration": 1767225600,
       "Subscription": "...", "ResourceGroup": "htgrid-annex", "Account": "htgrid-annex",
       "Vault": "...", "ArmUrl": "https://management.azure.com"}

  If a later lease of the same annex exists (extended), it removes this stale schedule
  only. Otherwise it deletes the annex's scale sets (tagged `htgrid:AnnexName = NAME`;
  their instances, NICs and disks go with them, after the role assignments of their
  managed identity), purges its Key Vault secrets (`htgrid-annex-NAME-*`: the token), and, last,
  its schedules and job schedules: should a step fail, the next run tries again.

* the sweeper (an hourly schedule setup makes): {"htgrid": "annex-sweep", ...}. It
  enforces every lease schedule whose time has passed (a lost job), ends what no lease
  rules (scale sets and secrets of annexes without a schedule: a `create` killed before
  its schedule), and deletes the annexes' VMs that shut themselves down (idle) without
  deleting themselves (cut off from ARM): Azure keeps a VM stopped from inside
  allocated, and bills it, until then.

The job reaches ARM and Key Vault with the Automation account's managed identity
(IDENTITY_ENDPOINT, IDENTITY_HEADER). Nothing is kept between runs.
"""

from __future__ import annotations

import copy
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "ANNEX_TAG",
    "AUTHORIZATION_API",
    "CAPACITY_TAG",
    "LEASE_TAG",
    "RESTORED_TAG",
    "SCHEDULE_PREFIX",
    "USER_TAG",
    "Arm",
    "ArmFailure",
    "Place",
    "end_scale_set",
    "end_stopped",
    "enforce",
    "follow_moved",
    "handler",
    "lease_event",
    "role_assignments",
    "scale_sets",
    "schedule_name",
    "secret_name",
    "sweep",
    "tag_count",
    "tend",
]

#: Every lease schedule's name starts so; then the annex's name and its lease's end.
SCHEDULE_PREFIX = "htgrid-annex-"
#: The schedule of the sweeper (an underscore: no annex's schedule is named so).
SWEEPER_SCHEDULE = "htgrid-annex_sweeper"
#: The tag naming the annex, on its scale sets and secrets.
ANNEX_TAG = "htgrid:AnnexName"
#: The tag holding the lease's end (seconds since 1970) on its scale sets.
LEASE_TAG = "htgrid:LeaseExpiration"
#: On a Spot scale set: the instances it is to have while its lease lives (the lease
#: timer asks again for what Azure evicts; lowered as VMs stop themselves).
CAPACITY_TAG = "htgrid:Capacity"
#: On a Spot scale set: how many evicted instances the lease timer has asked for again
#: (the set's count of evictions restored: an evicted VM is gone, nothing else tells).
RESTORED_TAG = "htgrid:Restored"
#: On a user's own vault (setup makes one for each user named): the user's object id.
USER_TAG = "htgrid:AnnexUser"
ARM_URL = "https://management.azure.com"
VAULT_RESOURCE = "https://vault.azure.net"
COMPUTE_API = "2024-07-01"
AUTOMATION_API = "2023-11-01"
KEYVAULT_API = "2023-07-01"
AUTHORIZATION_API = "2022-04-01"
VAULT_DATA_API = "7.4"
_TERMINAL = frozenset({"succeeded", "failed", "canceled"})

Token = Callable[[str], str]  # resource (audience) -> bearer token


class ArmFailure(Exception):
    """ARM or Key Vault refused a call: its HTTP status, error code and message."""

    def __init__(self, what: str, status: int, code: str, message: str) -> None:
        super().__init__(f"{what}: {code} (HTTP {status}): {message}")
        self.status = status
        self.code = code


class Place:
    """Where the setup put the annex's machinery: subscription, group, account, vault."""

    def __init__(self, subscription: str, group: str, account: str, vault: str,
                 arm_url: str = ARM_URL, vault_url: str = "") -> None:  # fmt: skip
        self.subscription = subscription
        self.group = group
        self.account = account
        self.vault = vault
        self.arm_url = arm_url.rstrip("/")
        # The vault's data plane (another cloud's DNS suffix): default the public one.
        self.vault_url = vault_url.rstrip("/")

    @classmethod
    def of(cls, event: dict[str, Any]) -> Place:
        return cls(
            str(event["Subscription"]),
            str(event["ResourceGroup"]),
            str(event["Account"]),
            str(event["Vault"]),
            str(event.get("ArmUrl") or ARM_URL),
            str(event.get("VaultUrl") or ""),
        )

    def event(self) -> dict[str, str]:
        return {
            "Subscription": self.subscription,
            "ResourceGroup": self.group,
            "Account": self.account,
            "Vault": self.vault,
            "ArmUrl": self.arm_url,
            "VaultUrl": self.vault_url,
        }

    def group_path(self) -> str:
        return f"/subscriptions/{self.subscription}/resourceGroups/{self.group}"

    def provider(self, path: str) -> str:
        return f"{self.group_path()}/providers/{path}"

    def automation(self, path: str = "") -> str:
        return self.provider(f"Microsoft.Automation/automationAccounts/{self.account}{path}")

    def vault_path(self) -> str:
        return self.provider(f"Microsoft.KeyVault/vaults/{self.vault}")


class Arm:
    """ARM's REST API and one vault's data plane, over urllib: long-running operations
    followed to their end (Azure-AsyncOperation, else Location), pages followed."""

    def __init__(self, place: Place, token: Token, *, vault_url: str | None = None,
                 context: ssl.SSLContext | None = None, poll: float = 1.0) -> None:  # fmt: skip
        self.place = place
        self.token = token
        default = place.vault_url or f"https://{place.vault}.vault.azure.net"
        self.vault_url = (vault_url or default).rstrip("/")
        self.context = context
        self.poll = poll
        self.calls = 0

    def request(self, method: str, url: str, body: Any = None, *, resource: str = ARM_URL,
                ok: tuple[int, ...] = (), text: str | None = None,
                ) -> tuple[int, dict[str, str], Any]:  # fmt: skip
        """One call (a JSON `body`, or a `text`); (status, headers, JSON). ArmFailure
        for an error status not in `ok`."""
        if url.startswith("/"):
            url = self.place.arm_url + url
        data = None if body is None else json.dumps(body).encode()
        if text is not None:
            data = text.encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token(resource)}")
        if data is not None:
            kind = "application/json" if text is None else "text/powershell"
            request.add_header("Content-Type", kind)
        self.calls += 1
        try:
            with urllib.request.urlopen(request, timeout=60, context=self.context) as answer:
                status, headers, raw = answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as err:
            status, headers, raw = err.code, dict(err.headers or {}), err.read()
            if status not in ok:
                try:
                    error = json.loads(raw).get("error") or {}
                except ValueError:
                    error = {}
                raise ArmFailure(
                    f"{method} {urllib.parse.urlsplit(url).path}",
                    status,
                    str(error.get("code") or "HttpError"),
                    str(error.get("message") or raw[:200].decode(errors="replace")),
                ) from None
        return status, headers, json.loads(raw) if raw else None

    def follow(self, what: str, headers: dict[str, str]) -> None:
        """Follow a long-running operation to its end; ArmFailure if it failed."""
        lowered = {k.lower(): v for k, v in headers.items()}
        status_url = lowered.get("azure-asyncoperation")
        location = lowered.get("location")
        while status_url or location:
            if status_url:
                _, _, body = self.request("GET", status_url)
                state = str((body or {}).get("status", "")).lower()
                if state in _TERMINAL:
                    if state != "succeeded":
                        error = (body or {}).get("error") or {}
                        raise ArmFailure(what, 200, str(error.get("code", state)),
                                         str(error.get("message", "")))  # fmt: skip
                    return
            else:
                assert location is not None
                status, answer, _ = self.request("GET", location)
                if status != 202:
                    return
                location = {k.lower(): v for k, v in answer.items()}.get("location", location)
            time.sleep(self.poll)

    def get(self, path: str, api: str) -> Any:
        """The resource, or None if ARM has none there."""
        status, _, body = self.request("GET", f"{path}?api-version={api}", ok=(404,))
        return None if status == 404 else body

    def put(self, path: str, api: str, body: Any) -> Any:
        _, headers, answer = self.request("PUT", f"{path}?api-version={api}", body)
        self.follow(f"PUT {path}", headers)
        return answer

    def patch(self, path: str, api: str, body: Any) -> Any:
        _, headers, answer = self.request("PATCH", f"{path}?api-version={api}", body)
        self.follow(f"PATCH {path}", headers)
        return answer

    def post(self, path: str, api: str, body: Any = None) -> Any:
        _, headers, answer = self.request("POST", f"{path}?api-version={api}", body)
        self.follow(f"POST {path}", headers)
        return answer

    def delete(self, path: str, api: str) -> None:
        """Delete and wait; a resource not there is no error."""
        status, headers, _ = self.request("DELETE", f"{path}?api-version={api}", ok=(404,))
        if status != 404:
            self.follow(f"DELETE {path}", headers)

    def pages(self, url: str, *, resource: str = ARM_URL) -> Iterator[Any]:
        """Every item of a listing, following nextLink."""
        next_url: str | None = url
        while next_url:
            status, _, body = self.request("GET", next_url, resource=resource, ok=(404,))
            if status == 404:
                return
            yield from (body or {}).get("value", [])
            next_url = (body or {}).get("nextLink")

    def listing(self, path: str, api: str, extra: str = "") -> Iterator[Any]:
        return self.pages(f"{path}?api-version={api}{extra}")

    # ---- the vault's data plane ------------------------------------------------------

    def on_vault(self, name: str) -> Arm:
        """This client on another vault of the setup (its address this one's, the
        vault's name changed: the same cloud, the same kind of endpoint)."""
        other = copy.copy(self)
        other.vault_url = self.vault_url.replace(self.place.vault, name, 1)
        return other

    def vaults(self) -> list[Arm]:
        """This client on each vault an annex's secrets may be in: its own (the setup's,
        or the lease's user's) and every user's own vault (tagged USER_TAG; the runbook
        and the timer may read them all, a user only their own)."""
        path = self.place.provider("Microsoft.KeyVault/vaults")
        names = {
            str(v["name"])
            for v in self.listing(path, KEYVAULT_API)
            if (v.get("tags") or {}).get(USER_TAG) and str(v.get("name")) != self.place.vault
        }
        return [self, *(self.on_vault(name) for name in sorted(names))]

    def _secret_url(self, name: str, deleted: bool = False) -> str:
        kind = "deletedsecrets" if deleted else "secrets"
        return f"{self.vault_url}/{kind}/{name}?api-version={VAULT_DATA_API}"

    def set_secret(self, name: str, value: str, tags: dict[str, str], expires: float) -> None:
        body = {"value": value, "tags": tags, "attributes": {"enabled": True, "exp": int(expires)}}
        self.request("PUT", self._secret_url(name), body, resource=VAULT_RESOURCE)

    def get_secret(self, name: str) -> str | None:
        status, _, body = self.request(
            "GET", self._secret_url(name), resource=VAULT_RESOURCE, ok=(404,)
        )
        return None if status == 404 else str(body["value"])

    def secrets(self) -> Iterator[tuple[str, dict[str, str]]]:
        """(name, tags) of every secret of the vault."""
        for name, tags, _ in self.secret_items():
            yield name, tags

    def secret_items(self) -> Iterator[tuple[str, dict[str, str], float | None]]:
        """(name, tags, expiry if any) of every secret of the vault."""
        url = f"{self.vault_url}/secrets?api-version={VAULT_DATA_API}&maxresults=25"
        for item in self.pages(url, resource=VAULT_RESOURCE):
            exp = (item.get("attributes") or {}).get("exp")
            name = str(item["id"]).rstrip("/").rsplit("/", 1)[1]
            yield name, dict(item.get("tags") or {}), float(exp) if exp is not None else None

    def delete_secret(self, name: str) -> None:
        """Delete, then purge (the vault keeps a deleted secret otherwise)."""
        status, _, _ = self.request(
            "DELETE", self._secret_url(name), resource=VAULT_RESOURCE, ok=(404,)
        )
        if status != 404:
            self.request(
                "DELETE", self._secret_url(name, deleted=True), resource=VAULT_RESOURCE, ok=(404,)
            )


def schedule_name(annex: str, expiration: float) -> str:
    """The OneTime schedule ending `annex` at `expiration`."""
    return f"{SCHEDULE_PREFIX}{annex}-{int(expiration)}"


def secret_name(annex: str, what: str) -> str:
    """The Key Vault secret `what` (token, lease, config) of `annex`."""
    return f"{SCHEDULE_PREFIX}{annex}-{what}"


def lease_event(place: Place, annex: str, expiration: float) -> dict[str, Any]:
    """The event of `annex`'s lease schedule (its description and its job's parameter)."""
    return {
        "htgrid": "annex-lease",
        "AnnexName": annex,
        "LeaseExpiration": int(expiration),
        **place.event(),
    }


def leases(arm: Arm) -> Iterator[tuple[str, str, float]]:
    """(schedule name, annex, lease end) of every lease schedule of the account."""
    for schedule in arm.listing(arm.place.automation("/schedules"), AUTOMATION_API):
        name = str(schedule.get("name", ""))
        if not name.startswith(SCHEDULE_PREFIX):
            continue
        try:
            doc = json.loads(schedule.get("properties", {}).get("description") or "")
            yield name, str(doc["AnnexName"]), float(doc["LeaseExpiration"])
        except (ValueError, KeyError, TypeError):
            continue


def scale_sets(arm: Arm) -> Iterator[tuple[str, Any]]:
    """(annex, scale set) of every scale set of an annex in the group."""
    path = arm.place.provider("Microsoft.Compute/virtualMachineScaleSets")
    for vmss in arm.listing(path, COMPUTE_API):
        annex = (vmss.get("tags") or {}).get(ANNEX_TAG)
        if annex:
            yield str(annex), vmss


def role_assignments(arm: Arm, principal: str) -> list[Any]:
    """Every role assignment of `principal` in the group (at, above or below it)."""
    where = urllib.parse.quote(f"principalId eq '{principal}'")
    path = arm.place.provider("Microsoft.Authorization/roleAssignments")
    return list(arm.listing(path, AUTHORIZATION_API, f"&$filter={where}"))


def end_scale_set(arm: Arm, vmss: Any) -> str:
    """Its identity's role assignments first (its own instances, its annex's secrets),
    then the set and its VMs."""
    principal = (vmss.get("identity") or {}).get("principalId")
    if principal:
        for assignment in role_assignments(arm, str(principal)):
            arm.delete(str(assignment["id"]), AUTHORIZATION_API)
    arm.delete(str(vmss["id"]), COMPUTE_API)
    return str(vmss["name"])


def _end_secrets(arm: Arm, annexes: set[str] | None, found: list[tuple[str, dict[str, str]]]) -> list[str]:  # fmt: skip
    ended = []
    for name, tags in found:
        annex = tags.get(ANNEX_TAG)
        if annex and (annexes is None or annex in annexes):
            arm.delete_secret(name)
            ended.append(name)
    return ended


def _end_schedules(arm: Arm, names: set[str]) -> None:
    """The job schedules of these schedules, then the schedules."""
    path = arm.place.automation("/jobSchedules")
    for job in arm.listing(path, AUTOMATION_API):
        props = job.get("properties") or {}
        if (props.get("schedule") or {}).get("name") in names:
            arm.delete(f"{path}/{props['jobScheduleId']}", AUTOMATION_API)
    for name in sorted(names):
        arm.delete(arm.place.automation(f"/schedules/{name}"), AUTOMATION_API)


def _stop_spending(arm: Arm, annexes: set[str] | None, ruled: set[str]) -> dict[str, Any]:
    """End the scale sets and secrets of `annexes` (None: of every annex not in `ruled`)."""
    sets = [
        end_scale_set(arm, vmss)
        for annex, vmss in scale_sets(arm)
        if (annex in annexes if annexes is not None else annex not in ruled)
    ]
    ended = []
    for vault in arm.vaults():
        wanted = annexes
        try:
            found = list(vault.secrets())
        except ArmFailure as exc:
            # Another user's vault, to a user ending their own annex: not theirs to read.
            if exc.status != 403 or vault is arm:
                raise
            continue
        if wanted is None:
            wanted = {t.get(ANNEX_TAG, "") for _, t in found} - ruled - {""}
        ended += _end_secrets(vault, wanted, found)
    return {"deleted": sets, "secrets": sorted(ended)}


def enforce(arm: Arm, annex: str, expiration: float, now: float, *, force: bool = False) -> dict[str, Any]:  # fmt: skip
    """End `annex` if its lease (the latest of its schedules) has passed, or `force`."""
    mine = {name: end for name, a, end in leases(arm) if a == annex}
    current = now if force else max([expiration, *mine.values()])
    if now < current:
        stale = {name for name, end in mine.items() if end < current}
        if stale:  # an extend killed before it removed the earlier schedule
            _end_schedules(arm, stale)
        return {"annex": annex, "expired": False, "remaining": int(current - now)}
    done: dict[str, Any] = {"annex": annex, "expired": True}
    done.update(_stop_spending(arm, {annex}, set()))
    _end_schedules(arm, set(mine))
    return done


def sweep(arm: Arm, now: float) -> dict[str, Any]:
    """Enforce every lease, and end what no lease rules."""
    ended: list[dict[str, Any]] = []
    ruled: set[str] = set()
    latest: dict[str, float] = {}
    for _, annex, end in leases(arm):
        latest[annex] = max(end, latest.get(annex, end))
    for annex, end in sorted(latest.items()):
        result = enforce(arm, annex, end, now)
        (ended.append(result) if result["expired"] else ruled.add(annex))
    stray = _stop_spending(arm, None, ruled)
    stray["stopped"] = end_stopped(arm)
    return {
        "ended": ended,
        "unruled": sorted(set(stray["deleted"]) | set(stray["secrets"])),
        **stray,
    }


def follow_moved(arm: Arm, live: set[str]) -> list[str]:
    """Annexes made before their user had a vault of their own keep their nodes reading
    the shared vault (`arm`'s), though `extend` now writes the user's vault (setup copied
    them there): a live annex's token there whose copy in a user's vault expires later
    (the token expires with the lease) has that copy's token and lease written here. The
    annexes so followed. (The user's vaults are read only while the shared vault holds
    a live annex's token: an older setup's annexes, until their leases end.)"""
    token = "-token"
    here = {
        name: exp
        for name, tags, exp in arm.secret_items()
        if name.endswith(token) and tags.get(ANNEX_TAG) in live
    }
    if not here:
        return []
    followed = []
    for vault in arm.vaults()[1:]:
        theirs = {name: (tags, exp) for name, tags, exp in vault.secret_items()}
        for name, exp in sorted(here.items()):
            tags, later = theirs.get(name, ({}, None))
            if later is None or (exp is not None and later <= exp):
                continue
            for what in (name, name[: -len(token)] + "-lease"):
                value = vault.get_secret(what)
                held = theirs.get(what, ({}, None))
                if value is not None:
                    arm.set_secret(what, value, dict(held[0]), held[1] or later)
            followed.append(str(tags.get(ANNEX_TAG, name)))
            here[name] = later
    return followed


def end_stopped(arm: Arm) -> list[str]:
    """Delete the annexes' VMs that shut themselves down (idle, or their lease seen
    ended): Azure keeps a VM stopped from inside allocated, and bills it."""
    return [name for _, vmss in scale_sets(arm) for name in tend(arm, vmss)[0]]


def tend(arm: Arm, vmss: Any, *, restore: bool = False) -> tuple[list[str], int]:
    """One scale set's VMs: delete those that shut themselves down (a Spot set's target
    lowered by as many: they chose to go); with `restore`, give a Spot set back the
    capacity Azure evicted (policy Delete: the VM is gone, the set one smaller).
    (the VMs deleted, the instances asked for again)"""
    listing = list(arm.listing(f"{vmss['id']}/virtualMachines", COMPUTE_API, "&$expand=instanceView"))  # fmt: skip
    stopped = [vm for vm in listing if "PowerState/stopped" in _codes(vm)]
    if stopped:
        ids = [str(vm["instanceId"]) for vm in stopped]
        arm.post(f"{vmss['id']}/delete", COMPUTE_API, {"instanceIds": ids})
    tags = dict(vmss.get("tags") or {})
    try:
        target = int(tags[CAPACITY_TAG]) - len(stopped)
    except (KeyError, ValueError):
        return [str(vm["name"]) for vm in stopped], 0
    missing = target - (len(listing) - len(stopped)) if restore else 0
    tags[CAPACITY_TAG] = str(max(target, 0))
    if missing > 0:
        tags[RESTORED_TAG] = str(tag_count(tags, RESTORED_TAG) + missing)
        arm.patch(str(vmss["id"]), COMPUTE_API, {"sku": {"capacity": target}, "tags": tags})
    elif stopped:
        arm.patch(str(vmss["id"]), COMPUTE_API, {"tags": tags})
    return [str(vm["name"]) for vm in stopped], max(missing, 0)


def tag_count(tags: dict[str, Any], name: str) -> int:
    """A count kept in a tag (0 if absent or unreadable)."""
    try:
        return max(int(tags.get(name) or 0), 0)
    except ValueError:
        return 0


def _codes(vm: Any) -> list[Any]:
    statuses = ((vm.get("properties") or {}).get("instanceView") or {}).get("statuses") or []
    return [s.get("code") for s in statuses]


def handler(event: dict[str, Any], arm: Arm, now: float) -> dict[str, Any]:
    """What one job does with its event."""
    kind = event.get("htgrid")
    if kind == "annex-lease":
        name, expiration = event.get("AnnexName"), event.get("LeaseExpiration")
        if not isinstance(name, str) or not isinstance(expiration, int | float):
            return {"error": "an annex-lease event needs AnnexName and LeaseExpiration"}
        return enforce(arm, name, float(expiration), now)
    if kind == "annex-sweep":
        return sweep(arm, now)
    return {"error": f"not an htgrid annex event: {str(kind)[:80]!r}"}


def identity_token(resource: str) -> str:
    """A token of the Automation account's managed identity."""
    query = urllib.parse.urlencode({"resource": resource, "api-version": "2019-08-01"})
    request = urllib.request.Request(f"{os.environ['IDENTITY_ENDPOINT']}?{query}")
    request.add_header("X-IDENTITY-HEADER", os.environ["IDENTITY_HEADER"])
    request.add_header("Metadata", "true")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.loads(answer.read())["access_token"])


def main(argv: list[str]) -> int:
    """Automation's entry: the event is the job's one parameter."""
    event = json.loads(argv[1]) if len(argv) > 1 else {}
    tokens: dict[str, str] = {}

    def token(resource: str) -> str:
        if resource not in tokens:
            tokens[resource] = identity_token(resource + "/")
        return tokens[resource]

    arm = Arm(Place.of(event), token)
    print(json.dumps(handler(event, arm, time.time()), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
