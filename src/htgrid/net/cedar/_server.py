"""A CEDAR server: the security handshake, then the daemon's commands, on one connection.

    service = CedarService("collector", commands, security)
    await service.serve(reader, writer)       # one accepted connection, to its end

A connection goes through the phases of `Phase` (one transition table): the client's
DC_AUTHENTICATE ad either resumes a session this daemon gave it (`UseSession`), or
negotiates a new one: the policy ad answered (`_policy.reconcile`), the client
authenticated (TOKEN: the pool's IDTOKENS; FS: a local user, from this host only), the
ECDH key derived and AES-GCM on both ways, the command authorized with the same levels
as the HTTPS side (the principal's authorizations, DENY_*), and the post-auth ad sent.
Then the command's handler runs; further commands may follow on the same socket
(`int command` + payload in one message, as `Collector.advertise` sends its ads) until
DC_NOP or the client closes.

Every refusal and protocol error is logged with the peer and the reason, and ends that
connection only; tokens are never logged.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NoReturn

from htgrid import __version__
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net._errors import CedarError
from htgrid.net.cedar._ads import Literal, literal_lines, parse_ad
from htgrid.net.cedar._auth import KeyExchange
from htgrid.net.cedar._codec import Channel, Reader, Writer
from htgrid.net.cedar._methods import (
    Authenticator,
    CedarRefused,
    CedarSecurity,
    offered_methods,
)
from htgrid.net.cedar._policy import Level, Session, Sessions, reconcile
from htgrid.net.security import AuditEvent, AuthError, Principal

__all__ = [
    "DC_AUTHENTICATE",
    "DC_NOP",
    "DC_SEC_QUERY",
    "REMOTE_VERSION",
    "CedarCall",
    "CedarRefused",
    "CedarSecurity",
    "CedarService",
    "Command",
    "Phase",
]

_log = logging.getLogger("htgrid.net.cedar")

DC_AUTHENTICATE: Final = 60010
DC_NOP: Final = 60011
DC_SEC_QUERY: Final = 60040
#: What this server says it is: HTCondor's version form, so that clients gate on it
#: (resume replies, private attributes) as for a 25.0 daemon.
REMOTE_VERSION: Final = f"$CondorVersion: 25.0.0 2025-01-01 BuildID: htgrid-{__version__} $"
HANDSHAKE_TIMEOUT: Final = 20.0  # seconds for each message of the handshake
COMMAND_TIMEOUT: Final = 300.0  # seconds for a command's next message
MAX_DURATION: Final = 86_400  # the longest session granted (s)


class Phase(enum.Enum):
    HELLO = "hello"  # waiting for DC_AUTHENTICATE
    NEGOTIATED = "negotiated"  # the policy answered, authentication next
    AUTHENTICATED = "authenticated"  # who the client is is known, key installed
    RESUMED = "resumed"  # a session's key installed again
    SERVING = "serving"  # a command's handler runs
    CLOSED = "closed"


_NEXT: Final[Mapping[Phase, frozenset[Phase]]] = {
    Phase.HELLO: frozenset({Phase.NEGOTIATED, Phase.RESUMED, Phase.CLOSED}),
    Phase.NEGOTIATED: frozenset({Phase.AUTHENTICATED, Phase.CLOSED}),
    Phase.AUTHENTICATED: frozenset({Phase.SERVING, Phase.CLOSED}),
    Phase.RESUMED: frozenset({Phase.SERVING, Phase.CLOSED}),
    Phase.SERVING: frozenset({Phase.SERVING, Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}


class _Closed(Exception):
    """The peer closed the connection."""


Handler = Callable[["CedarCall"], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Command:
    """A command the daemon answers: its number, the authorization it needs, its
    handler, and whether a payload follows the handshake."""

    number: int
    name: str
    level: str
    handler: Handler
    payload: bool = True


@dataclass(slots=True)
class CedarCall:
    """One command being served: who asked, and the connection to answer on."""

    command: Command
    principal: Principal
    peer: str
    _conn: _Connection = field(repr=False)
    _first: Reader | None = field(default=None, repr=False)

    async def receive(self, timeout: float = COMMAND_TIMEOUT) -> Reader:
        """The command's next message (the rest of the first one, for a command that
        came after another on the same socket)."""
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await self._conn.receive(timeout)

    def writer(self) -> Writer:
        return Writer(self._conn.channel.encrypted)

    async def send(self, writer: Writer) -> None:
        await self._conn.send(writer.getvalue())

    async def send_ad(self, values: Mapping[str, Literal]) -> None:
        await self.send(self.writer().lines(literal_lines(values)))


def _text(ad: ClassAd, name: str) -> str:
    value = ad.get(name)
    return value if isinstance(value, str) else ""


def _number(ad: ClassAd, name: str, default: int) -> int:
    value = ad.get(name)
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return default


class CedarService:
    """A daemon's commands over CEDAR, and its sessions."""

    def __init__(
        self,
        name: str,
        commands: Iterable[Command],
        security: CedarSecurity,
        *,
        clock: Callable[[], float] = time.time,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.name = name
        self.commands = {c.number: c for c in commands}
        self.security = security
        self.sessions = Sessions(clock, f"{name}:{os.getpid()}")
        self.handshake_timeout = handshake_timeout
        self._clock = clock

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one accepted connection until its client is done (or refused)."""
        conn = _Connection(self, reader, writer)
        try:
            await conn.run()
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


class _Connection:
    def __init__(
        self, service: CedarService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.service = service
        self.security = service.security
        self.reader = reader
        self.writer = writer
        self.channel = Channel()
        self.phase = Phase.HELLO
        self.principal: Principal | None = None  # once known
        self.command = "DC_AUTHENTICATE"  # what the client asked for, as the audit says
        self._refusal_audited = False
        peer = writer.get_extra_info("peername") or ("?", 0)
        local = writer.get_extra_info("sockname") or ("?", 0)
        self.host = str(peer[0])
        self.peer = f"{peer[0]}:{peer[1]}"
        self.local = f"{local[0]}:{local[1]}"

    def _to(self, phase: Phase) -> None:
        if phase not in _NEXT[self.phase]:
            raise CedarError(f"the connection cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    # -- messages -----------------------------------------------------------------------

    async def receive(self, timeout: float) -> Reader:
        """The next whole message, within `timeout` seconds for all of it: a client
        trickling bytes cannot hold the connection longer than a silent one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            message = self.channel.next_message()
            if message is not None:
                return Reader(message, self.channel.encrypted)
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                data = await asyncio.wait_for(self.reader.read(1 << 16), left)
            except TimeoutError:
                raise CedarError(
                    f"no whole message from the client in {timeout:g} s ({self.phase.value}; "
                    f"{self.channel.buffered} bytes of it came)"
                ) from None
            if not data:
                raise _Closed
            self.channel.receive_data(data)

    async def send(self, payload: bytes) -> None:
        self.writer.write(self.channel.send_message(payload))
        await self.writer.drain()

    def out(self) -> Writer:
        return Writer(self.channel.encrypted)

    async def send_ad(self, values: Mapping[str, Literal]) -> None:
        await self.send(self.out().lines(literal_lines(values)).getvalue())

    async def send_int(self, value: int) -> None:
        await self.send(self.out().int(value).getvalue())

    # -- the connection's life ----------------------------------------------------------

    async def run(self) -> None:
        where = f"CEDAR client {self.peer} of the {self.service.name}"
        try:
            await self._run()
        except _Closed:
            if self.phase not in (Phase.SERVING, Phase.CLOSED):
                _log.info(
                    "%s closed the connection during the handshake (%s)", where, self.phase.value
                )
        except CedarRefused as exc:
            _log.warning("%s refused: %s", where, exc)
            await self.refusing(exc)
        except CedarError as exc:
            _log.warning("%s: protocol error: %s", where, exc)
        except (ConnectionError, OSError) as exc:
            _log.info("%s: connection lost: %s", where, exc)
        except HTGridError as exc:
            _log.warning("%s: refused: %s", where, exc)
        except Exception:
            # A defect here, not the client's: its connection ends, the daemon goes on.
            _log.exception("%s: failed while %s", where, self.phase.value)
        self.phase = Phase.CLOSED

    async def _run(self) -> None:
        timeout = self.service.handshake_timeout
        r = await self.receive(timeout)
        number = r.int("the command")
        if number != DC_AUTHENTICATE:
            raise CedarRefused(
                f"command {number} without the security handshake: this daemon requires "
                "authentication (the client's SEC_CLIENT_NEGOTIATION must not be NEVER)"
            )
        ad = parse_ad(r.lines(limit=100, what="the client's security ad"), "the security ad")
        r.done("the client's security ad")
        if _text(ad, "UseSession").upper() == "YES":
            started = await self._resume(ad)
        else:
            started = await self._negotiate(ad)
        if started is None:
            return
        session, command = started
        call = CedarCall(command, session.principal, self.peer, self)
        await self._serve(call)

    async def _serve(self, call: CedarCall) -> None:
        while True:
            self._to(Phase.SERVING)
            if call.command.level not in ("READ", "ALLOW"):
                await self._audit(True)
            await call.command.handler(call)
            try:
                r = await self.receive(COMMAND_TIMEOUT)
            except _Closed:
                return
            number = r.int("the next command")
            if number == DC_NOP:
                r.done("DC_NOP")
                continue
            command = self.service.commands.get(number)
            if command is None:
                raise CedarError(f"unknown command {number} after {call.command.name}")
            self._authorize(call.principal, command)
            call = CedarCall(command, call.principal, self.peer, self, r)

    # -- resuming a session -------------------------------------------------------------

    async def _resume(self, ad: ClassAd) -> tuple[Session, Command] | None:
        sid = _text(ad, "Sid")
        answer = ad.get("ResumeResponse") is True
        session = self.service.sessions.get(sid)
        number = _number(ad, "Command", -1)
        if session is None:
            if answer:
                await self.send_ad({"ReturnCode": "SID_NOT_FOUND"})
            _log.info(
                "CEDAR client %s: session %s unknown (expired, or this daemon restarted)",
                self.peer,
                sid[:80],
            )
            return None
        try:
            self.security.still_valid(session.principal)
        except AuthError as exc:
            self.service.sessions.drop(sid)
            ended = CedarRefused(f"session of {session.principal.name} ended: {exc}")
            await self._deny(ended, "SID_NOT_FOUND" if answer else None)
        command = self.service.commands.get(number)
        self.principal = session.principal
        self.command = command.name if command is not None else f"command {number}"
        if command is None or number not in session.commands:
            uncovered = CedarRefused(f"command {number} is not one session {sid[:80]} covers")
            await self._deny(uncovered, "SID_NOT_FOUND" if answer else None)
        if answer:
            nonce = base64.b64encode(secrets.token_bytes(33)).decode("ascii")
            await self.send_ad(
                {"ReturnCode": "AUTHORIZED", "RemoteVersion": REMOTE_VERSION, "Nonce": nonce}
            )
        self._to(Phase.RESUMED)
        if session.key is not None:
            self.channel.start_aes(session.key)
        self._authorize(session.principal, command)
        return session, command

    # -- a new session ------------------------------------------------------------------

    async def _negotiate(self, ad: ClassAd) -> tuple[Session, Command] | None:
        number = _number(ad, "Command", -1)
        wanted = number
        if number in (DC_AUTHENTICATE, DC_SEC_QUERY):
            wanted = _number(ad, "AuthCommand", -1)
        command = self.service.commands.get(wanted)
        self.command = command.name if command is not None else f"command {wanted}"
        auth_level = Level.of(
            _text(ad, "AuthenticationNew") or _text(ad, "Authentication"), Level.OPTIONAL
        )
        # Reading may go without, when the pool says so (SEC_READ_AUTHENTICATION).
        reading = command is not None and command.level == "READ"
        ours = self.security.read_authentication if reading else Level.REQUIRED
        authenticate = reconcile("Authentication", auth_level, ours)
        encrypt = reconcile(
            "Encryption", Level.of(_text(ad, "Encryption"), Level.OPTIONAL), Level.PREFERRED
        )
        integrity = reconcile(
            "Integrity", Level.of(_text(ad, "Integrity"), Level.OPTIONAL), Level.PREFERRED
        )
        their_key = _text(ad, "ECDHPublicKey")
        crypto = [m.strip().upper() for m in _text(ad, "CryptoMethods").split(",")]
        aes = bool(their_key) and "AES" in crypto
        if (encrypt or integrity) and not aes:
            raise CedarRefused(
                "the session must be encrypted, and the client offers no AES with an ECDH "
                f"key (CryptoMethods {_text(ad, 'CryptoMethods')!r})"
            )
        methods = (
            offered_methods(
                _text(ad, "AuthMethods"),
                self.host,
                with_ssl=self.security.tls is not None and self.security.ssl_user is not None,
            )
            if authenticate
            else []
        )
        longest = min(self.security.session_duration, MAX_DURATION)
        duration = max(0, min(_number(ad, "SessionDuration", 60), longest))
        lease = max(0, min(_number(ad, "SessionLease", 3600), MAX_DURATION))
        exchange = KeyExchange() if aes else None
        response: dict[str, Literal] = {
            "Authentication": "YES" if authenticate else "NO",
            "Encryption": "YES" if aes else "NO",
            "Integrity": "YES" if aes else "NO",
            "Enact": "YES",
            "SessionDuration": str(duration),
            "SessionLease": lease,
            "RemoteVersion": REMOTE_VERSION,
            "TrustDomain": self.security.trust_domain,
            "IssuerKeys": ",".join(self.security.key_names()),
            "NegotiatedSession": True,
        }
        if methods:
            response.update(AuthMethodsList=",".join(methods), AuthMethods=methods[0])
        if exchange is not None:
            response.update(
                CryptoMethods="AES", CryptoMethodsList="AES", ECDHPublicKey=exchange.public()
            )
        await self.send_ad(response)
        self._to(Phase.NEGOTIATED)
        if authenticate:
            principal = await Authenticator(
                self, self.security, self.service.handshake_timeout
            ).authenticate(methods)
            await self.send_int(0)  # no key follows: ECDH gave it
        else:
            principal = self.security.anonymous
        key = exchange.session_key(their_key) if exchange is not None else None
        if key is not None:
            self.channel.start_aes(key)
        self._to(Phase.AUTHENTICATED)
        if command is None:
            unknown = CedarRefused(f"command {wanted}: the {self.service.name} has no such command")
            await self._deny(unknown, "CMD_NOT_FOUND")
        if number == DC_SEC_QUERY:
            await self._sec_query(principal, command)
            return None
        try:
            self._authorize(principal, command)
        except CedarRefused as exc:
            await self._deny(exc, "DENIED")
        allowed = frozenset(
            c.number for c in self.service.commands.values() if self._allowed(principal, c)
        )
        sid = self.service.sessions.new_id()
        post: dict[str, Literal] = {
            "ReturnCode": "AUTHORIZED",
            "Sid": sid,
            "ValidCommands": ",".join(str(n) for n in sorted(allowed)),
        }
        if authenticate:
            post.update(User=principal.name, TriedAuthentication=True)
        await self.send_ad(post)
        session = self.service.sessions.add(sid, key, principal, allowed, duration)
        _log.info(
            "CEDAR client %s known as %s (%s) for %s",
            self.peer,
            principal.name,
            principal.method,
            command.name,
        )
        if number == DC_AUTHENTICATE:
            return None  # a session made for later use (its command goes by UDP)
        return session, command

    async def _sec_query(self, principal: Principal, command: Command) -> None:
        sid = self.service.sessions.new_id()
        await self.send_ad(
            {
                "ReturnCode": "AUTHORIZED",
                "Sid": sid,
                "ValidCommands": str(command.number),
                "User": principal.name,
                "TriedAuthentication": True,
            }
        )
        await self.send_ad({"AuthorizationSucceeded": self._allowed(principal, command)})
        return None

    def _allowed(self, principal: Principal, command: Command) -> bool:
        asked = self.principal, self.command  # what the audit names: not this check's
        try:
            self._authorize(principal, command)
        except CedarRefused:
            return False
        finally:
            self.principal, self.command = asked
        return True

    async def refusing(self, exc: CedarRefused) -> None:
        """The refusal's audit line, once, before the client is told of it: a client told
        no finds it in the audit log (as an accepted command's is before its answer)."""
        if not self._refusal_audited:
            self._refusal_audited = True
            await self._audit(False, f"{type(exc).__name__}: {exc}")

    async def _deny(self, exc: CedarRefused, code: str | None) -> NoReturn:
        """Refuse with `exc`: its audit line, then the ReturnCode `code` (None: no answer)."""
        await self.refusing(exc)
        if code is not None:
            await self.send_ad({"ReturnCode": code})
        raise exc

    async def _audit(self, accepted: bool, reason: str | None = None) -> None:
        """The audit log's line for a refusal, or a command that is not a read."""
        record = self.security.audit
        if record is None:
            return
        event = AuditEvent(
            accepted, f"CEDAR {self.command}", self.peer, None, self.principal, None, reason
        )
        with contextlib.suppress(Exception):  # a log, not a gate (it says why itself)
            await asyncio.to_thread(record, event)

    def _authorize(self, principal: Principal, command: Command) -> None:
        self.principal, self.command = principal, command.name
        if not principal.allows(command.level):
            granted = ", ".join(sorted(principal.authorizations)) or "nothing"
            raise CedarRefused(
                f"{principal.name} ({principal.method}) may not {command.name}: it needs "
                f"{command.level}, and {principal.name} has {granted}"
            )
        try:
            self.security.admit(principal, command.level, self.host)
        except AuthError as exc:
            raise CedarRefused(str(exc)) from None

    # -- authentication -----------------------------------------------------------------
