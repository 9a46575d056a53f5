"""Token issuers' signing keys, fetched over HTTPS and kept a while (scitokens-cpp's cache).

    keys = IssuerKeys(IssuerSettings(ca_dir=Path("/etc/grid-security/certificates")))
    jwk = await keys.key("https://issuer.example", "key-1")   # a jwt.PyJWK, or an AuthError

An issuer's keys are found as HTCondor's SciTokens library finds them: OIDC discovery,
`GET <issuer>/.well-known/openid-configuration`, whose `issuer` must be the token's and
whose `jwks_uri` (https) names the key set (RFC 7517). Only public signing keys are kept.

The keys are used for `refresh` seconds, then fetched again; a `kid` they lack (the issuer
rotated its key) fetches them again, at most every `rotation` seconds. While the issuer is
down the keys already held serve for up to `lifetime` seconds; an issuer that failed is
not asked again for `retry` seconds, its tokens refused meanwhile with the reason. Each
fetch is bounded (`timeout`, `max_bytes`); requests for one issuer's keys share one fetch,
and the fetch goes on if the request that started it is gone. The event loop never waits
on the network: httpx's async client, and the CA files read in a thread.

With `cache_dir` (SEC_SCITOKENS_CACHE, as HTCondor's SciTokens library keeps its cache),
the keys fetched are also written there, and read back when an issuer cannot be reached
and none are held: a restarted daemon takes tokens while their issuer is down.

Whom to trust for an issuer's HTTPS: the system's CAs, and the pool's trusted CAs (its
AUTH_SSL_CLIENT_CADIR, etc/ca/trusted.d: `htgrid trust add <name> <issuer CA>`), read
again when that directory changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import jwt

from htgrid.client import ISSUER_ALGORITHMS, shown
from htgrid.net.security._config import ensure_private_dir, write_private
from htgrid.net.security._errors import IssuerUnavailable, UnknownKey

__all__ = ["IssuerKeys", "IssuerSettings", "https_url"]

_log = logging.getLogger("htgrid.net.security")
_DISCOVERY: Final = "/.well-known/openid-configuration"
# Failures remembered at most: a map line matching any issuer lets callers name issuers
# without end, and each refusal must not cost memory for ever.
_MAX_FAILURES: Final = 1024


@dataclass(frozen=True, slots=True)
class IssuerSettings:
    """Whom to trust for issuers' HTTPS, and how long their keys are kept."""

    ca_files: tuple[Path, ...] = ()  # CA certificates trusted besides the system's
    ca_dir: Path | None = None  # ...and those in this directory (*.crt, *.pem)
    system_cas: bool = True  # the system's CAs (the public issuers')
    timeout: float = 10.0  # seconds one fetch (discovery and keys) may take
    refresh: float = 600.0  # seconds keys are used before being fetched again
    lifetime: float = 4 * 86400.0  # ...and, while the issuer is down, at most this long
    retry: float = 60.0  # seconds an issuer that failed is not asked again
    rotation: float = 30.0  # an unknown kid fetches again at most this often
    max_bytes: int = 1 << 20  # of a discovery document or key set
    cache_dir: Path | None = None  # SEC_SCITOKENS_CACHE: keys kept across restarts


@dataclass(frozen=True, slots=True)
class _KeySet:
    keys: Mapping[str, jwt.PyJWK]  # by kid ("" for a key without one)
    fetched: float


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: str
    at: float


class _FetchFailed(Exception):
    """A fetch of an issuer's keys failed (the reason is its text)."""


