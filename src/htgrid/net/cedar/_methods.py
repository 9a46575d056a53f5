"""CEDAR's authentication methods, server side: who a client is.

The client sends the bitmask of the methods it will try; the server answers the one it
picks (0: none), and that method's exchange runs; a method that fails is dropped and the
client tries the next. htgrid takes:

- TOKEN (IDTOKENS): the client sends its token without the signature, and proves it holds
  the signature this daemon computes with the pool's key (`_auth`: AKEP2 with HMAC-SHA1
  over HKDF keys); the token's claims are then the HTTPS side's to judge (`verify`:
  issuer, times, revocations, the map file). A forged token fails the proof.
- FS: the client makes a directory this server names under FS_LOCAL_DIR; its owner is the
  client (from this host only, with the client's view of the daemon's address appended:
  channel binding).
- SSL: TLS inside CEDAR messages (`_auth_ssl`) with the daemon's certificate; a client
  certificate must be the pool CA's, and its subject is mapped by the map file's SSL
  lines; a client without one is `unauthenticated`, where the pool lets anyone read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from htgrid.errors import HTGridError
from htgrid.net._errors import CedarError
from htgrid.net.cedar._auth import NONCE_BYTES, FsProof, token_hk, token_hkt, token_ka
from htgrid.net.cedar._auth_ssl import SslFailed, ssl_exchange, subject_oneline
from htgrid.net.cedar._codec import Reader, Writer
from htgrid.net.cedar._policy import Level
from htgrid.net.security import AuditEvent, AuthError, Principal

__all__ = ["Authenticator", "CedarRefused", "CedarSecurity", "Link", "loopback", "offered_methods"]

_TOKEN: Final = 2048
_FS: Final = 4
_SSL: Final = 256
_METHOD_BITS: Final = {"TOKEN": _TOKEN, "IDTOKENS": _TOKEN, "FS": _FS, "SSL": _SSL}
_AUTH_OK: Final = 0
_AUTH_ERROR: Final = -1


class CedarRefused(CedarError):
    """A client refused (not authenticated, not authorized): logged, connection ended."""


@dataclass(frozen=True, slots=True)
class CedarSecurity:
    """How a daemon knows its CEDAR clients: the pool's tokens and local users."""

    trust_domain: str
    key_names: Callable[[], list[str]]  # the signing keys held (IssuerKeys)
    jwt_key: Callable[[str], bytes]  # a key's HMAC key, by name (kid)
    verify: Callable[[str], Awaitable[Principal]]  # a full token -> who, or AuthError
    admit: Callable[[Principal, str, str], None]  # DENY_<level> for a host
    local_user: Callable[[str], Principal]  # FS: a local user's principal
    still_valid: Callable[[Principal], None]  # AuthError once revoked or expired
    anonymous: Principal  # who a client is when it need not authenticate
    read_authentication: Level = Level.REQUIRED  # SEC_READ_AUTHENTICATION
    audit: Callable[[AuditEvent], None] | None = None  # the audit log's writer (blocking)
    fs_dir: str = "/tmp"  # FS_LOCAL_DIR
    # SSL: the daemon's TLS context (its certificate, the CAs its clients' are from),
    # None when it has none; and who a certificate's subject is (None: it sent none).
    tls: Callable[[], ssl.SSLContext | None] | None = None
    ssl_user: Callable[[str | None], Principal] | None = None
    session_duration: int = 3600  # SEC_DEFAULT_SESSION_DURATION: the longest session (s)
    # NETWORK_MAX_PENDING_CONNECTS: connections the CEDAR side holds at once (the rest
    # are closed as they come)
    max_connections: int = 1000


class _MethodFailed(HTGridError):
    """One authentication method failed; the client may try another."""


