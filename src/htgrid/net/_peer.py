"""Who is calling: the kernel's word for a local caller, never the request's.

On the Unix socket the daemon asks the kernel for the connecting process's credentials
(SO_PEERCRED) when the connection is made, and the user name comes from that uid. A
client cannot claim to be someone else: nothing in the request is believed. (Remote
callers, over TLS with tokens, will get their own authenticator; the routes do not care
which one made the identity.)
"""

from __future__ import annotations

import asyncio
import pwd
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request

from htgrid.net._guard import GuardedProtocol
from htgrid.queue import Identity, NotAuthorized

if TYPE_CHECKING:
    from htgrid.net.security import Gatekeeper, Principal

__all__ = [
    "PEER_CERT_KEY",
    "PEER_KEY",
    "Authenticator",
    "PeerCertProtocol",
    "PeerCertificate",
    "PeerCredProtocol",
    "PeerCredentials",
    "certificate_caller",
    "peer_credentials",
    "peercred_identity",
]

PEER_KEY: Final = "htgrid.peer"
PEER_CERT_KEY: Final = "htgrid.peer_cert"
_UCRED: Final = struct.Struct("3i")  # struct ucred: pid, uid, gid
SUPER_USERS: Final = frozenset({"root", "condor"})  # HTCondor's QUEUE_SUPER_USERS default

Authenticator = Callable[[Request], Identity]
"""Turns a request into the identity it acts as (NotAuthorized when it cannot)."""


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """The process at the other end of a Unix socket, as the kernel reports it."""

    pid: int
    uid: int
    gid: int

    @property
    def user(self) -> str:
        """The uid's user name (the uid as text when the system has no name for it)."""
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


def peer_credentials(sock: Any) -> PeerCredentials:
    """SO_PEERCRED of a connected Unix socket (a socket or asyncio's TransportSocket)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid, gid)


class PeerCredProtocol(GuardedProtocol):
    """uvicorn's HTTP/1.1 protocol (with the clocks of `_guard`), with the peer's
    credentials in every request's state (`request.state`, under PEER_KEY)."""

    def connection_state(self, transport: asyncio.Transport) -> dict[str, Any]:
        sock = transport.get_extra_info("socket")
        creds: PeerCredentials | None = None
        if sock is not None and sock.family == socket.AF_UNIX:
            try:
                creds = peer_credentials(sock)
            except OSError:
                creds = None  # the caller is gone already; its requests will be refused
        return {PEER_KEY: creds}


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The certificate a TLS client presented, verified against the server's CAs."""

    subject: str  # its common name
    issuer: str
    dn: str = ""  # its subject as OpenSSL writes it: /DC=org/DC=example/CN=Jane Doe
    issuer_dn: str = ""


#: OpenSSL's short names of the attributes of a DN, for the names `getpeercert` gives.
_SHORT: Final = {
    "commonName": "CN",
    "countryName": "C",
    "domainComponent": "DC",
    "localityName": "L",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "stateOrProvinceName": "ST",
    "userId": "UID",
}


def oneline_dn(rdns: Any) -> str:
    """A DN as `getpeercert` gives it, written as OpenSSL's X509_NAME_oneline (and the
    map file's SSL lines) write it: `/DC=org/DC=example/CN=Jane Doe`."""
    parts = []
    for rdn in rdns or ():
        for key, value in rdn:
            parts.append(f"/{_SHORT.get(key, key)}={value}")
    return "".join(parts)


def _common_name(rdns: Any) -> str:
    for rdn in rdns or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class PeerCertProtocol(GuardedProtocol):
    """uvicorn's HTTP/1.1 protocol over TLS, with the client's certificate (verified in
    the handshake, see `server_ssl_context(client_cas=...)`) in every request's state
    (under PEER_CERT_KEY; None when the client presented none)."""

    def connection_state(self, transport: asyncio.Transport) -> dict[str, Any]:
        cert = transport.get_extra_info("peercert")
        peer = None
        if cert:  # asyncio's transport: the handshake is over, the certificate verified
            subject, issuer = cert.get("subject"), cert.get("issuer")
            peer = PeerCertificate(
                _common_name(subject),
                _common_name(issuer),
                oneline_dn(subject),
                oneline_dn(issuer),
            )
        return {PEER_CERT_KEY: peer}


def certificate_caller(gate: Gatekeeper) -> Callable[[Mapping[str, Any]], Principal | None]:
    """Who a request without a token is by the certificate its TLS client presented
    (`PeerCertProtocol`'s), as `gate`'s map file says: TokenAuthMiddleware's `connection`."""

    def caller(scope: Mapping[str, Any]) -> Principal | None:
        peer = scope.get("state", {}).get(PEER_CERT_KEY)
        if not isinstance(peer, PeerCertificate) or not peer.dn:
            return None
        return gate.certificate(peer.dn, peer.issuer_dn)

    return caller


def peercred_identity(request: Request) -> Identity:
    """The identity of a caller on the Unix socket; root and condor are queue super users."""
    creds = request.scope.get("state", {}).get(PEER_KEY)
    if not isinstance(creds, PeerCredentials):
        raise NotAuthorized("the caller's credentials are unknown: this API answers local users")
    user = creds.user
    return Identity(user, admin=user in SUPER_USERS)
