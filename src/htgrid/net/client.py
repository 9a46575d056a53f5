"""`ScheddClient`: the job queue's API from Python, as the command line uses it.

    with ScheddClient.local() as schedd:          # $HTGRID_HOME/run/schedd.sock
        cluster = schedd.reserve_cluster()
        schedd.submit(cluster, cluster_ad, [proc_ad, ...])
        schedd.query("JobStatus == 5", ["HoldReason"])
        schedd.act(JobAction.Hold, Jobs.in_cluster(cluster), "waiting for data")

    with ScheddClient.remote("https://127.0.0.1:40123") as schedd:   # another pool's
        schedd.put_input("12.0", tar_bytes)                # over TLS, with a token
        schedd.update_leases({"12.0": int(time.time()) + 2400})

Errors come back as the classes the daemon raised (`JobNotFound`, `NotAuthorized`,
`ClassAdSyntaxError` with its line and column, `ExpiredToken`...); a daemon that does
not answer is `DaemonUnavailable`, one whose certificate is not trusted
`CertificateError`. httpx's own exceptions never escape.

The local client speaks HTTP on the Unix socket itself (`_unix`): loading httpx, which
the remote client needs for TLS and tokens, took most of a short command's start.
"""

from __future__ import annotations

import gc
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ads_to_json, loads
from htgrid.errors import HTGridError
from htgrid.net._errors import ApiError, DaemonUnavailable
from htgrid.net._problems import from_problem
from htgrid.net._unix import UnixHttp
from htgrid.net._wire import NDJSON, Jobs, ad_from_json
from htgrid.net.security import CertificateError, SecurityError
from htgrid.pool import HomeLayout, htgrid_home, trusted_ca_files
from htgrid.queue import BatchCounts, FactoryInfo, JobAction, JobId

if TYPE_CHECKING:
    import httpx

__all__ = ["ScheddClient", "socket_path"]

_BASE = "http://htgrid"  # the host part is not used on a Unix socket
_TAR = "application/x-tar"


def socket_path(home: str | os.PathLike[str] | None = None) -> Path:
    """The daemon's socket: `<home>/run/schedd.sock`, home defaulting to $HTGRID_HOME."""
    return HomeLayout(Path(home) if home is not None else htgrid_home()).schedd_socket


class _Response(Protocol):
    """What is read of an answer: httpx's, or the Unix socket client's."""

    @property
    def status_code(self) -> int: ...
    @property
    def is_success(self) -> bool: ...
    @property
    def content(self) -> bytes: ...
    def read(self) -> bytes: ...
    def json(self) -> Any: ...
    def iter_lines(self) -> Iterator[str]: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RawJson:
    """A request body that is JSON text already."""

    text: str


