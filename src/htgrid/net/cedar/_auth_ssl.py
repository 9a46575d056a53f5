"""CEDAR's SSL authentication, server side: TLS carried inside CEDAR messages.

The exchange is HTCondor's `Condor_Auth_SSL` step for step (both sides drive OpenSSL
through memory BIOs and must agree on whose turn it is):

1. the server sends its status (`int`, 0 = ready), the client answers with its own;
2. the TLS handshake, in strictly alternating messages `int status, int length, bytes`
   (the bytes are whatever TLS has to send): the server receives on even rounds and
   sends on odd ones, until both say HOLDING (done) or one says QUITTING;
3. the server checks the client's certificate (`check`: who it is, or a refusal), and
   says QUITTING with no bytes if it refuses;
4. the server writes 256 random bytes through TLS (HTCondor's legacy session key; the
   ECDH key is what encrypts the session), sending on even rounds, until both HOLD.

The client's certificate (if it sent one) is verified by TLS against the pool's CA: one
from another CA fails the handshake. Its subject is named as OpenSSL's
`X509_NAME_oneline` does (`/O=htgrid/CN=alice`), the name the map file's SSL lines match.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import ssl
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from cryptography import x509
from cryptography.x509.oid import NameOID

from htgrid.errors import HTGridError
from htgrid.net._errors import CedarError
from htgrid.net.cedar._codec import Reader, Writer

__all__ = ["SslFailed", "ssl_exchange", "subject_oneline"]

MAX_TLS_BYTES: Final = 1 << 20  # AUTH_SSL_BUF_SIZE: the most one message carries
MAX_ROUNDS: Final = 64  # a TLS handshake takes 4 or 5; past this the client stalls us
KEY_BYTES: Final = 256  # AUTH_SSL_SESSION_KEY_LEN
BUDGET: Final = 3  # the whole exchange may take this many messages' timeouts

_T = TypeVar("_T")

# OpenSSL's short names (OBJ_nid2sn) of the attributes a DN usually holds.
_SHORT: Final = {
    NameOID.COUNTRY_NAME: "C",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.LOCALITY_NAME: "L",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.COMMON_NAME: "CN",
    NameOID.EMAIL_ADDRESS: "emailAddress",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
    NameOID.SERIAL_NUMBER: "serialNumber",
    NameOID.GIVEN_NAME: "GN",
    NameOID.SURNAME: "SN",
    NameOID.TITLE: "title",
}


class Link(Protocol):
    """The connection the exchange runs on (`_methods.Link`)."""

    async def receive(self, timeout: float) -> Reader: ...
    async def send(self, payload: bytes) -> None: ...
    async def send_int(self, value: int) -> None: ...
    def out(self) -> Writer: ...


class Status(enum.IntEnum):
    """Condor_Auth_SSL's statuses (condor_auth_ssl.h)."""

    ERROR = -1
    OK = 0
    SENDING = 1
    RECEIVING = 2
    QUITTING = 3
    HOLDING = 4


class SslFailed(CedarError):
    """The SSL method failed; the client may try another one."""


