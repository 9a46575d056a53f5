"""A small, strict Azure Resource Manager on 127.0.0.1 over TLS, for the real Azure SDK.

No Azure compute emulator exists, so the Azure GAHP is tested through azure-identity and
the azure-mgmt-* clients against this server. It implements what those clients rely on
and nothing more; any other request gets a 400 `UnsupportedByFakeArm` naming it, so a test
shows exactly what the GAHP sends.

* Azure AD: `GET /{tenant}/v2.0/.well-known/openid-configuration` and the client
  credentials grant `POST /{tenant}/oauth2/v2.0/token` (client id and secret checked).
* ARM, every call: a bearer token this server issued, the subscription, `api-version`.
* Resource groups: PUT, GET, HEAD, list (`$top`), DELETE (202 + Location polling, cascade).
* Resources (see _arm_types): PUT, GET (`$expand=instanceView` for VMs), PATCH (scale sets),
  DELETE, list by resource group (VMs also by subscription), paged with `nextLink`.
  Compute and network PUT/DELETE are long-running: 201/202 with `Azure-AsyncOperation`
  (and `Location` on DELETE) answered `InProgress` `op_polls` times, then `Succeeded`;
  one nobody polls finishes by itself after 2 s, as Azure's do.
* Scale set actions: POST start, deallocate, restart. Key Vault: vaults, secrets (ARM
  never returns their values), `accessPolicies/{add,replace,remove}`.
* Azure RBAC (_arm_rbac): role definitions and assignments at any scope; managed
  identities may do only what theirs grant.
* Faults: `fault()` makes matching requests fail with a status and code (with
  `Retry-After: 0`), `fail_operation()` makes the next matching long-running operation end
  `Failed`. `log` records every request.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from . import _arm_annex as annex
from . import _arm_web as web
from ._arm_aad import AzureAd
from ._arm_ops import Operations
from ._arm_types import (
    ASYNC_TYPES,
    LISTABLE,
    VAULT,
    VM,
    VMSS,
    ArmError,
    Res,
    Store,
    dig,
    key,
    need,
)
from ._tls import make_test_ca

SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
TENANT = "72f988bf-0000-0000-0000-000000000001"
CLIENT_ID = "c1a2b3c4-0000-0000-0000-00000000c11e"
CLIENT_SECRET = "s3cr3t-for-tests"

Reply = tuple[int, dict[str, str], Any]


@dataclass(frozen=True)
class Logged:
    """One request as it arrived."""

    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    code: str
    message: str
    times: int


class ArmServer(annex.AnnexArm):
    """The fake ARM and Azure AD; `start()` it, point the SDK at `url` trusting `ca_file`."""

    def __init__(
        self,
        directory: Path,
        *,
        subscription: str = SUBSCRIPTION,
        tenant: str = TENANT,
        client_id: str = CLIENT_ID,
        client_secret: str = CLIENT_SECRET,
        page_size: int = 50,
        op_polls: int = 1,
    ) -> None:
        self.subscription = subscription
        self.page_size = page_size
        self.aad = AzureAd(tenant, client_id, client_secret)
        self.ops = Operations(op_polls)
        self.store = Store(subscription)
        self.store.tenant = tenant
        self.store.on_remove[annex.SCHEDULE] = annex.remove_schedule
        self._raw = b""
        self.rbac: dict[str, list[str]] = {}
        self.conditions: dict[str, str] = {}
        self.log: list[Logged] = []
        self.ca_file, self._cert, self._key = make_test_ca(directory)
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ---- life ---------------------------------------------------------------------------------

    def start(self) -> ArmServer:
        http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        http.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._cert, self._key)
        http.socket = context.wrap_socket(http.socket, server_side=True)
        http.arm = self  # type: ignore[attr-defined]
        self._http = http
        self.url = f"https://127.0.0.1:{http.server_address[1]}"
        self._thread = threading.Thread(target=http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(10)

    # ---- test controls ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every resource (a new, empty subscription); tokens stay valid."""
        with self._lock:
            tenant, hooks = self.store.tenant, self.store.on_remove
            self.store = Store(self.subscription)
            self.store.tenant, self.store.on_remove = tenant, hooks
            self.log.clear()
            self.rbac.clear()
            self.conditions.clear()

    def fault(
        self,
        method: str,
        pattern: str,
        status: int,
        code: str,
        message: str = "",
        times: int = 1,
    ) -> None:
        """Fail the next `times` requests whose path matches `pattern` (re.search, no case)."""
        with self._lock:
            self._faults.append(
                _Fault(method, re.compile(pattern, re.I), status, code, message or code, times)
            )

    def fail_operation(self, pattern: str, code: str, message: str) -> None:
        """End the next long-running operation started by a matching request `Failed`."""
        with self._lock:
            self.ops.fail_next(pattern, code, message)

    def requests(self, method: str | None = None, pattern: str = "") -> list[Logged]:
        """Logged requests with this method whose path matches `pattern`."""
        regex = re.compile(pattern, re.I)
        with self._lock:
            return [
                entry
                for entry in self.log
                if (method is None or entry.method == method) and regex.search(entry.path)
            ]

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def group_id(self, group: str) -> str:
        return f"/subscriptions/{self.subscription}/resourceGroups/{group}"

    def resource(self, group: str, provider_path: str) -> Res | None:
        """A stored resource by `Namespace/type/name` under a resource group."""
        with self._lock:
            return self.store.get(f"{self.group_id(group)}/providers/{provider_path}")

    def seed_vms(self, group: str, names: list[str], power: str = "running") -> None:
        """Put ready VMs straight into the store (fast set-up for listing tests)."""
        with self._lock:
            self._ensure_group(group, "eastus")
            for name in names:
                rid = f"{self.group_id(group)}/providers/Microsoft.Compute/virtualMachines/{name}"
                body = {
                    "id": rid,
                    "name": name,
                    "type": "Microsoft.Compute/virtualMachines",
                    "location": "eastus",
                    "tags": {"htgrid-owner": name},
                    "properties": {"vmId": str(uuid.uuid4()), "provisioningState": "Succeeded"},
                }
                self.store.resources[key(rid)] = Res(rid, VM, group.lower(), body, power)

    def add_group(self, group: str, location: str = "eastus") -> None:
        """Make a resource group directly (someone else's, as far as the GAHP knows)."""
        with self._lock:
            self._ensure_group(group, location)

    def add_resource(self, resource_id: str, body: dict[str, Any]) -> Res:
        """PUT a resource directly, checked as an ARM PUT would be, already Succeeded."""
        parts = resource_id.strip("/").split("/")
        rtype = "/".join([parts[5], *parts[6::2]]).lower()
        with self._lock:
            res = self.store.prepare(rtype, resource_id, body, None)
            res.body.update({"id": resource_id, "name": parts[-1], "type": _type_name(resource_id)})
            res.body.setdefault("properties", {})["provisioningState"] = "Succeeded"
            self.store.resources[key(resource_id)] = res
            return res

    def _ensure_group(self, group: str, location: str) -> None:
        self.store.groups.setdefault(
            group.lower(),
            {
                "id": self.group_id(group),
                "name": group,
                "type": "Microsoft.Resources/resourceGroups",
                "location": location,
                "properties": {"provisioningState": "Succeeded"},
            },
        )

    # ---- dispatch -----------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Reply:
        split = urlsplit(target)
        path = unquote(split.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                try:
                    body = dict(parse_qsl(raw.decode(), keep_blank_values=True))
                except UnicodeDecodeError:
                    body = None  # a zip (Kudu's deployment): self._raw has it
        with self._lock:
            self._raw = raw
            self.log.append(Logged(method, path, query, body))
            self.ops.settle()
            try:
                return self._route(method, path, query, headers, body)
            except ArmError as err:
                return err.status, {}, {"error": {"code": err.code, "message": err.message}}

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: Any
    ) -> Reply:
        parts = path.strip("/").split("/")
        lowered = [part.lower() for part in parts]
        if len(parts) == 4 and lowered[1:] == ["v2.0", ".well-known", "openid-configuration"]:
            return self.aad.openid(self.url, parts[0])
        if len(parts) == 4 and lowered[1:] == ["oauth2", "v2.0", "token"] and method == "POST":
            return self.aad.token(parts[0], body)
        if lowered[0] == "vault" and len(parts) >= 3:
            return self._data_plane(method, parts, query, headers, body)
        if lowered[0] == "scm" and lowered[2:] == ["api", "zipdeploy"] and method == "POST":
            return self._zip_deploy(parts[1], headers)
        if lowered[0] != "subscriptions" or len(parts) < 3:
            raise _unsupported(method, path)
        self._check_call(parts[1], query, headers)
        caller = self._authorize(method, parts, headers, body)
        self._inject_fault(method, path)
        on_rbac = annex.rbac.split(parts)
        if on_rbac is not None:
            return annex.rbac.handle(self.store, method, *on_rbac, query, body, caller)
        if lowered[2] == "operationresults" and len(parts) == 4:
            return self.ops.result(parts[3], f"{self.url}{path}?api-version={query['api-version']}")
        if lowered[2] == "providers":
            if len(parts) == 8 and lowered[4] == "locations" and lowered[6] == "operations":
                return self.ops.status(parts[7])
            if len(parts) == 8 and lowered[4] == "locations" and lowered[6] == "operationresults":
                return self.ops.result(
                    parts[7], f"{self.url}{path}?api-version={query['api-version']}"
                )
            if len(parts) == 5 and method == "GET" and f"{lowered[3]}/{lowered[4]}" == VM:
                return self._list(path, query, self.store.of_type(VM))
            raise _unsupported(method, path)
        if lowered[2] != "resourcegroups":
            raise _unsupported(method, path)
        if len(parts) == 3 and method == "GET":
            groups = [dict(g) for g in self.store.groups.values()]
            top = int(query.get("$top", "0") or 0)
            return self._page(path, query, groups[:top] if top else groups)
        if len(parts) == 4:
            return self._group(method, parts[3], body, query)
        if len(parts) >= 7 and lowered[4] == "providers":
            return self._resource(method, parts, query, body)
        raise _unsupported(method, path)

    def _zip_deploy(self, app: str, headers: dict[str, str]) -> Reply:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        principal = self.aad.principal(auth[7:]) if auth.startswith("Bearer ") else None
        allowed = self.rbac.get(principal or "")
        managed = principal in self.aad.managed
        return web.zip_deploy(self.store, app, principal, allowed, managed, self._raw)

    def _check_call(
        self, subscription: str, query: dict[str, str], headers: dict[str, str]
    ) -> None:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        if not self.aad.valid(token):
            raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}(-preview)?", query.get("api-version", "")):
            raise ArmError(
                400, "MissingApiVersionParameter", "The api-version query parameter is required."
            )
        if subscription.lower() != self.subscription.lower():
            raise ArmError(
                404,
                "SubscriptionNotFound",
                f"The subscription '{subscription}' could not be found.",
            )

    def _inject_fault(self, method: str, path: str) -> None:
        for fault in self._faults:
            if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                fault.times -= 1
                raise ArmError(fault.status, fault.code, fault.message)

    def _ops_base(self, namespace: str, location: str) -> str:
        return f"{self.url}/subscriptions/{self.subscription}/providers/{namespace}/locations/{location}"

    def _location_op(
        self, namespace: str, location: str, path: str, done: Callable[[], None]
    ) -> tuple[str, dict[str, str]]:
        return self.ops.start(self._ops_base(namespace, location), path, done)

    # ---- resource groups ----------------------------------------------------------------------

    def _group(self, method: str, name: str, body: Any, query: dict[str, str]) -> Reply:
        existing = self.store.groups.get(name.lower())
        if method in ("GET", "HEAD"):
            if existing is None:
                if method == "HEAD":
                    return 404, {}, None
                raise ArmError(
                    404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found."
                )
            return (
                (204 if method == "HEAD" else 200),
                {},
                (None if method == "HEAD" else dict(existing)),
            )
        if method == "PUT":
            need(
                isinstance(body, dict) and isinstance(body.get("location"), str),
                "a resource group needs a location",
            )
            group = {
                "id": self.group_id(name),
                "name": name,
                "type": "Microsoft.Resources/resourceGroups",
                "location": body["location"],
                "tags": body.get("tags") or {},
                "properties": {"provisioningState": "Succeeded"},
            }
            self.store.groups[name.lower()] = group
            return (200 if existing else 201), {}, dict(group)
        if method == "DELETE":
            if existing is None:
                raise ArmError(
                    404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found."
                )
            existing["properties"]["provisioningState"] = "Deleting"
            op_id, _ = self._location_op(
                "Microsoft.Resources",
                "global",
                f"/resourcegroups/{name}",
                lambda: self.store.remove_group(name),
            )
            location = f"{self.url}/subscriptions/{self.subscription}/operationresults/{op_id}?api-version={query['api-version']}"
            return 202, {"Location": location, "Retry-After": "0"}, None
        raise _unsupported(method, f"resource group {name}")

    # ---- resources ----------------------------------------------------------------------------

    def _resource(self, method: str, parts: list[str], query: dict[str, str], body: Any) -> Reply:
        group, namespace, rest = parts[3], parts[5], parts[6:]
        if group.lower() not in self.store.groups:
            raise ArmError(
                404, "ResourceGroupNotFound", f"Resource group '{group}' could not be found."
            )
        rtype = "/".join([namespace, *rest[0::2]]).lower()
        base = f"{self.group_id(group)}/providers/{namespace}"
        if len(rest) == 1 and method == "GET":
            if rtype not in LISTABLE:
                raise _unsupported(method, "/".join(parts))
            return self._list("/" + "/".join(parts), query, self.store.of_type(rtype, group))
        if len(rest) == 3 and method == "POST" and f"{namespace}/{rest[0]}".lower() == VMSS:
            return self._vmss_action(f"{base}/{rest[0]}/{rest[1]}", rest[2].lower(), body)
        if len(rest) >= 3 and len(rest) % 2 and method == "GET":
            return self._nested_list(base, rest, rtype, query)
        runbook = len(rest) > 4 and rest[2].lower() == "runbooks"
        if runbook and rest[4:] == ["draft", "content"] and method == "PUT":
            book = f"{base}/{'/'.join(rest[:4])}"
            annex.draft_content(self.store, book, self._raw.decode())
            return self._accepted(namespace, book)
        if runbook and rest[4:] == ["publish"] and method == "POST":
            book = f"{base}/{'/'.join(rest[:4])}"
            self.store.must(book, "Runbook")
            return self._accepted(namespace, book, lambda: annex.publish(self.store, book))
        if len(rest) == 4 and rtype == f"{VAULT}/accesspolicies" and method == "PUT":
            return self._access_policies(f"{base}/{rest[0]}/{rest[1]}", rest[3].lower(), body)
        if len(rest) % 2:
            raise _unsupported(method, "/".join(parts))
        rid = f"{base}/{'/'.join(rest)}"
        existing = self.store.get(rid)
        if method in ("GET", "PATCH") and existing is None:
            raise ArmError(
                404,
                "ResourceNotFound",
                f"The Resource '{namespace}/{'/'.join(rest)}' under resource group '{group}' was not found.",
            )
        if method == "GET" and existing is not None:
            return 200, {}, self.store.view(existing, query.get("$expand"))
        if method == "PUT":
            return self._put(rtype, rid, body, existing, namespace)
        if method == "PATCH" and rtype == VMSS and existing is not None:
            return self._patch_vmss(existing, body, namespace)
        if method == "DELETE":
            return self._delete(rtype, existing, namespace)
        raise _unsupported(method, "/".join(parts))

    def _put(self, rtype: str, rid: str, body: Any, old: Res | None, namespace: str) -> Reply:
        need(isinstance(body, dict), "a JSON object body is required")
        res = self.store.prepare(rtype, old.id if old else rid, body, old)
        res.body.update(
            {"id": res.id, "name": res.id.rsplit("/", 1)[1], "type": _type_name(res.id)}
        )
        props = res.body.setdefault("properties", {})
        self.store.resources[key(res.id)] = res
        status = 200 if old else 201
        if rtype not in ASYNC_TYPES:
            props["provisioningState"] = "Succeeded"
            return status, {}, self.store.view(res, None)
        props["provisioningState"] = "Updating" if old else "Creating"

        def done() -> None:
            props["provisioningState"] = "Succeeded"
            if rtype == VMSS:
                annex.sync_instances(self.store, res)

        def failed() -> None:
            props["provisioningState"] = "Failed"

        base = self._ops_base(namespace, res.body["location"])
        _, headers = self.ops.start(base, res.id, done, failed)
        return status, headers, self.store.view(res, None)

    def _patch_vmss(self, res: Res, body: Any, namespace: str) -> Reply:
        need(isinstance(body, dict), "a JSON object body is required")
        capacity = dig(body, "sku", "capacity")
        if capacity is not None:
            need(isinstance(capacity, int) and 0 <= capacity <= 1000, "bad sku.capacity")
            res.body["sku"]["capacity"] = capacity
        if "tags" in body:
            res.body["tags"] = body["tags"]
        unknown = set(body) - {"sku", "tags"}
        need(not unknown, f"fake ARM patches only sku.capacity and tags, not {sorted(unknown)}")
        res.body["properties"]["provisioningState"] = "Updating"

        def done() -> None:
            res.body["properties"]["provisioningState"] = "Succeeded"
            annex.sync_instances(self.store, res)

        _, headers = self._location_op(namespace, res.body["location"], res.id, done)
        return 200, headers, self.store.view(res, None)

    def _delete(self, rtype: str, res: Res | None, namespace: str) -> Reply:
        if res is None:
            # ARM answers 204 for a resource that is not there.
            return 204, {}, None
        self.store.check_delete(res)
        if rtype not in ASYNC_TYPES:
            self.store.remove(res)
            return 200, {}, None
        res.body.setdefault("properties", {})["provisioningState"] = "Deleting"
        _, headers = self._location_op(
            namespace, res.body["location"], res.id, lambda: self.store.remove(res)
        )
        headers["Location"] = headers["Azure-AsyncOperation"].replace(
            "/operations/", "/operationResults/"
        )
        return 202, headers, None

    def _accepted(self, namespace: str, rid: str, done: Callable[[], None] = lambda: None) -> Reply:
        """202 with a Location to poll (the Automation API's way)."""
        op_id, _ = self._location_op(namespace, "global", rid, done)
        base = self._ops_base(namespace, "global")
        return 202, {"Location": f"{base}/operationResults/{op_id}?api-version=2023-11-01"}, None

    def _nested_list(self, base: str, rest: list[str], rtype: str, query: dict[str, str]) -> Reply:
        parent = f"{base}/{'/'.join(rest[:-1])}"
        if rtype == f"{VMSS}/virtualmachines" and len(rest) == 3:
            res = self.store.must(parent, "Scale set")
            views = annex.instance_views(
                res, self.store.instances.get(key(res.id), []), query.get("$expand")
            )
            return self._page(parent + "/virtualMachines", query, views)
        if rtype not in annex.NESTED_LISTS:
            raise _unsupported("GET", f"{base}/{'/'.join(rest)}")
        self.store.must(parent, "Parent resource")
        children = [
            res for res in self.store.of_type(rtype) if key(res.id).startswith(key(parent) + "/")
        ]
        return self._list(f"{base}/{'/'.join(rest)}", query, children)

    def _vmss_action(self, rid: str, action: str, body: Any = None) -> Reply:
        res = self.store.get(rid)
        if res is None:
            raise ArmError(404, "ResourceNotFound", f"The Resource '{rid}' was not found.")
        if action == "delete":
            annex.delete_instances(self.store, res, body)
            _, headers = self._location_op(
                "Microsoft.Compute", res.body["location"], rid, lambda: None
            )
            return 202, headers, None
        power = {"start": "running", "deallocate": "deallocated", "restart": "running"}.get(action)
        if power is None:
            raise _unsupported("POST", f"{rid}/{action}")

        def done() -> None:
            res.power = power

        _, headers = self._location_op("Microsoft.Compute", res.body["location"], rid, done)
        headers["Location"] = headers["Azure-AsyncOperation"].replace(
            "/operations/", "/operationResults/"
        )
        return 202, headers, None

    def _access_policies(self, vault_id: str, kind: str, body: Any) -> Reply:
        entries = self.store.update_access_policies(vault_id, kind, body)
        return (
            200,
            {},
            {
                "id": f"{vault_id}/accessPolicies/{kind}",
                "type": "Microsoft.KeyVault/vaults/accessPolicies",
                "properties": {"accessPolicies": entries},
            },
        )

    # ---- lists ----------------------------------------------------------------------------------

    def _list(self, path: str, query: dict[str, str], found: list[Res]) -> Reply:
        expand = query.get("$expand")
        if query.get("statusOnly") == "true":
            expand = "instanceView"
        items = [self.store.view(res, expand) for res in sorted(found, key=lambda r: r.id.lower())]
        return self._page(path, query, items)

    def _page(self, path: str, query: dict[str, str], items: list[dict[str, Any]]) -> Reply:
        start = int(query.get("$skiptoken", "0") or 0)
        page = items[start : start + self.page_size]
        body: dict[str, Any] = {"value": page}
        if start + self.page_size < len(items):
            following = dict(query, **{"$skiptoken": str(start + self.page_size)})
            body["nextLink"] = f"{self.url}{path}?{urlencode(following)}"
        return 200, {}, body


def _type_name(resource_id: str) -> str:
    parts = resource_id.split("/providers/", 1)[1].split("/")
    return "/".join([parts[0], *parts[1::2]])


def _unsupported(method: str, what: str) -> ArmError:
    return ArmError(400, "UnsupportedByFakeArm", f"the fake ARM does not implement {method} {what}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one write: no Nagle/delayed-ACK stall per request.
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        arm: ArmServer = self.server.arm  # type: ignore[attr-defined]
        status, headers, payload = arm.handle(self.command, self.path, dict(self.headers), raw)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if data:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return None