class ScheddClient:
    """A connection to the daemon's API (one HTTP client, reused for every call)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        http: httpx.Client | None = None,
        timeout: float = 60.0,
        url: str | None = None,
    ) -> None:
        """Talk to the socket at `path`; `http` replaces the transport (tests, `remote`),
        `url` names where it goes (for messages)."""
        self.path = Path(path)
        self.url = url
        self._http = http
        self._unix = UnixHttp(str(self.path), timeout) if http is None else None

    @classmethod
    def local(cls, home: str | os.PathLike[str] | None = None, **kw: Any) -> ScheddClient:
        """The client of the personal pool in `home` (default: $HTGRID_HOME)."""
        return cls(socket_path(home), **kw)

    @classmethod
    def remote(
        cls,
        url: str,
        *,
        home: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout: float = 60.0,
    ) -> ScheddClient:
        """The client of a queue daemon's TLS API at `url` (https://host:port).

        The server's certificate must be signed by a CA `home`'s pool trusts (its own, or
        one in etc/ca/trusted.d); `token` is sent, or else the token of the server's trust
        domain, found by the realm of its first 401 (BearerAuth).
        """
        # Loaded here for start-up: the local client (every command) does not pay for
        # TLS (cryptography) and tokens.
        import httpx

        from htgrid.client import BearerAuth
        from htgrid.net.security import SecurityConfig, client_ssl_context

        config = SecurityConfig.load(Path(home) if home is not None else None)
        http = httpx.Client(
            base_url=url.rstrip("/"),
            auth=BearerAuth(token),
            verify=client_ssl_context(trusted_ca_files(config)),
            timeout=timeout,
        )
        return cls(url, http=http, url=url.rstrip("/"))

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        if self._unix is not None:
            self._unix.close()

    def __enter__(self) -> ScheddClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the routes -------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The daemon's health answer: version, who you are, local jobs running..."""
        return self._json("GET", "/v1/health")

    def reserve_cluster(self) -> int:
        """A new cluster id to build job ads for."""
        return int(self._json("POST", "/v1/clusters")["cluster"])

    def submit(self, cluster: int, cluster_ad: ClassAd, procs: Sequence[ClassAd]) -> list[JobId]:
        """Queue the procs of a reserved cluster (each holds what differs from cluster_ad)."""
        return self._submit(f"/v1/clusters/{cluster}/jobs", cluster_ad, procs)

    def submit_stream(
        self,
        cluster: int,
        cluster_ad: ClassAd,
        procs: Iterable[ClassAd],
        *,
        sent: Callable[[int], None] | None = None,
    ) -> int:
        """Queue the procs of a reserved cluster as `procs` gives them (each what differs
        from cluster_ad), streamed in one request: neither side holds them all. The
        cluster is queued whole once the last has gone, or not at all: an exception from
        `procs` stops the request, and the daemon queues nothing. `sent(n)` hears of each
        batch gone (n procs in all so far). How many procs were queued."""
        body = _stream_body(cluster_ad, procs, sent)
        path = f"/v1/clusters/{cluster}/jobs"
        answer = self._decode(self._request("POST", path, content=body, media=NDJSON))
        return int(answer["procs"])

    def submit_new(self, cluster_ad: ClassAd, procs: Sequence[ClassAd]) -> list[JobId]:
        """Queue the procs in a new cluster, reserved and filled in one request (for ads
        that do not name their cluster id)."""
        return self._submit("/v1/jobs", cluster_ad, procs)

    def _submit(self, path: str, cluster_ad: ClassAd, procs: Sequence[ClassAd]) -> list[JobId]:
        # Assembled as text: the ads' expression markers must reach the daemon raw.
        body = f'{{"cluster_ad": {cluster_ad.printJson()}, "procs": {ads_to_json(procs)}}}'
        answer = self._json("POST", path, RawJson(body))
        return [JobId.parse(i) for i in answer["jobs"]]

    def query(
        self,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """The queued jobs matching `constraint`, in job-id order."""
        return self._ads("/v1/jobs", constraint, projection, limit)

    def query_iter(
        self,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[ClassAd]:
        """`query`, the ads as they come: the daemon sends them a page at a time, and
        neither side holds them all."""
        params = _selection(constraint, projection, limit)
        response = self._request("GET", "/v1/jobs", params=params, accept=NDJSON, stream=True)
        try:
            for line in response.iter_lines():
                if line.strip():
                    yield from self._ads_of(loads(line))
        except self._errors() as exc:
            raise DaemonUnavailable(f"lost the connection to the daemon: {exc}") from exc
        except ValueError as exc:
            raise ApiError(f"the daemon sent a line that is not JSON: {exc}") from exc
        finally:
            response.close()

    def summary(
        self, constraint: str | None = None, *, batches: bool = True
    ) -> tuple[list[BatchCounts], dict[str, dict[int, int]], list[FactoryInfo]]:
        """The jobs matching `constraint` counted by batch (cluster, owner, JobBatchName)
        and status, and everyone's jobs by owner and status: condor_q's batch view and
        totals, without reading the ads; and the late materialization factories. Not
        `batches`: everyone's counts alone (no batches, no factories), which is quicker."""
        params = {"constraint": constraint} if constraint is not None else {}
        if not batches:
            params["batches"] = "false"
        doc = self._decode(self._request("GET", "/v1/summary", params=params))
        counted = [BatchCounts.from_json(b) for b in doc.get("batches", [])]
        owners = {
            str(o): {int(k): int(n) for k, n in c.items()} for o, c in doc.get("owners", {}).items()
        }
        factories = [FactoryInfo.from_json(f) for f in doc.get("factories", [])]
        return counted, owners, factories

    def history(
        self,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """The jobs that left the queue, most recent first."""
        return self._ads("/v1/history", constraint, projection, limit)

    def get(self, job_id: JobId | str) -> ClassAd:
        """One queued job's ad (JobNotFound when it is not in the queue)."""
        return self._parse_ads(self._request("GET", f"/v1/jobs/{job_id}"))[0]

    def act(self, action: JobAction, jobs: Jobs, reason: str | None = None) -> list[JobId]:
        """Hold, release or remove jobs; the jobs acted on."""
        body: dict[str, Any] = {"action": action.value, "jobs": jobs.to_json()}
        if reason is not None:
            body["reason"] = reason
        return [JobId.parse(i) for i in self._json("POST", "/v1/jobs/act", body)["jobs"]]

    def edit(self, jobs: Jobs, attrs: Mapping[str, str]) -> list[JobId]:
        """Set attributes to ClassAd expressions (text); the jobs edited."""
        body = {"jobs": jobs.to_json(), "attrs": dict(attrs)}
        return [JobId.parse(i) for i in self._json("POST", "/v1/jobs/edit", body)["jobs"]]

    def put_input(self, job_id: JobId | str, tar: bytes) -> list[JobId]:
        """Send a job's input sandbox (a plain tar); a spooling job is then released."""
        response = self._request("PUT", f"/v1/jobs/{job_id}/input", content=tar, media=_TAR)
        return [JobId.parse(i) for i in self._decode(response)["jobs"]]

    def get_output(self, job_id: JobId | str) -> bytes:
        """A job's output sandbox, as a plain tar."""
        return self._request("GET", f"/v1/jobs/{job_id}/output").content

    def update_leases(self, leases: Mapping[JobId | str, int]) -> list[JobId]:
        """Set JobLeaseExpiration (epoch seconds) of jobs; the ones updated (unknown
        and other users' jobs are skipped)."""
        body = {"leases": {str(job_id): int(when) for job_id, when in leases.items()}}
        return [JobId.parse(i) for i in self._json("POST", "/v1/jobs/lease", body)["jobs"]]

    def annex_token(
        self,
        annex: str,
        lifetime: float | None = None,
        *,
        expires: float | None = None,
        authz: Sequence[str] | None = None,
        identity: str | None = None,
        record: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The schedd's token for your annex `annex`, lasting `lifetime` s or until
        `expires` (its lease's end): token, identity, expires, jti, trust_domain and ca
        (the pool's CA, PEM). `authz` or `identity` beyond the annex's own are refused
        (NotAuthorized). `record` (cloud, region, group): the schedd records the annex
        for the pool's master, which keeps its Annex ad current."""
        body: dict[str, Any] = {"annex": annex}
        if lifetime is not None:
            body["lifetime"] = lifetime
        if expires is not None:
            body["expires"] = int(expires)
        if authz is not None:
            body["authz"] = list(authz)
        if identity is not None:
            body["identity"] = identity
        if record is not None:
            body["record"] = dict(record)
        return self._json("POST", "/v1/annex/tokens", body)

    def annex_revoke(self, annex: str) -> int:
        """Revoke every token of your annex `annex` (its shutdown); how many."""
        return int(self._json("POST", "/v1/annex/revocations", {"annex": annex})["revoked"])

    def quarantined(self) -> list[dict[str, Any]]:
        """The rows the daemon set aside because it could not read them (yours; an
        administrator's: all): id, time, source, job ("12.0" or None), owner, reason."""
        entries = self._json("GET", "/v1/quarantine").get("quarantined")
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def openapi(self) -> dict[str, Any]:
        """The API's OpenAPI description."""
        return self._json("GET", "/v1/openapi.json")

    # -- plumbing ---------------------------------------------------------------------

    def _ads(
        self, path: str, constraint: str | None, projection: Sequence[str] | None, limit: int | None
    ) -> list[ClassAd]:
        params = _selection(constraint, projection, limit)
        return self._parse_ads(self._request("GET", path, params=params))

    def _parse_ads(self, response: _Response) -> list[ClassAd]:
        doc = self._decode(response)
        try:
            return self._ads_of(doc["jobs"])
        except (KeyError, TypeError) as exc:
            raise ApiError(f"the daemon sent job ads this client cannot read: {exc}") from exc

    @staticmethod
    def _ads_of(objs: Any) -> list[ClassAd]:
        try:
            return [ad_from_json(obj) for obj in objs]
        except (TypeError, HTGridError) as exc:
            raise ApiError(f"the daemon sent job ads this client cannot read: {exc}") from exc

    def _json(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        return self._decode(self._request(method, path, json_body=body))

    def _decode(self, response: _Response) -> dict[str, Any]:
        try:
            doc = loads(response.content)
        except ValueError as exc:
            raise ApiError(
                f"the daemon sent something that is not JSON (HTTP {response.status_code})",
                status=response.status_code,
            ) from exc
        if not isinstance(doc, dict):
            raise ApiError("the daemon's answer is not a JSON object", status=response.status_code)
        return doc

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: object = None,
        content: str | bytes | Iterator[bytes] | None = None,
        media: str = "application/json",
        accept: str | None = None,
        stream: bool = False,
    ) -> _Response:
        if isinstance(json_body, RawJson):
            content = json_body.text
        elif json_body is not None:
            content = json.dumps(json_body)
        headers = {"content-type": media} if content is not None else {}
        if accept is not None:
            headers["accept"] = accept
        response = self._send(method, path, params, content, headers or None, stream)
        if response.is_success:
            return response
        if stream:
            response.read()
            response.close()
        try:
            doc = response.json()
        except ValueError:
            doc = None
        raise from_problem(response.status_code, doc)

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        content: str | bytes | Iterator[bytes] | None,
        headers: dict[str, str] | None,
        stream: bool = False,
    ) -> _Response:
        """One request (its body left to read when `stream`); the transport's and the
        socket's errors said in the daemon's terms."""
        if self._unix is not None:
            return self._send_unix(self._unix, method, path, params, content, headers, stream)
        assert self._http is not None
        request = self._http.build_request(
            method, path, params=params, content=content, headers=headers
        )
        if self.url is not None:
            return self._send_remote(request, stream)
        import httpx

        with warnings.catch_warnings():
            # httpcore leaks the socket of a failed connect to a Unix socket (a daemon
            # that died leaves its socket file behind). The socket is freed once the
            # exception is gone, below: quietly, since it is not ours to close.
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                return self._http.send(request, stream=stream)
            except (httpx.ConnectError, OSError) as exc:
                problem = self._not_running(exc)
            except httpx.TimeoutException:
                problem = f"the daemon on {self.path} did not answer in time"
            except httpx.HTTPError as exc:
                problem = f"lost the connection to the daemon on {self.path}: {exc}"
            gc.collect()
        raise DaemonUnavailable(problem)

    def _send_unix(
        self,
        unix: UnixHttp,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        content: str | bytes | Iterator[bytes] | None,
        headers: dict[str, str] | None,
        stream: bool,
    ) -> _Response:
        try:
            return unix.request(
                method, path, params=params, content=content, headers=headers, stream=stream
            )
        except TimeoutError:
            problem = f"the daemon on {self.path} did not answer in time"
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as exc:
            problem = self._not_running(exc)  # from connecting: no daemon behind the path
        except OSError as exc:
            problem = f"lost the connection to the daemon on {self.path}: {exc}"
        raise DaemonUnavailable(problem)

    def _not_running(self, exc: BaseException) -> str:
        return (
            f"the htgrid daemons are not running (nothing answers on {self.path}: "
            f"{exc}); start them with `htgrid up`"
        )

    def _errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions of reading an answer that mean the connection was lost."""
        if self._unix is not None:
            return (OSError,)
        import httpx

        return (httpx.HTTPError,)

    def _send_remote(self, request: httpx.Request, stream: bool) -> _Response:
        import httpx

        assert self._http is not None
        error: HTGridError
        try:
            return self._http.send(request, stream=stream)
        except httpx.ConnectError as exc:
            error = _untrusted(self.url, exc) or DaemonUnavailable(
                f"no queue daemon answers at {self.url}: {exc}"
            )
        except httpx.TimeoutException:
            error = DaemonUnavailable(f"the queue daemon at {self.url} did not answer in time")
        except httpx.HTTPError as exc:
            error = DaemonUnavailable(
                f"lost the connection to the queue daemon at {self.url}: {exc}"
            )
        raise error


def _selection(
    constraint: str | None, projection: Sequence[str] | None, limit: int | None
) -> dict[str, str]:
    params: dict[str, str] = {}
    if constraint is not None:
        params["constraint"] = constraint
    if projection:
        params["projection"] = ",".join(projection)
    if limit is not None:
        params["limit"] = str(limit)
    return params


#: A streamed submit's line holds up to this many procs, or this many bytes of them, and
#: goes at least this often while procs keep coming slowly (seconds).
_BATCH_PROCS: Final = 1000
_BATCH_BYTES: Final = 1 << 18
_BATCH_SECONDS: Final = 1.0


def _stream_body(
    cluster_ad: ClassAd, procs: Iterable[ClassAd], sent: Callable[[int], None] | None
) -> Iterator[bytes]:
    """The lines of a streamed submit (net._wire.SubmitStream), made as `procs` gives."""
    # printJson breaks lines only between tokens (a newline in a string is escaped): its
    # ad is one line without them.
    yield ('{"cluster_ad": ' + cluster_ad.printJson().replace("\n", "") + "}\n").encode()
    count = 0
    batch: list[str] = []
    size = 0
    since = time.monotonic()
    for ad in procs:
        text = ad.printJson().replace("\n", "")
        batch.append(text)
        size += len(text)
        if (
            len(batch) >= _BATCH_PROCS
            or size >= _BATCH_BYTES
            or (len(batch) % 64 == 0 and time.monotonic() - since >= _BATCH_SECONDS)
        ):
            count += len(batch)
            yield ('{"procs": [' + ",".join(batch) + "]}\n").encode()
            batch, size, since = [], 0, time.monotonic()
            if sent is not None:
                sent(count)
    if batch:
        count += len(batch)
        yield ('{"procs": [' + ",".join(batch) + "]}\n").encode()
        if sent is not None:
            sent(count)
    yield f'{{"end": {count}}}\n'.encode()


def _untrusted(url: str | None, exc: httpx.ConnectError) -> SecurityError | None:
    """The CertificateError a failed TLS handshake stands for, if it was one."""
    import ssl

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        return CertificateError(
            f"the queue daemon at {url} presented a certificate this pool does not trust "
            f"({cause.verify_message}): put its pool's etc/ca/ca.crt in etc/ca/trusted.d/ "
            "of this pool"
        )
    return CertificateError(f"the TLS handshake with {url} failed: {cause.reason or cause}")
