"""Talking to a collector: advertise, invalidate and query ads over its HTTPS API.

    async with CollectorClient("127.0.0.1:9618") as pool:
        await pool.advertise("UPDATE_STARTD_AD", [site_ad])
        machines = await pool.query("Machine", "Memory >= 4096", ["Name", "Memory"])

The pool is given as condor_status's `-pool` takes it (`host[:port]`, port 9618 by
default) or, when omitted, from the environment variable HTGRID_COLLECTOR_HOST.
The connection is TLS trusting the CAs of the pool in `home` ($HTGRID_HOME): its own
and those in etc/ca/trusted.d, kept for the next requests (a daemon updates its ads
often: `htgrid.client.Http11`, a kept connection the collector closed made again). The token presented is the one given, else the one whose
issuer is the collector's trust domain (learnt from its first 401), from
$HTGRID_TOKEN, ~/.htgrid/tokens.d or `home`/etc/tokens.d; a daemon (`daemon=True`)
presents the pool's daemon token, else a token of `home`/etc/tokens.d (an execute node
of another host joins with the token its pool's administrator made for it). Failures raise the collector's errors
(`CollectorUnavailable` when nothing answers, `CollectorRefused` for a missing or
insufficient token).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.adjson import json_members
from htgrid.client import (
    DEFAULT_PORT,
    Answer,
    BearerAuth,
    Http11,
    InProcess,
    Streamed,
    find_token,
    pool_url,
    read_token_file,
    realm_of,
    said,
    user_token_dir,
)
from htgrid.collector._ccb import CcbRequest
from htgrid.collector._errors import CollectorRefused, CollectorUnavailable, ProtocolError
from htgrid.collector._problems import from_problem
from htgrid.collector._store import UpdateResult
from htgrid.collector._types import AdType, Command
from htgrid.collector._wire import Fragments, decode_ads, encode_ad, join_ads
from htgrid.net.security import (
    CertificateError,
    SecurityConfig,
    client_ssl_context,
    daemon_token_path,
)
from htgrid.pool import HomeLayout, htgrid_home, trusted_ca_files

if TYPE_CHECKING:
    import httpx

__all__ = ["CollectorClient", "default_pool"]

_JSON: Final = "application/json"
#: A connection that fails so: nothing answers at the address.
_UNREACHABLE: Final = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL})


def _home(home: str | os.PathLike[str] | None) -> Path:
    return Path(home) if home is not None else htgrid_home()


def default_pool(home: str | os.PathLike[str] | None = None) -> str:
    """The pool tools talk to when not told: HTGRID_COLLECTOR_HOST, else the collector
    of the personal pool in `home` ($HTGRID_HOME; its run/collector.address, written
    while it runs), else this host's port 9618."""
    explicit = os.environ.get("HTGRID_COLLECTOR_HOST")
    if explicit:
        return explicit
    try:
        with open(HomeLayout(_home(home)).collector_address_file, encoding="utf-8") as f:
            written = f.read().strip()
    except OSError:
        written = ""
    return written or f"127.0.0.1:{DEFAULT_PORT}"


def _command_name(command: Command | str) -> str:
    return command.name if isinstance(command, Command) else command.strip().upper()