class Link(Protocol):
    """The connection an exchange runs on."""

    @property
    def local(self) -> str:
        """This daemon's end, `ip:port`."""

    async def receive(self, timeout: float) -> Reader: ...
    async def send(self, payload: bytes) -> None: ...
    async def send_int(self, value: int) -> None: ...
    def out(self) -> Writer: ...
    async def refusing(self, exc: CedarRefused) -> None:
        """Record the refusal (the audit log) before the client is told of it."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _token_header(unsigned: str) -> dict[str, object]:
    head = unsigned.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise CedarRefused("TOKEN: the token's header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise CedarRefused("TOKEN: the token's header is not a JSON object")
    return header


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def offered_methods(offered: str, host: str, *, with_ssl: bool = False) -> list[str]:
    """The methods of the client's list this server takes, in its order of preference:
    TOKEN (the pool's IDTOKENS), then FS for a client on this host, then SSL (`with_ssl`:
    when this daemon has a certificate)."""
    names = [m.strip().upper() for m in offered.split(",") if m.strip()]
    ours = [m for m in names if m in ("TOKEN", "IDTOKENS")]
    if "FS" in names and loopback(host):
        ours.append("FS")
    if "SSL" in names and with_ssl:
        ours.append("SSL")
    if not ours:
        raise CedarRefused(
            f"no authentication method in common: the client offers {offered!r}; this "
            "daemon takes TOKEN (IDTOKENS, the pool's tokens), FS from this host"
            + (" and SSL" if with_ssl else "")
        )
    bits = {_METHOD_BITS[m]: m for m in reversed(ours)}  # the first name of each method
    return [m for m in ours if bits[_METHOD_BITS[m]] == m]


class Authenticator:
    """The authentication exchanges of one connection."""

    def __init__(self, link: Link, security: CedarSecurity, timeout: float) -> None:
        self.link = link
        self.security = security
        self.timeout = timeout

    async def authenticate(self, methods: list[str]) -> Principal:
        """Who the client is, by the first of `methods` it proves; CedarRefused when
        none works (each failure's reason in the message)."""
        reasons: list[str] = []
        tried = 0
        timeout = self.timeout
        while True:
            r = await self.link.receive(timeout)
            mask = r.int("the client's authentication methods")
            r.done("the authentication methods")
            chosen = next(
                (m for m in methods if mask & _METHOD_BITS[m] and not tried & _METHOD_BITS[m]),
                None,
            )
            if chosen is None:
                why = "; ".join(reasons) or f"no method of {methods} among those it tried ({mask})"
                failed = CedarRefused(f"authentication failed: {why}")
                await self.link.refusing(failed)
                await self.link.send_int(0)
                raise failed
            await self.link.send_int(_METHOD_BITS[chosen])
            tried |= _METHOD_BITS[chosen]
            try:
                if _METHOD_BITS[chosen] == _TOKEN:
                    return await self._token()
                if _METHOD_BITS[chosen] == _SSL:
                    return await self._ssl()
                return await self._fs()
            except (_MethodFailed, SslFailed) as exc:
                reasons.append(f"{chosen}: {exc}")

    async def _token(self) -> Principal:
        timeout = self.timeout
        r = await self.link.receive(timeout)
        status = r.int("TOKEN's status")
        r.int("the length of the client's name")
        a = r.string_bytes("the client's name") or b""
        unsigned = r.text("the token")
        ra_len = r.int("the length of ra")
        ra = r.raw(ra_len, "ra") if 0 <= ra_len <= NONCE_BYTES else b""
        r.done("TOKEN's first message")
        failure: str | None = None
        principal: Principal | None = None
        ka = b""
        if status != _AUTH_OK:
            failure = "the client has no token for this pool (its TrustDomain and IssuerKeys)"
        elif len(ra) != NONCE_BYTES or not unsigned:
            failure = "the client's first message is incomplete"
        else:
            try:
                principal, signature = await self._verify(unsigned)
                if a.decode("utf-8", "replace") != principal.subject:
                    raise CedarRefused(
                        f"the client names itself {a[:80]!r}, but its token's subject is "
                        f"{principal.subject!r}"
                    )
                ka = token_ka(signature, unsigned.encode("utf-8"))
            except (AuthError, CedarRefused) as exc:
                failure = str(exc)
        w = self.link.out()
        if failure is not None:
            w.int(_AUTH_ERROR).int(0).string("").int(0).string("").int(0).int(0).int(0)
            await self.link.send(w.getvalue())
            await self.link.receive(timeout)  # the client's third message, in error too
            raise _MethodFailed(failure)
        b = b"condor@password"
        rb = secrets.token_bytes(NONCE_BYTES)
        hkt = token_hkt(ka, a, b, ra, rb)
        w.int(_AUTH_OK).int(len(a)).string(a).int(len(b)).string(b)
        w.int(NONCE_BYTES).raw(ra).int(NONCE_BYTES).raw(rb).int(len(hkt)).raw(hkt)
        await self.link.send(w.getvalue())
        r = await self.link.receive(timeout)
        status = r.int("TOKEN's status")
        r.int("the length of the client's name")
        a2 = r.string_bytes("the client's name") or b""
        rb_len = r.int("the length of rb")
        rb2 = r.raw(rb_len, "rb") if 0 <= rb_len <= NONCE_BYTES else b""
        hk_len = r.int("the length of hk")
        hk = r.raw(hk_len, "hk") if 0 <= hk_len <= 64 else b""
        r.done("TOKEN's third message")
        assert principal is not None
        forged = (
            f"TOKEN: token {principal.token_id} of {principal.subject} is forged: it was not "
            f"signed with this pool's key {principal.key_id!r}"
        )
        if status != _AUTH_OK:
            # The client found this daemon's proof wrong: the two signatures differ.
            raise CedarRefused(f"{forged} (the client could not verify this daemon's proof)")
        if a2 != a or not hmac.compare_digest(rb2, rb):
            raise CedarRefused(
                f"TOKEN: the third message of {principal.name} does not match the first"
            )
        if not hmac.compare_digest(hk, token_hk(ka, a, rb)):
            # No message says so: the client learns of it when the connection closes.
            raise CedarRefused(forged)
        return principal

    async def _verify(self, unsigned: str) -> tuple[Principal, bytes]:
        header = _token_header(unsigned)
        kid = header.get("kid")
        if header.get("alg") != "HS256" or not isinstance(kid, str):
            raise CedarRefused(
                f"TOKEN: a token signed {header.get('alg')!r} with key {kid!r}: this pool's "
                "tokens are HS256 and name their key"
            )
        signature = hmac.new(self.security.jwt_key(kid), unsigned.encode(), hashlib.sha256).digest()
        principal = await self.security.verify(f"{unsigned}.{_b64url(signature)}")
        return principal, signature

    async def _fs(self) -> Principal:
        timeout = self.timeout
        base = os.path.join(self.security.fs_dir, f"FS_{secrets.token_hex(12)}_")
        await self.link.send(self.link.out().string(base).getvalue())
        r = await self.link.receive(timeout)
        status = r.int("FS's status")
        ext = r.text("FS's channel binding") if r.remaining else ""
        r.done("FS's answer")
        try:
            if status != 0:
                raise _MethodFailed("the client could not make the directory")
            if "/" in ext or (ext not in ("", self.link.local) and not self._same_endpoint(ext)):
                raise _MethodFailed(
                    f"the directory names {ext!r}, not this daemon ({self.link.local})"
                )
            try:
                user = await asyncio.to_thread(FsProof(base + ext).owner)
            except CedarError as exc:
                raise _MethodFailed(str(exc)) from None
            principal = self.security.local_user(user)
        except _MethodFailed:
            await self.link.send_int(-1)
            raise
        await self.link.send_int(0)
        return principal

    async def _ssl(self) -> Principal:
        make, user = self.security.tls, self.security.ssl_user
        context = await asyncio.to_thread(make) if make is not None else None
        if user is None:
            context = None

        def check(der: bytes | None) -> Principal:
            assert user is not None
            try:
                return user(subject_oneline(der) if der is not None else None)
            except AuthError as exc:
                raise SslFailed(str(exc)) from None

        return await ssl_exchange(self.link, context, check, self.timeout)

    def _same_endpoint(self, ext: str) -> bool:
        # Behind a shared port the client appends the daemon's ID: `ip:port?sock=ID`.
        host, _, port = ext.partition("?")[0].rpartition(":")
        mine_host, _, mine_port = self.link.local.rpartition(":")
        return port == mine_port and loopback(host.strip("[]")) and loopback(mine_host)
