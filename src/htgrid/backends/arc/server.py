"""The ARC GAHP server: HTCondor's ARC CE GAHP commands over ARC CE's REST 1.0 interface.

The commands, their arguments and result lines are `htgrid.gahp.commands.arc`'s. HTTP
goes through one httpx client per credential: the X.509 proxy (TLS client certificate;
the file is read again when it changes, so a renewed proxy is used at once) or a bearer
token (its file read at each request). The CE's certificate is checked against the grid
CA directory (X509_CERT_DIR, default /etc/grid-security/certificates).

ARC_JOB_STATUS_ALL is one GAHP request for every job: the CE's job list, then one status
request for all of them (HTCondor's ArcJobStatusAllWorkerFunction). A job id the CE does
not know comes back with its own 404 in the list, not as a failure of the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from htgrid import __version__
from htgrid.client.x509 import ProxyError, sign_proxy_request
from htgrid.gahp import Call, GahpServer, GahpVersion
from htgrid.gahp.commands import Spec, arc

__all__ = ["VERSION", "ArcGahp", "ArcOptions"]

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 28), "htgrid ARC GAHP")

_JSON = {"Accept": "application/json"}


@dataclass(frozen=True, slots=True)
class ArcOptions:
    """How an ARC GAHP server runs."""

    #: The X.509 proxy and the token file to present (INITIALIZE_FROM_FILE and
    #: UPDATE_TOKEN override them); the token wins when both are given, as in HTCondor.
    proxy: str | None = None
    token_file: str | None = None
    #: Where the grid CAs are (OpenSSL hashed directory).
    ca_dir: str = "/etc/grid-security/certificates"
    #: Seconds one HTTP request may take (HTCondor's: 15 s to connect, 60 s in all).
    connect_timeout: float = 15.0
    timeout: float = 60.0
    #: Requests of each command at once: above the grid manager's in-flight limit
    #: (GRIDMANAGER_MAX_PENDING_REQUESTS, 50), so that it never meets `Threads limit
    #: reached` (each request waits on the network, not on a thread).
    workers: int = 100


class _Failure(Exception):
    """A request that failed: the result's status and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _one_line(text: str, limit: int = 500) -> str:
    return " ".join(text.split())[:limit]