def https_url(text: str) -> bool:
    """Whether `text` is an https URL with a host (what an issuer, and its jwks_uri, is)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname)


class IssuerKeys:
    """The signing keys of the issuers whose tokens a daemon checks."""

    def __init__(
        self,
        settings: IssuerSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings if settings is not None else IssuerSettings()
        self._clock = clock
        self._transport = transport
        self._sets: dict[str, _KeySet] = {}
        self._failures: dict[str, _Failure] = {}
        self._inflight: dict[str, asyncio.Future[_KeySet]] = {}
        self._context: tuple[tuple[tuple[str, int], ...], ssl.SSLContext] | None = None

    async def key(self, issuer: str, kid: str | None) -> jwt.PyJWK:
        """The key `kid` of `issuer` (IssuerUnavailable when its keys cannot be had,
        UnknownKey when they do not include it)."""
        cfg, now = self.settings, self._clock()
        held = self._sets.get(issuer)
        # Fresh keys serve; a kid they lack fetches them again, unless they are just fetched.
        fresh = held is not None and now - held.fetched < cfg.refresh
        if fresh and held and ((kid or "") in held.keys or now - held.fetched < cfg.rotation):
            return _pick(issuer, held, kid)
        failed = self._failures.get(issuer)
        if failed is None or now - failed.at >= cfg.retry:
            try:
                held = await self._refresh(issuer)
            except _FetchFailed as exc:
                failed = _Failure(str(exc), self._clock())
                self._failures.pop(issuer, None)
                self._failures[issuer] = failed  # last in the (insertion-ordered) table
                while len(self._failures) > _MAX_FAILURES:
                    del self._failures[next(iter(self._failures))]
                _log.warning("cannot fetch the keys of issuer %s: %s", issuer, exc)
            else:
                return _pick(issuer, held, kid)
        held = self._sets.get(issuer)
        if held is None and cfg.cache_dir is not None:
            held = await asyncio.to_thread(self._read_cache, issuer)
        if held is not None and self._clock() - held.fetched < cfg.lifetime:
            return _pick(issuer, held, kid)  # the issuer is down: the keys it had still serve
        assert failed is not None
        ago = int(self._clock() - failed.at)
        raise IssuerUnavailable(
            f"the keys of issuer {shown(issuer, 120)} cannot be had: {failed.reason} "
            f"({ago} s ago; asked again after {int(cfg.retry)} s)"
        )

    def forget(self, issuer: str | None = None) -> None:
        """Drop the keys and failures held for `issuer` (every issuer: None)."""
        for table in (self._sets, self._failures):
            if issuer is None:
                table.clear()
            else:
                table.pop(issuer, None)

    async def _refresh(self, issuer: str) -> _KeySet:
        future = self._inflight.get(issuer)
        if future is None:
            future = asyncio.ensure_future(self._fetch(issuer))
            self._inflight[issuer] = future

            def done(f: asyncio.Future[_KeySet]) -> None:
                self._inflight.pop(issuer, None)
                if not f.cancelled():
                    f.exception()  # retrieved: no "never retrieved" warning if nobody waits

            future.add_done_callback(done)
        # Shielded: a caller that goes away does not cancel the others' fetch.
        return await asyncio.shield(future)

    def _ca_files(self) -> tuple[tuple[str, int], ...]:
        cfg = self.settings
        found = list(cfg.ca_files)
        if cfg.ca_dir is not None:
            with contextlib.suppress(OSError):  # no such directory: no CA there
                found += sorted(p for p in cfg.ca_dir.iterdir() if p.suffix in {".crt", ".pem"})
        signature = []
        for path in found:
            try:
                signature.append((str(path), path.stat().st_mtime_ns))
            except OSError:
                continue
        return tuple(signature)

    def _build_context(self) -> tuple[tuple[tuple[str, int], ...], ssl.SSLContext]:
        files = self._ca_files()
        if self._context is not None and self._context[0] == files:
            return self._context
        if self.settings.system_cas:
            context = ssl.create_default_context()
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for path, _ in files:
            context.load_verify_locations(cafile=path)
        return files, context

    async def _ssl_context(self) -> ssl.SSLContext:
        # Reading CA files (and the directory listing) is file I/O: in a thread.
        self._context = await asyncio.to_thread(self._build_context)
        return self._context[1]

    async def _fetch(self, issuer: str) -> _KeySet:
        if not https_url(issuer):
            raise _FetchFailed("the issuer is not an https URL")
        cfg = self.settings
        try:
            context = await self._ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise _FetchFailed(f"cannot load the trusted CAs: {exc}") from None
        try:
            async with (
                asyncio.timeout(cfg.timeout),
                httpx.AsyncClient(
                    verify=context,
                    timeout=cfg.timeout,
                    follow_redirects=False,
                    trust_env=False,  # no proxy from the environment: the issuer itself
                    transport=self._transport,
                ) as client,
            ):
                discovery = await self._json(client, issuer.rstrip("/") + _DISCOVERY)
                jwks_uri = _jwks_uri(issuer, discovery)
                key_set = await self._json(client, jwks_uri)
        except TimeoutError:
            raise _FetchFailed(f"no answer within {cfg.timeout:g} s") from None
        keys = _signing_keys(jwks_uri, key_set)
        held = _KeySet(keys, self._clock())
        self._sets[issuer] = held
        self._failures.pop(issuer, None)
        _log.info("fetched %d key(s) of issuer %s from %s", len(keys), issuer, jwks_uri)
        if cfg.cache_dir is not None:
            doc = {"issuer": issuer, "fetched": held.fetched, "jwks_uri": jwks_uri, **key_set}
            await asyncio.to_thread(self._write_cache, issuer, doc)
        return held

    def _cache_file(self, issuer: str) -> Path:
        assert self.settings.cache_dir is not None
        name = hashlib.sha256(issuer.encode("utf-8")).hexdigest()[:40]
        return self.settings.cache_dir / f"{name}.jwks.json"

    def _write_cache(self, issuer: str, doc: Mapping[str, Any]) -> None:
        path = self._cache_file(issuer)
        try:
            ensure_private_dir(path.parent)
            write_private(path, json.dumps(doc).encode("utf-8"))
        except OSError as exc:
            _log.warning("cannot keep the keys of issuer %s in %s: %s", issuer, path, exc)

    def _read_cache(self, issuer: str) -> _KeySet | None:
        path = self._cache_file(issuer)
        try:
            doc = json.loads(path.read_bytes())
            if not isinstance(doc, dict) or doc.get("issuer") != issuer:
                return None
            fetched = float(doc["fetched"])
            keys = _signing_keys(str(doc.get("jwks_uri")), doc)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, _FetchFailed) as exc:
            _log.warning("the kept keys of issuer %s in %s are not used: %s", issuer, path, exc)
            return None
        held = _KeySet(keys, fetched)
        self._sets[issuer] = held
        _log.info("issuer %s cannot be reached: using its keys kept in %s", issuer, path)
        return held

    async def _json(self, client: httpx.AsyncClient, url: str) -> dict[str, Any]:
        limit = self.settings.max_bytes
        try:
            async with client.stream("GET", url, headers={"Accept": "application/json"}) as r:
                if r.status_code != 200:
                    raise _FetchFailed(f"{url} answered HTTP {r.status_code}")
                body = bytearray()
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise _FetchFailed(f"{url} sent more than {limit} bytes")
        except httpx.TimeoutException:
            raise _FetchFailed(f"{url}: no answer within {self.settings.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise _FetchFailed(f"{url}: {type(exc).__name__}: {exc or 'no detail'}") from None
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _FetchFailed(f"{url} sent no JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise _FetchFailed(f"{url} sent no JSON object")
        return doc


def _jwks_uri(issuer: str, discovery: Mapping[str, Any]) -> str:
    named = discovery.get("issuer")
    if named != issuer:
        # OIDC Discovery 4.3: a document naming another issuer is not this one's.
        raise _FetchFailed(f"its discovery document names the issuer {shown(named, 120)}")
    uri = discovery.get("jwks_uri")
    if not isinstance(uri, str) or not https_url(uri):
        raise _FetchFailed(f"its discovery document's jwks_uri {shown(uri, 120)} is no https URL")
    return uri


def _signing_keys(uri: str, key_set: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    entries = key_set.get("keys")
    if not isinstance(entries, list):
        raise _FetchFailed(f"{uri} is no JWK set (no list of keys)")
    keys: dict[str, jwt.PyJWK] = {}
    problems: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid", "")
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError as exc:
            problems.append(f"{shown(kid)}: {exc}")
            continue
        if key.algorithm_name not in ISSUER_ALGORITHMS:
            problems.append(f"{shown(kid)}: {key.algorithm_name} is no public-key algorithm")
            continue
        keys[kid if isinstance(kid, str) else ""] = key
    if not keys:
        detail = "; ".join(problems[:3]) or "it lists none"
        raise _FetchFailed(f"{uri} holds no usable signing key ({detail})")
    return keys


def _pick(issuer: str, held: _KeySet, kid: str | None) -> jwt.PyJWK:
    if kid is None:
        if len(held.keys) == 1:
            return next(iter(held.keys.values()))
        raise UnknownKey(
            f"the token names no key (kid) and issuer {shown(issuer, 120)} has {len(held.keys)}"
        )
    try:
        return held.keys[kid]
    except KeyError:
        have = ", ".join(sorted(shown(k) for k in held.keys))
        raise UnknownKey(
            f"issuer {shown(issuer, 120)} has no key {shown(kid)} (its keys: {have})"
        ) from None