class CollectorClient:
    """An HTTPS client of one collector, its connections kept for the next requests."""

    def __init__(
        self,
        pool: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        home: str | os.PathLike[str] | None = None,
        token: str | None = None,
        daemon: bool = False,
    ) -> None:
        """`home` is the pool whose CAs and tokens to use ($HTGRID_HOME); `token` the
        one to present (else found by the collector's trust domain); `daemon` presents
        the pool's daemon token (the pool's own daemons advertising). `transport`
        replaces the network (tests talking to an app in-process)."""
        self.home = _home(home)
        self.pool = pool or default_pool(self.home)
        self.timeout = timeout
        self._security = SecurityConfig.load(self.home)
        self._tls_problem: str | None = None
        url = urlsplit(pool_url(self.pool))
        self._prefix = url.path.rstrip("/")  # a collector behind a proxy's path
        self._http: Http11 | InProcess
        if transport is not None:
            self._http = InProcess(transport, f"{url.scheme}://{url.netloc}")
        else:
            try:
                context = client_ssl_context(trusted_ca_files(self._security))
            except CertificateError as exc:
                self._tls_problem = str(exc)  # said when a request is made
                context = ssl.create_default_context()
            self._http = Http11.tls(url.hostname or "", url.port or 443, context)
        self._daemon = daemon
        # A daemon knows its pool's trust domain: its token goes with the first request.
        issuer = self._security.trust_domain if daemon else None
        self._auth = BearerAuth(token, issuer=issuer, find=self._find_token)

    def _token_dirs(self) -> list[Path]:
        return [user_token_dir(), self._security.system_token_dir]

    def _find_token(self, issuer: str) -> str | None:
        if not self._daemon:
            return find_token(issuer, dirs=self._token_dirs())
        now = time.time()
        tokens, _ = read_token_file(daemon_token_path(self._security))
        found = next((t.token for t in tokens if t.usable_for(issuer, now)), None)
        if found is None:  # never the user's tokens: a daemon's are the pool's
            found = find_token(issuer, dirs=[self._security.system_token_dir], env={}, now=now)
        return found

    async def __aenter__(self) -> CollectorClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        missing_ok: bool = False,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        """The answer, read whole (one of 400 or more raised as its error, but a 404
        when `missing_ok`)."""
        async with self._exchange(method, path, params, body, self.timeout, missing_ok) as answer:
            async with asyncio.timeout(self.timeout):
                content = await answer.read()
        return Answer(answer.status, answer.headers, content)

    @contextlib.asynccontextmanager
    async def _exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: bytes | None,
        read: float,
        missing_ok: bool = False,
    ) -> AsyncIterator[Streamed]:
        """Send a request, presenting the token (once more with the one a 401 names,
        if another); its answer, to read in the block. The network's errors in the
        block are the collector's (CollectorUnavailable), as is an answer of 400 or
        more (but a 404 when `missing_ok`)."""
        if self._tls_problem is not None:
            raise CollectorUnavailable(
                f"cannot talk to the collector at {self.pool}: {self._tls_problem}"
            )
        token = self._auth.first()
        try:
            async with contextlib.AsyncExitStack() as stack:
                while True:
                    headers = {"content-type": _JSON} if body is not None else {}
                    if token is not None:
                        headers["authorization"] = f"Bearer {token}"
                    answer = await stack.enter_async_context(
                        self._http.stream(
                            method,
                            self._prefix + path,
                            params=params,
                            body=body,
                            headers=headers,
                            timeout=self.timeout,
                            read=read,
                        )
                    )
                    if answer.status != 401:
                        break
                    fresh = self._auth.after_refusal(token, answer.headers)
                    if fresh is None:
                        break
                    await answer.read()  # the connection kept for the request again
                    await stack.aclose()
                    token = fresh
                if answer.status >= 400 and not (missing_ok and answer.status == 404):
                    content = await answer.read()
                    raise self._error(Answer(answer.status, answer.headers, content), token)
                yield answer
        except OSError as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: OSError) -> CollectorUnavailable:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return CollectorUnavailable(
                f"the collector at {self.pool} presents a certificate no CA of this "
                f"pool trusts ({exc}); to trust another pool, copy its etc/ca/ca.crt "
                f"into {self._security.trusted_ca_dir}/"
            )
        if isinstance(exc, TimeoutError):  # connecting, or the answer
            why = f" ({exc})" if str(exc) else ""
            return CollectorUnavailable(f"the collector at {self.pool} timed out{why}")
        if isinstance(exc, ConnectionRefusedError | socket.gaierror) or exc.errno in _UNREACHABLE:
            return CollectorUnavailable(f"no collector answers at {self.pool} ({said(exc)})")
        return CollectorUnavailable(f"cannot talk to the collector at {self.pool}: {said(exc)}")

    def _error(self, answer: Answer, sent: str | None) -> Exception:
        """The error an answer of 400 or more stands for, to a request that presented
        the token `sent`."""
        try:
            doc: object = json.loads(answer.content)
        except (ValueError, UnicodeDecodeError):
            doc = None
        if answer.status in (401, 403):
            return self._refused(answer, doc, sent)
        return from_problem(answer.status, doc)

    def _refused(self, answer: Answer, doc: object, sent: str | None) -> CollectorRefused:
        detail = doc.get("detail") if isinstance(doc, dict) else None
        realm = realm_of(answer.headers)
        text = f"the collector at {self.pool} refused the request: {detail or 'no reason given'}"
        if answer.status == 401 and realm and sent is None:
            where = (
                str(self._security.system_token_dir)
                if self._daemon
                else " or ".join(str(d) for d in self._token_dirs())
            )
            text = (
                f"the collector at {self.pool} wants a token of its pool (trust domain "
                f"{realm!r}) and none was found in {where}: get one from that pool's "
                "administrator (`htgrid token create` there)"
            )
        return CollectorRefused(text, status=answer.status, realm=realm)

    def _json(self, answer: Answer) -> dict[str, Any]:
        try:
            value = json.loads(answer.content)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"the collector's answer is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ProtocolError("the collector's answer is not a JSON object")
        return value

    async def health(self) -> dict[str, Any]:
        """The collector's status: version and how many ads of each type it holds."""
        return self._json(await self._request("GET", "/v1/health"))

    async def advertise(self, command: Command | str, ads: Sequence[ClassAd]) -> list[UpdateResult]:
        """Send `ads` with an UPDATE_* command; what became of each."""
        return await self.advertise_members(command, [json_members(ad) for ad in ads])

    async def advertise_members(
        self, command: Command | str, ads: Sequence[Fragments]
    ) -> list[UpdateResult]:
        """`advertise` for ads given as their JSON members (`adjson.json_members`): a
        daemon whose ads keep most attributes from update to update encodes those once."""
        body = join_ads(encode_ad(members) for members in ads)
        answer = await self._request(
            "POST", f"/v1/updates/{_command_name(command)}", body=body.encode("utf-8")
        )
        return _results(self._json(answer), len(ads))

    async def advertise_changes(
        self,
        command: Command | str,
        epoch: str,
        ads: Sequence[Fragments],
        refreshes: Sequence[tuple[int, Fragments]],
    ) -> tuple[str, list[UpdateResult]] | None:
        """An update of a daemon's ads in one request: `ads` whole (changed, or never
        taken), and `refreshes` (the version the collector gave an ad whose content did
        not change since, and the attributes every update changes) for the others, as
        of the collector's `epoch`. The collector's epoch now and what became of each
        ad (those of `ads`, then of `refreshes`; an accepted one with its version);
        None from a collector that takes no such update (an older htgrid)."""
        items = [f"[{version}, {encode_ad(members)}]" for version, members in refreshes]
        body = (
            f'{{"epoch": {json.dumps(epoch)}, "ads": {join_ads(encode_ad(m) for m in ads)}, '
            f'"refresh": {join_ads(items)}}}'
        )
        answer = await self._request(
            "POST",
            f"/v1/changes/{_command_name(command)}",
            missing_ok=True,
            body=body.encode("utf-8"),
        )
        doc = self._json(answer)
        if answer.status == 404:
            if doc.get("error") == "UnknownCommand":
                raise from_problem(answer.status, doc)
            return None  # no such route
        return str(doc.get("epoch") or ""), _results(doc, len(ads) + len(refreshes))

    async def invalidate(self, command: Command | str, query: ClassAd | Sequence[ClassAd]) -> int:
        """Remove the ads `query` names (by Name, or by its Requirements), or those of
        each query of a list, in one request; how many."""
        queries = [query] if isinstance(query, ClassAd) else query
        answer = await self._request(
            "POST",
            f"/v1/invalidations/{_command_name(command)}",
            body=join_ads(encode_ad(json_members(q)) for q in queries).encode("utf-8"),
        )
        count = self._json(answer).get("invalidated")
        if type(count) is not int:
            raise ProtocolError("the collector did not say how many ads it removed")
        return count

    async def query(
        self,
        ad_type: AdType | str | None = None,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """The ads of `ad_type` (a MyType; all when None) for which `constraint` holds."""
        params = _query_params(ad_type, constraint, projection)
        if limit is not None:
            params["limit"] = str(limit)
        answer = await self._request("GET", "/v1/ads", params=params)
        return decode_ads(answer.content)

    async def query_changes(
        self,
        ad_type: AdType | str | None,
        constraint: str | None,
        projection: Sequence[str] | None,
        since: tuple[str, int] | None,
    ) -> bytes:
        """The answer of `AdStore.query_changes` (a collector of before it answers with
        every ad, as `query`'s array): what `KeptAds` reads."""
        params = _query_params(ad_type, constraint, projection)
        params["since"] = f"{since[0]}:{since[1]}" if since else ""
        answer = await self._request("GET", "/v1/ads", params=params)
        return answer.content

    # -- the connection broker (CCB) ------------------------------------------------------

    async def ccb_request(self, ccbid: str, connect_id: str, return_address: str) -> None:
        """Ask the broker to have the node registered as `ccbid` connect to
        `return_address` and say `connect_id` (NotRegistered when no such node is)."""
        body = {"ccbid": ccbid, "connect_id": connect_id, "return_address": return_address}
        await self._request("POST", "/v1/ccb/requests", body=json.dumps(body).encode())

    async def ccb_requests(self, ccbid: str, heartbeat: float) -> AsyncIterator[CcbRequest]:
        """Register as `ccbid` with the broker and yield the requests it hands over, as
        they come, the first being its acknowledgement (no connect id: the registration
        is taken); the broker writes an empty line every `heartbeat` seconds, and a
        registration silent for two of them is taken as lost (CollectorUnavailable)."""
        params = {"heartbeat": f"{heartbeat:g}"}
        read = 2 * heartbeat + 5
        path = f"/v1/ccb/registrations/{quote(ccbid, safe='')}"
        async with self._exchange("GET", path, params, None, read) as answer:
            try:
                async for line in _lines(answer, read):
                    if line.strip():  # else the broker's heartbeat
                        yield _ccb_request(line)
            except OSError as exc:
                raise CollectorUnavailable(
                    f"the registration with the broker at {self.pool} is lost: {said(exc)}"
                ) from None
        raise CollectorUnavailable(f"the broker at {self.pool} ended the registration")


def _results(doc: dict[str, Any], count: int) -> list[UpdateResult]:
    results = doc.get("results")
    if not isinstance(results, list) or len(results) != count:
        raise ProtocolError("the collector's answer does not account for every ad")
    out = []
    for r in results:
        if not isinstance(r, dict):
            raise ProtocolError("the collector's answer has a result that is not an object")
        version = r.get("version")
        out.append(
            UpdateResult(
                bool(r.get("accepted")),
                str(r.get("name") or ""),
                str(r.get("reason") or ""),
                version if type(version) is int else 0,
            )
        )
    return out


def _query_params(
    ad_type: AdType | str | None, constraint: str | None, projection: Sequence[str] | None
) -> dict[str, str]:
    params: dict[str, str] = {}
    if ad_type is not None:
        params["type"] = ad_type.value if isinstance(ad_type, AdType) else ad_type
    if constraint:
        ExprTree(constraint)  # a syntax error is the caller's: raise it here, with a caret
        params["constraint"] = constraint
    if projection:
        params["projection"] = ",".join(projection)
    return params


async def _lines(answer: Streamed, read: float) -> AsyncIterator[str]:
    """The answer's lines as they come, each part of it within `read` seconds."""
    rest = b""
    while True:
        async with asyncio.timeout(read):
            part = await answer.receive(1 << 16)
        if not part:
            if rest:
                yield rest.decode("utf-8", "replace")
            return
        *lines, rest = (rest + part).split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")


def _ccb_request(line: str) -> CcbRequest:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"the broker sent a line that is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("the broker sent a line that is not a JSON object")
    return CcbRequest(
        str(doc.get("connect_id", "")),
        str(doc.get("return_address", "")),
        str(doc.get("requester", "")),
    )