def subject_oneline(der: bytes) -> str:
    """A certificate's subject as `X509_NAME_oneline` writes it: `/O=htgrid/CN=alice`."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise SslFailed(f"the client's certificate cannot be read: {exc}") from None
    parts = []
    for attribute in cert.subject:
        name = _SHORT.get(attribute.oid, attribute.oid.dotted_string)
        value = attribute.value if isinstance(attribute.value, str) else attribute.value.hex()
        escaped = "".join(c if " " <= c < "\x7f" else f"\\x{ord(c):02X}" for c in value)
        parts.append(f"/{name}={escaped}")
    return "".join(parts)


class _Tunnel:
    """One TLS server connection over CEDAR messages."""

    def __init__(self, link: Link, context: ssl.SSLContext, timeout: float) -> None:
        self.link = link
        self.timeout = timeout
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.error = ""
        # A client slow at each message is still cut off, as a silent one is.
        self.deadline = asyncio.get_running_loop().time() + BUDGET * timeout

    async def send(self, status: Status, *, tls_bytes: bool = True) -> None:
        data = self.outgoing.read(MAX_TLS_BYTES) if tls_bytes else b""
        w = self.link.out().int(status).int(len(data)).raw(data)
        await self.link.send(w.getvalue())

    async def receive(self) -> Status:
        left = self.deadline - asyncio.get_running_loop().time()
        budget = f"SSL: the exchange took more than {BUDGET * self.timeout:g} s"
        if left <= 0:
            raise CedarError(budget)
        try:
            r = await self.link.receive(min(self.timeout, left))
        except CedarError:
            if left < self.timeout:
                raise CedarError(budget) from None
            raise
        status = r.int("SSL's status")
        length = r.int("the length of SSL's bytes")
        if not 0 <= length <= MAX_TLS_BYTES:
            raise CedarError(f"SSL: the client sends {length} bytes of TLS, not 0 to 1 MiB")
        data = r.raw(length, "SSL's bytes")
        r.done("SSL's message")
        if data:
            self.incoming.write(data)
        try:
            return Status(status)
        except ValueError:
            raise CedarError(f"SSL: the client's status {status} is none of SSL's") from None

    def step(self, action: Callable[[], _T]) -> Status:
        """One try of a TLS operation: HOLDING when it is done, RECEIVING when TLS wants
        the peer's bytes, QUITTING (the reason kept) when it failed."""
        try:
            action()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return Status.RECEIVING
        except ssl.SSLError as exc:
            self.error = exc.reason or str(exc)
            return Status.QUITTING
        return Status.HOLDING

    async def handshake(self) -> None:
        server = client = Status.RECEIVING
        for round_ in range(MAX_ROUNDS):
            if server != Status.HOLDING:
                server = self.step(self.tls.do_handshake)
            if round_ % 2 == 0:
                client = await self.receive()
            else:
                await self.send(server)
            if client == Status.ERROR:
                client = Status.QUITTING
            if server == Status.QUITTING:
                if round_ % 2 == 0:  # it heard nothing of it: tell it (HTCondor would not)
                    await self.send(Status.QUITTING)
                raise SslFailed(f"the TLS handshake failed: {self.error}")
            if client == Status.QUITTING:
                raise SslFailed("the client gave up the TLS handshake")
            if server == client == Status.HOLDING:
                return
        raise SslFailed(f"the TLS handshake took more than {MAX_ROUNDS} messages")

    async def send_key(self) -> None:
        key = secrets.token_bytes(KEY_BYTES)
        server = client = Status.RECEIVING
        for round_ in range(MAX_ROUNDS):
            if server != Status.HOLDING:
                server = self.step(lambda: self.tls.write(key))
            if round_ % 2 == 0:
                await self.send(server)
            else:
                client = await self.receive()
            if server == Status.QUITTING:
                raise SslFailed(f"sending the key through TLS failed: {self.error}")
            if client in (Status.QUITTING, Status.ERROR):
                raise SslFailed(
                    "the client gave up after the TLS handshake: it did not take this "
                    "daemon's certificate (its AUTH_SSL_CLIENT_CAFILE, or the host name it "
                    "connected to: the certificate names localhost and this host)"
                )
            if server == client == Status.HOLDING:
                return
        raise SslFailed(f"sending the key took more than {MAX_ROUNDS} messages")


async def ssl_exchange(
    link: Link,
    context: ssl.SSLContext | None,
    check: Callable[[bytes | None], _T],
    timeout: float,
) -> _T:
    """Run SSL authentication on `link` with `context` (None: this daemon cannot, and
    says so); `check` turns the client's certificate (DER, None when it sent none) into
    who it is, or raises HTGridError to refuse it. SslFailed when the method fails."""
    await link.send_int(Status.OK if context is not None else Status.ERROR)
    r = await link.receive(timeout)
    client = r.int("SSL's opening status")
    r.done("SSL's opening status")
    if context is None:
        raise SslFailed("this daemon has no certificate for SSL")
    if client != Status.OK:
        raise SslFailed("the client cannot do SSL (its AUTH_SSL_CLIENT_* settings?)")
    tunnel = _Tunnel(link, context, timeout)
    await tunnel.handshake()
    try:
        # (The map file is read, and stat'ed for changes, off the event loop.)
        who = await asyncio.to_thread(check, tunnel.tls.getpeercert(binary_form=True))
    except HTGridError as exc:
        await tunnel.send(Status.QUITTING, tls_bytes=False)
        raise SslFailed(str(exc)) from None
    await tunnel.send_key()
    return who
