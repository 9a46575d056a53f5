"""A MyProxy client: a new proxy of a stored credential, got with its passphrase (GET).

    proxy_pem = get_delegation(
        MyProxyServer.parse("myproxy.example.org:7512"), "alice", passphrase,
        lifetime=12 * 3600, credential_name="grid", client_proxy="/tmp/x509up_u1000",
    )

What myproxy-logon (myproxy-get-delegation) does, over the standard `ssl` module: a TLS
connection to the server, verified against the grid CAs (X509_CERT_DIR, default
/etc/grid-security/certificates), presenting the caller's current proxy if it has one;
the byte `0` (GSI's "no delegation"); the request `VERSION=MYPROXYv2 / COMMAND=0 /
USERNAME / PASSPHRASE / LIFETIME [/ CRED_NAME]`, NUL-terminated; on `RESPONSE=0` a
certificate request of a key made here (DER); the server's answer, a byte counting the
certificates and their DER, the new proxy first, then a final response. The result is the
file grid-proxy-init writes: the proxy, its key, then the chain.

The server must be the one named: its certificate matches MyProxyServerDN when given,
else its host name (subjectAltName, or a CN of `host`, `host/host` or `myproxy/host`, as
MyProxy's clients accept). The passphrase goes only into the TLS stream: no error message
or log line here holds it.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from htgrid.client.x509 import dn_text
from htgrid.errors import HTGridError

__all__ = [
    "DEFAULT_CA_DIR",
    "DEFAULT_PORT",
    "MyProxyError",
    "MyProxyRefused",
    "MyProxyServer",
    "get_delegation",
]

DEFAULT_PORT = 7512
DEFAULT_CA_DIR = "/etc/grid-security/certificates"
_VERSION = "MYPROXYv2"
#: A response or a certificate longer than this is not MyProxy's.
_MAX_MESSAGE = 64 * 1024


class MyProxyError(HTGridError):
    """A MyProxy server could not be reached, is not the one named, or broke the protocol."""


class MyProxyRefused(MyProxyError):
    """The MyProxy server refused the request (a wrong passphrase, no such credential)."""


@dataclass(frozen=True, slots=True)
class MyProxyServer:
    """Where a credential is kept: MyProxyHost (`host[:port]`) and MyProxyServerDN."""

    host: str
    port: int = DEFAULT_PORT
    server_dn: str | None = None

    @classmethod
    def parse(cls, text: str, server_dn: str | None = None) -> MyProxyServer:
        """`host[:port]` (an IPv6 address in brackets); MyProxyError if it is not one."""
        text = text.strip()
        host, port = text, DEFAULT_PORT
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            if rest.startswith(":"):
                port = _port(rest[1:], text)
            elif rest:
                raise MyProxyError(f"MyProxyHost {text!r} is not host[:port]")
        elif text.count(":") == 1:
            host, _, number = text.partition(":")
            port = _port(number, text)
        if not host or any(c.isspace() for c in host):
            raise MyProxyError(f"MyProxyHost {text!r} is not host[:port]")
        return cls(host, port, server_dn or None)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _port(number: str, text: str) -> int:
    if not number.isdigit() or not 0 < int(number) < 65536:
        raise MyProxyError(f"MyProxyHost {text!r}: the port is not a number from 1 to 65535")
    return int(number)


def get_delegation(
    server: MyProxyServer,
    username: str,
    passphrase: str,
    *,
    lifetime: int,
    credential_name: str | None = None,
    client_proxy: str | None = None,
    ca_dir: str | None = None,
    timeout: float = 30.0,
) -> bytes:
    """A new proxy (PEM: certificate, key, chain) of `username`'s credential on `server`,
    valid `lifetime` seconds at most. MyProxyRefused when the server says no (its
    reason), MyProxyError when it cannot be asked. Blocking."""
    for name, value in (("username", username), ("credential name", credential_name or "")):
        if any(c in value for c in "\n\0"):
            raise MyProxyError(f"the MyProxy {name} {value!r} holds a newline or NUL")
    if any(c in passphrase for c in "\n\0"):
        raise MyProxyError("the MyProxy passphrase holds a newline or NUL")
    lines = [
        f"VERSION={_VERSION}",
        "COMMAND=0",
        f"USERNAME={username}",
        f"PASSPHRASE={passphrase}",
        f"LIFETIME={max(1, int(lifetime))}",
    ]
    if credential_name:
        lines.append(f"CRED_NAME={credential_name}")
    request = ("\n".join(lines) + "\n").encode() + b"\0"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "proxy")]))
        .sign(key, hashes.SHA256())
    )
    context = _context(ca_dir or os.environ.get("X509_CERT_DIR") or DEFAULT_CA_DIR, client_proxy)
    try:
        with (
            socket.create_connection((server.host, server.port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=server.host) as tls,
        ):
            _check_server(tls, server)
            stream = _Stream(tls)
            # Each is a token of GSI's, read as one TLS record: they must not share one.
            tls.sendall(b"0")
            tls.sendall(request)
            _response(stream, server)
            tls.sendall(csr.public_bytes(serialization.Encoding.DER))
            count = stream.exact(1)[0]
            if count == 0:
                raise MyProxyError(f"MyProxy server {server} sent no certificate")
            certs = [stream.certificate() for _ in range(count)]
            _response(stream, server)
    except ssl.SSLError as err:
        raise MyProxyError(
            f"TLS with MyProxy server {server} failed: {err.reason or err}"
        ) from None
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise MyProxyError(f"cannot reach MyProxy server {server}: {reason}") from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if certs[0].public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise MyProxyError(f"MyProxy server {server} sent a proxy of another key")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    pem = [c.public_bytes(serialization.Encoding.PEM) for c in certs]
    return pem[0] + key_pem + b"".join(pem[1:])


def _context(ca_dir: str, client_proxy: str | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # The name is checked by _check_server, as MyProxy's clients check it.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_verify_locations(capath=ca_dir)
    except OSError as err:
        raise MyProxyError(f"cannot read the grid CA directory {ca_dir}: {err.strerror}") from None
    if client_proxy is not None:
        try:
            context.load_cert_chain(client_proxy)
        except (OSError, ssl.SSLError) as err:
            reason = getattr(err, "strerror", None) or getattr(err, "reason", None) or err
            raise MyProxyError(f"cannot present the proxy {client_proxy}: {reason}") from None
    return context


def _check_server(tls: ssl.SSLSocket, server: MyProxyServer) -> None:
    der = tls.getpeercert(binary_form=True)
    if der is None:  # pragma: no cover - CERT_REQUIRED makes the handshake fail first
        raise MyProxyError(f"MyProxy server {server} presented no certificate")
    cert = x509.load_der_x509_certificate(der)
    subject = dn_text(cert.subject)
    if server.server_dn is not None:
        if subject != server.server_dn:
            raise MyProxyError(
                f"MyProxy server {server} is {subject}, not MyProxyServerDN {server.server_dn}"
            )
        return
    names: set[str] = set()
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names.update(n.lower() for n in alt.get_values_for_type(x509.DNSName))
        names.update(str(ip) for ip in alt.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        pass
    host = server.host.lower()
    for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME):
        cn = str(attr.value).lower()
        names.update({cn, cn.removeprefix("host/"), cn.removeprefix("myproxy/")})
    if host not in names:
        raise MyProxyError(
            f"MyProxy server {server} presented {subject}, which does not name {server.host} "
            "(set MyProxyServerDN to the server's subject if it is another)"
        )


class _Stream:
    """Exact reads from the TLS connection."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self._tls = tls
        self._buffer = bytearray()

    def _fill(self) -> None:
        data = self._tls.recv(16384)
        if not data:
            raise MyProxyError("the MyProxy server closed the connection early")
        self._buffer += data

    def exact(self, count: int) -> bytes:
        while len(self._buffer) < count:
            self._fill()
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def message(self) -> str:
        """A NUL-terminated response; empty ones (the server sends a lone NUL after the
        handshake) skipped."""
        while True:
            while (end := self._buffer.find(b"\0")) < 0:
                if len(self._buffer) > _MAX_MESSAGE:
                    raise MyProxyError("the MyProxy server's response has no end")
                self._fill()
            data = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if data:
                return data.decode("utf-8", "replace")

    def certificate(self) -> x509.Certificate:
        """One DER certificate, framed by its outer SEQUENCE's length."""
        head = self.exact(2)
        if head[0] != 0x30:
            raise MyProxyError("the MyProxy server sent something other than a certificate")
        size = head[1]
        extra = b""
        if size & 0x80:
            extra = self.exact(size & 0x7F)
            size = int.from_bytes(extra, "big")
        if size > _MAX_MESSAGE:
            raise MyProxyError("the MyProxy server sent a certificate too large to be one")
        der = head + extra + self.exact(size)
        try:
            return x509.load_der_x509_certificate(der)
        except ValueError:
            raise MyProxyError(
                "the MyProxy server sent a certificate that cannot be read"
            ) from None


def _response(stream: _Stream, server: MyProxyServer) -> None:
    fields: dict[str, list[str]] = {}
    for line in stream.message().splitlines():
        name, sep, value = line.partition("=")
        if sep:
            fields.setdefault(name, []).append(value)
    if fields.get("VERSION") != [_VERSION]:
        raise MyProxyError(f"MyProxy server {server} does not speak {_VERSION}")
    code = fields.get("RESPONSE", [""])[0]
    if code == "0":
        return
    errors = [e for e in fields.get("ERROR", []) if e.strip()]
    reason = "; ".join(e.strip() for e in errors) or f"RESPONSE={code}"
    # The server's own words for a wrong passphrase come after OpenSSL's, which differ
    # between its versions ("Bad password" or a key decoding error): name it plainly first.
    if "invalid credential passphrase" in reason:
        reason = f"wrong passphrase for the credential ({reason})"
    raise MyProxyRefused(f"MyProxy server {server} refused: {reason}")
