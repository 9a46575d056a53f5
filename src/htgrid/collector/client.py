"""Talking to a collector: advertise, invalidate and query ads over its HTTPS API.

    async with CollectorClient("127.0.0.1:9618") as pool:
        await pool.advertise("UPDATE_STARTD_AD", [site_ad])
        machines = await pool.query("Machine", "Memory >= 4096", ["Name", "Memory"])

The pool is given as condor_status's `-pool` takes it (`host[:port]`, port 9618 by
default) or, when omitted, from the environment variable HTGRID_COLLECTOR_HOST.
The connection is TLS trusting the CAs of the pool in `home` ($HTGRID_HOME): its own
and those in etc/ca/trusted.d. The token presented is the one given, else the one whose
issuer is the collector's trust domain (learnt from its first 401), from
$HTGRID_TOKEN, ~/.htgrid/tokens.d or `home`/etc/tokens.d; a daemon (`daemon=True`)
presents the pool's daemon token, else a token of `home`/etc/tokens.d (an execute node
of another host joins with the token its pool's administrator made for it). Failures raise the collector's errors
(`CollectorUnavailable` when nothing answers, `CollectorRefused` for a missing or
insufficient token).
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.adjson import json_members
from htgrid.client import (
    DEFAULT_PORT,
    BearerAuth,
    find_token,
    pool_url,
    read_token_file,
    realm_of,
    tls_transport,
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

__all__ = ["CollectorClient", "default_pool"]


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
    """An HTTPS client of one collector."""

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
        self._security = SecurityConfig.load(self.home)
        self._tls_problem: str | None = None
        verify: ssl.SSLContext | bool = True
        if transport is None:
            try:
                verify = client_ssl_context(trusted_ca_files(self._security))
            except CertificateError as exc:
                self._tls_problem = str(exc)  # said when a request is made
            # A daemon stopping cancels its requests, maybe mid-handshake: close their
            # sockets then (httpx's own transport leaves them to the garbage collector).
            transport = tls_transport(verify)
        self._daemon = daemon
        # A daemon knows its pool's trust domain: its token goes with the first request.
        issuer = self._security.trust_domain if daemon else None
        self._auth = BearerAuth(token, issuer=issuer, find=self._find_token)
        self._client = httpx.AsyncClient(
            base_url=pool_url(self.pool),
            timeout=timeout,
            transport=transport,
            auth=self._auth,
        )

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
        await self._client.aclose()

    async def _request(
        self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any
    ) -> httpx.Response:
        if self._tls_problem is not None:
            raise CollectorUnavailable(
                f"cannot talk to the collector at {self.pool}: {self._tls_problem}"
            )
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise CollectorUnavailable(
                    f"the collector at {self.pool} presents a certificate no CA of this "
                    f"pool trusts ({exc}); to trust another pool, copy its etc/ca/ca.crt "
                    f"into {self._security.trusted_ca_dir}/"
                ) from None
            raise CollectorUnavailable(f"no collector answers at {self.pool} ({exc})") from None
        except httpx.ConnectTimeout as exc:
            raise CollectorUnavailable(f"no collector answers at {self.pool} ({exc})") from None
        except httpx.TimeoutException:
            raise CollectorUnavailable(f"the collector at {self.pool} timed out") from None
        except httpx.TransportError as exc:
            raise CollectorUnavailable(
                f"cannot talk to the collector at {self.pool}: {exc}"
            ) from None
        if response.status_code >= 400 and not (missing_ok and response.status_code == 404):
            await self._raise_for(response)
        return response

    async def _raise_for(self, response: httpx.Response) -> None:
        """Raise the error an answer of 400 or more stands for."""
        try:
            doc: object = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            doc = None
        if response.status_code in (401, 403):
            raise self._refused(response, doc)
        raise from_problem(response.status_code, doc)

    def _refused(self, response: httpx.Response, doc: object) -> CollectorRefused:
        detail = doc.get("detail") if isinstance(doc, dict) else None
        realm = realm_of(response)
        text = f"the collector at {self.pool} refused the request: {detail or 'no reason given'}"
        if (
            response.status_code == 401
            and realm
            and "Authorization" not in response.request.headers
        ):
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
        return CollectorRefused(text, status=response.status_code, realm=realm)

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            value = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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
        response = await self._request(
            "POST",
            f"/v1/updates/{_command_name(command)}",
            content=body.encode("utf-8"),
            headers={"content-type": "application/json"},
        )
        return _results(self._json(response), len(ads))

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
        response = await self._request(
            "POST",
            f"/v1/changes/{_command_name(command)}",
            missing_ok=True,
            content=body.encode("utf-8"),
            headers={"content-type": "application/json"},
        )
        doc = self._json(response)
        if response.status_code == 404:
            if doc.get("error") == "UnknownCommand":
                await self._raise_for(response)
            return None  # no such route
        return str(doc.get("epoch") or ""), _results(doc, len(ads) + len(refreshes))

    async def invalidate(self, command: Command | str, query: ClassAd | Sequence[ClassAd]) -> int:
        """Remove the ads `query` names (by Name, or by its Requirements), or those of
        each query of a list, in one request; how many."""
        queries = [query] if isinstance(query, ClassAd) else query
        response = await self._request(
            "POST",
            f"/v1/invalidations/{_command_name(command)}",
            content=join_ads(encode_ad(json_members(q)) for q in queries).encode("utf-8"),
            headers={"content-type": "application/json"},
        )
        count = self._json(response).get("invalidated")
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
        response = await self._request("GET", "/v1/ads", params=params)
        return decode_ads(response.content)

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
        response = await self._request("GET", "/v1/ads", params=params)
        return response.content

    # -- the connection broker (CCB) ------------------------------------------------------

    async def ccb_request(self, ccbid: str, connect_id: str, return_address: str) -> None:
        """Ask the broker to have the node registered as `ccbid` connect to
        `return_address` and say `connect_id` (NotRegistered when no such node is)."""
        body = {"ccbid": ccbid, "connect_id": connect_id, "return_address": return_address}
        await self._request("POST", "/v1/ccb/requests", json=body)

    async def ccb_requests(self, ccbid: str, heartbeat: float) -> AsyncIterator[CcbRequest]:
        """Register as `ccbid` with the broker and yield the requests it hands over, as
        they come, the first being its acknowledgement (no connect id: the registration
        is taken); the broker writes an empty line every `heartbeat` seconds, and a
        registration silent for two of them is taken as lost (CollectorUnavailable)."""
        if self._tls_problem is not None:
            raise CollectorUnavailable(
                f"cannot talk to the collector at {self.pool}: {self._tls_problem}"
            )
        params = {"heartbeat": f"{heartbeat:g}"}
        timeout = httpx.Timeout(self._client.timeout.connect, read=2 * heartbeat + 5)
        path = f"/v1/ccb/registrations/{quote(ccbid, safe='')}"
        try:
            async with self._client.stream("GET", path, params=params, timeout=timeout) as r:
                if r.status_code >= 400:
                    await r.aread()
                    await self._raise_for(r)
                async for line in r.aiter_lines():
                    if not line.strip():
                        continue  # the broker's heartbeat
                    yield _ccb_request(line)
        except httpx.TransportError as exc:
            raise CollectorUnavailable(
                f"the registration with the broker at {self.pool} is lost: {exc}"
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