class ArcGahp:
    """The ARC CE GAHP's commands; HTTP through httpx, one client per credential."""

    def __init__(self, options: ArcOptions | None = None) -> None:
        self.options = options or ArcOptions()
        self._clients: dict[tuple[str, str, tuple[int, int, int]], httpx.AsyncClient] = {}

    def server(self) -> GahpServer:
        workers = self.options.workers

        def command(spec: Spec, work: Callable[[Call], Awaitable[Sequence[str]]]) -> Any:
            async def handler(call: Call) -> Sequence[str]:
                # The runtime steps a handler once in its reading task (_eager.py); httpx's
                # anyio cancel scopes must be entered and left in one task: yield first.
                await asyncio.sleep(0)
                try:
                    return await work(call)
                except _Failure as err:
                    return arc.Answer(err.code, _one_line(err.message)).fields()

            def on_error(reason: str) -> Sequence[str]:
                return arc.Answer(arc.LOCAL_FAILURE, _one_line(reason)).fields()

            return spec.command(handler, workers, on_error=on_error)

        return GahpServer(
            VERSION,
            [
                command(arc.PING, self._ping),
                command(arc.JOB_NEW, self._job_new),
                command(arc.JOB_STATUS, self._job_status),
                command(arc.JOB_STATUS_ALL, self._job_status_all),
                command(arc.JOB_INFO, self._job_info),
                command(arc.JOB_STAGE_IN, self._stage_in),
                command(arc.JOB_STAGE_OUT, self._stage_out),
                command(arc.JOB_KILL, self._action("kill")),
                command(arc.JOB_CLEAN, self._action("clean")),
                command(arc.DELEGATION_NEW, self._delegation_new),
                command(arc.DELEGATION_RENEW, self._delegation_renew),
            ],
        )

    async def serve_stdio(self) -> None:
        try:
            await self.server().serve_stdio()
        finally:
            for client in self._clients.values():
                with contextlib.suppress(Exception):
                    await client.aclose()

    # ---- HTTP ----------------------------------------------------------------------------

    def _credential(self, call: Call) -> tuple[str | None, str | None]:
        token = call.credentials.token_file or self.options.token_file
        proxy = call.credentials.proxy or self.options.proxy
        return (None, token) if token else (proxy, None)

    def _client(self, proxy: str | None) -> httpx.AsyncClient:
        stamp = (0, 0, 0)
        if proxy is not None:
            try:
                st = os.stat(proxy)
            except OSError as err:
                raise _Failure(
                    arc.LOCAL_FAILURE, f"cannot read the proxy {proxy}: {err.strerror}"
                ) from None
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        key = (proxy or "", self.options.ca_dir, stamp)
        client = self._clients.get(key)
        if client is None:
            for old in [k for k in self._clients if k[0] == key[0]]:
                stale = self._clients.pop(old)
                asyncio.get_running_loop().create_task(stale.aclose())
            context = ssl.create_default_context(capath=self.options.ca_dir)
            if proxy is not None:
                try:
                    context.load_cert_chain(proxy)
                except (OSError, ssl.SSLError) as err:
                    raise _Failure(
                        arc.LOCAL_FAILURE, f"cannot use the proxy {proxy}: {err}"
                    ) from None
            timeout = httpx.Timeout(self.options.timeout, connect=self.options.connect_timeout)
            client = httpx.AsyncClient(verify=context, timeout=timeout)
            self._clients[key] = client
        return client

    async def _request(
        self,
        call: Call,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        accept_json: bool = True,
    ) -> httpx.Response:
        proxy, token_file = self._credential(call)
        headers = dict(_JSON) if accept_json else {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if token_file is not None:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise _Failure(
                    arc.LOCAL_FAILURE, f"cannot read the token {token_file}: {err.strerror}"
                ) from None
            headers["Authorization"] = f"Bearer {token}"
        client = self._client(proxy)
        try:
            response = await client.request(method, url, content=body, headers=headers)
        except httpx.HTTPError as err:
            raise _Failure(arc.LOCAL_FAILURE, f"{method} {url} failed: {err!r}") from None
        if not 200 <= response.status_code < 300:
            reason = response.reason_phrase or "HTTP error"
            text = _one_line(response.text, 200)
            raise _Failure(response.status_code, f"{reason}: {text}" if text else reason)
        return response

    @staticmethod
    def _jobs(response: httpx.Response) -> list[dict[str, Any]]:
        """The `job` records of a jobs answer: one as an object, several as a list, none
        as an empty body (ARC 6's forms)."""
        if not response.content.strip():
            return []
        try:
            document = response.json()
            jobs = document["job"]
        except (ValueError, KeyError, TypeError):
            raise _Failure(arc.LOCAL_FAILURE, "Invalid response (no job element)") from None
        if isinstance(jobs, dict):
            jobs = [jobs]
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise _Failure(arc.LOCAL_FAILURE, "Invalid response (bad job element type)")
        return jobs

    async def _job_action(self, call: Call, action: str, job_id: str) -> dict[str, Any]:
        """One job's record of a POST /jobs?action=...; its own status-code checked."""
        base = arc.service_url(call.args[0])
        body = json.dumps({"job": [{"id": job_id}]}).encode()
        response = await self._request(
            call, "POST", f"{base}/jobs?action={action}", body=body, content_type="application/json"
        )
        jobs = self._jobs(response)
        if len(jobs) != 1:
            raise _Failure(arc.LOCAL_FAILURE, f"Invalid response ({len(jobs)} job records)")
        return jobs[0]

    @staticmethod
    def _record_answer(record: dict[str, Any]) -> arc.Answer:
        code = str(record.get("status-code", ""))
        if not code.isdigit():
            raise _Failure(arc.LOCAL_FAILURE, "Invalid response (no status-code element)")
        return arc.Answer(int(code), _one_line(str(record.get("reason", ""))) or "NULL")

    # ---- the commands --------------------------------------------------------------------

    async def _ping(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        response = await self._request(call, "GET", f"{base}/jobs")
        return arc.Answer(response.status_code, response.reason_phrase or "OK").fields()

    async def _job_new(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        description = call.args[1]
        kind = "application/xml" if description.lstrip().startswith("<") else "application/rsl"
        response = await self._request(
            call, "POST", f"{base}/jobs?action=new", body=description.encode(), content_type=kind
        )
        jobs = self._jobs(response)
        if len(jobs) != 1:
            raise _Failure(arc.LOCAL_FAILURE, f"Invalid response ({len(jobs)} job records)")
        answer = self._record_answer(jobs[0])
        if not answer.ok:
            return answer.fields()
        job_id, state = jobs[0].get("id"), jobs[0].get("state")
        if not job_id or not state:
            raise _Failure(arc.LOCAL_FAILURE, "Invalid response (no id or state element)")
        return arc.Answer(answer.code, answer.message, (str(job_id), str(state))).fields()

    async def _job_status(self, call: Call) -> Sequence[str]:
        record = await self._job_action(call, "status", call.args[1])
        answer = self._record_answer(record)
        if not answer.ok:
            return answer.fields()
        return arc.Answer(answer.code, answer.message, (str(record.get("state", "")),)).fields()

    async def _job_status_all(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        states = call.args[1]
        url = f"{base}/jobs" + (f"?state={states}" if states and states.upper() != "NULL" else "")
        listed = await self._request(call, "GET", url)
        ids = [record.get("id") for record in self._jobs(listed)]
        pairs: list[tuple[str, str]] = []
        if ids:
            body = json.dumps({"job": [{"id": i} for i in ids]}).encode()
            response = await self._request(
                call,
                "POST",
                f"{base}/jobs?action=status",
                body=body,
                content_type="application/json",
            )
            for record in self._jobs(response):
                if "id" not in record or "state" not in record:
                    raise _Failure(arc.LOCAL_FAILURE, "Invalid response (no id or state element)")
                pairs.append((str(record["id"]), str(record["state"])))
        return arc.StatusAll.result(arc.Answer(200, "OK"), pairs)

    async def _job_info(self, call: Call) -> Sequence[str]:
        record = await self._job_action(call, "info", call.args[1])
        answer = self._record_answer(record)
        if not answer.ok:
            return answer.fields()
        document = record.get("info_document", {})
        activity = document.get("ComputingActivity", {}) if isinstance(document, dict) else {}
        return arc.Answer(answer.code, answer.message, (json.dumps(activity),)).fields()

    def _action(self, action: str) -> Callable[[Call], Awaitable[Sequence[str]]]:
        async def run(call: Call) -> Sequence[str]:
            record = await self._job_action(call, action, call.args[1])
            return self._record_answer(record).fields()

        return run

    @staticmethod
    def _counted(args: tuple[str, ...], per: int) -> list[str]:
        count = args[2]
        if not count.isdigit() or len(args) != 3 + per * int(count):
            raise _Failure(arc.LOCAL_FAILURE, "Wrong_Argument_Number")
        return list(args[3:])

    async def _stage_in(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        job_id = call.args[1]
        answer = arc.Answer(200, "OK")
        for path in self._counted(call.args, 1):
            name = os.path.basename(path)
            try:
                data = await asyncio.to_thread(Path(path).read_bytes)
            except OSError as err:
                raise _Failure(
                    arc.LOCAL_FAILURE, f"Transfer of {name} failed: {err.strerror}"
                ) from None
            try:
                response = await self._request(
                    call,
                    "PUT",
                    f"{base}/jobs/{job_id}/session/{name}",
                    body=data,
                    content_type="application/octet-stream",
                    accept_json=False,
                )
            except _Failure as err:
                raise _Failure(err.code, f"Transfer of {name} failed: {err.message}") from None
            answer = arc.Answer(response.status_code, response.reason_phrase or "OK")
        return answer.fields()

    async def _stage_out(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        job_id = call.args[1]
        names = self._counted(call.args, 2)
        answer = arc.Answer(200, "OK")
        for remote, local in zip(names[0::2], names[1::2], strict=True):
            try:
                response = await self._request(
                    call, "GET", f"{base}/jobs/{job_id}/session/{remote}", accept_json=False
                )
            except _Failure as err:
                raise _Failure(err.code, f"Transfer of {remote} failed: {err.message}") from None
            try:
                await asyncio.to_thread(_write_whole, Path(local), response.content)
            except OSError as err:
                raise _Failure(
                    arc.LOCAL_FAILURE, f"Transfer of {remote} failed: {err.strerror}"
                ) from None
            answer = arc.Answer(response.status_code, response.reason_phrase or "OK")
        return answer.fields()

    async def _delegate(self, call: Call, csr_url: str, proxy_file: str) -> tuple[str, arc.Answer]:
        base = arc.service_url(call.args[0])
        response = await self._request(call, "POST", csr_url, accept_json=False)
        location = response.headers.get("location", "")
        deleg_id = (
            location.rpartition("/")[2] or csr_url.partition("/delegations/")[2].partition("?")[0]
        )
        try:
            proxy = await asyncio.to_thread(Path(proxy_file).read_bytes)
            signed = sign_proxy_request(response.content, proxy)
        except (OSError, ProxyError, ValueError) as err:
            raise _Failure(arc.LOCAL_FAILURE, f"cannot delegate {proxy_file}: {err}") from None
        put = await self._request(
            call,
            "PUT",
            f"{base}/delegations/{deleg_id}",
            body=signed,
            content_type="application/x-pem-file",
            accept_json=False,
        )
        return deleg_id, arc.Answer(put.status_code, put.reason_phrase or "OK")

    async def _delegation_new(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        deleg_id, answer = await self._delegate(
            call, f"{base}/delegations?action=new", call.args[1]
        )
        return arc.Answer(answer.code, answer.message, (deleg_id,)).fields()

    async def _delegation_renew(self, call: Call) -> Sequence[str]:
        base = arc.service_url(call.args[0])
        deleg_id = call.args[1]
        _, answer = await self._delegate(
            call, f"{base}/delegations/{deleg_id}?action=renew", call.args[2]
        )
        return answer.fields()


def _write_whole(path: Path, data: bytes) -> None:
    """`data` as the file `path`, written under another name first and renamed."""
    temp = path.with_name(f".{path.name}.arc-gahp")
    with open(temp, "wb") as out:
        out.write(data)
    os.replace(temp, path)
