"""The pool CA, the daemons' certificates, and TLS contexts that trust them.

    ca = PoolCA(config.ca_dir)
    ca.ensure()                                      # ca.crt, ca.key: made once, kept
    cert = ca.ensure_server_cert("schedd")           # schedd.crt (with the CA), schedd.key
    server = server_ssl_context(cert)                # for uvicorn
    client = client_ssl_context(trusted_ca_files(config))  # for httpx (htgrid.pool)

As HTCondor's `condor` CA for SSL authentication (AUTH_SSL_SERVER_CERTFILE and friends),
but per pool: EC P-256 keys (mode 0600), SHA-256 signatures, server certificates naming
localhost, 127.0.0.1, ::1 and this host, and TLS 1.2 at least. `ensure*` are
idempotent and renew what is missing, about to expire, or no longer the CA's, so
calling them at every `htgrid up` (and now and then in a daemon) rotates certificates
before they lapse. The CA is renewed with its own key, so certificates it issued and
other pools' copies of it stay good.
"""

from __future__ import annotations

import fcntl
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from htgrid.net.security._config import write_private
from htgrid.net.security._errors import CertificateError
from htgrid.net.security._tokens import Clock

__all__ = [
    "CertFiles",
    "PoolCA",
    "client_ssl_context",
    "pinned_ssl_context",
    "self_signed_cert",
    "server_ssl_context",
]

_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_BACKDATE: Final = timedelta(minutes=5)  # forgive peers whose clocks run a little behind
_LOCALS: Final = ("localhost", "127.0.0.1", "::1")

_SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True)
class CertFiles:
    """A certificate (chain) and its key on disk."""

    cert: Path
    key: Path
    not_after: datetime
    renewed: bool = False  # made or renewed by the call that returned it

    def load_into(self, context: ssl.SSLContext) -> None:
        """Make a running server's context present this certificate to new connections."""
        context.load_cert_chain(self.cert, self.key)


def _san(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _load_key(path: Path) -> _SigningKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise CertificateError(f"{path}: cannot read the private key: {exc}") from None
    if not isinstance(key, _SigningKey):
        raise CertificateError(f"{path}: an EC or RSA key is needed, not {type(key).__name__}")
    return key


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CertificateError(f"{path}: cannot read the certificate: {exc}") from None


def _key_pem(key: _SigningKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _self_issued(
    key: _SigningKey, name: str, now: datetime, valid_days: int
) -> x509.CertificateBuilder:
    """A certificate of `key` for `name`, issued by itself, valid from now (backdated)."""
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "htgrid"),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + timedelta(days=valid_days))
    )


class PoolCA:
    """The pool's certificate authority in a directory ($HTGRID_HOME/etc/ca)."""

    def __init__(
        self, directory: Path, *, clock: Clock = time.time, name: str = "htgrid pool CA"
    ) -> None:
        self.directory = directory
        self.name = name
        self._clock = clock

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def key_path(self) -> Path:
        return self.directory / "ca.key"

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # `htgrid up` and a daemon renewing at once must not both write a CA.
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        with open(self.directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def certificate(self) -> x509.Certificate:
        """The CA certificate (CertificateError when there is none yet)."""
        return _load_cert(self.cert_path)

    def ensure(self, *, valid_days: int = 3650, renew_within_days: int = 365) -> CertFiles:
        """The CA: made if missing; its certificate renewed (same key) when close to expiry."""
        with self._locked():
            now = self._now()
            if self.key_path.exists() and self.cert_path.exists():
                key, cert = _load_key(self.key_path), _load_cert(self.cert_path)
                if cert.not_valid_after_utc - now > timedelta(days=renew_within_days):
                    return CertFiles(self.cert_path, self.key_path, cert.not_valid_after_utc)
            elif self.key_path.exists():
                key = _load_key(self.key_path)
            else:
                key = ec.generate_private_key(ec.SECP256R1())
                write_private(self.key_path, _key_pem(key))
            cert = (
                _self_issued(key, self.name, now, valid_days)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=False,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=True,
                        crl_sign=True,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(
                    x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
                )
                .sign(key, hashes.SHA256())
            )
            write_private(self.cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
            return CertFiles(self.cert_path, self.key_path, cert.not_valid_after_utc, renewed=True)

    def issue(self, name: str, *, hosts: Sequence[str] = (), valid_days: int = 365) -> CertFiles:
        """A new certificate and key for daemon `name` (`<name>.crt`, `<name>.key`),
        for localhost, 127.0.0.1, ::1, this host and `hosts`."""
        if not _NAME.fullmatch(name) or name == "ca":
            raise CertificateError(f"{name!r} cannot name a certificate")
        self.ensure()
        with self._locked():
            return self._issue(name, self._hosts(hosts), valid_days)

    def ensure_server_cert(
        self,
        name: str,
        *,
        hosts: Sequence[str] = (),
        valid_days: int = 365,
        renew_within_days: int = 30,
    ) -> CertFiles:
        """Daemon `name`'s certificate: issued again when missing, within
        `renew_within_days` of expiry, not this CA's, or missing one of the hosts."""
        if not _NAME.fullmatch(name) or name == "ca":
            raise CertificateError(f"{name!r} cannot name a certificate")
        self.ensure()
        wanted = self._hosts(hosts)
        with self._locked():
            cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
            if cert_path.exists() and key_path.exists():
                cert = _load_cert(cert_path)
                if self._still_good(cert, _load_key(key_path), wanted, renew_within_days):
                    return CertFiles(cert_path, key_path, cert.not_valid_after_utc)
            return self._issue(name, wanted, valid_days)

    def _hosts(self, extra: Sequence[str]) -> list[str]:
        return [*_LOCALS, socket.gethostname(), *extra]

    def _still_good(
        self, cert: x509.Certificate, key: _SigningKey, hosts: list[str], renew_within_days: int
    ) -> bool:
        if cert.not_valid_after_utc - self._now() <= timedelta(days=renew_within_days):
            return False
        if cert.public_key() != key.public_key():
            return False
        try:
            cert.verify_directly_issued_by(self.certificate())
        except (ValueError, TypeError, InvalidSignature):
            return False
        try:
            have = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
        except x509.ExtensionNotFound:
            return False
        return set(_san(hosts)) <= have

    def _issue(self, name: str, hosts: list[str], valid_days: int) -> CertFiles:
        ca_key, ca_cert = _load_key(self.key_path), self.certificate()
        key = ec.generate_private_key(ec.SECP256R1())
        now = self._now()
        not_after = min(now + timedelta(days=valid_days), ca_cert.not_valid_after_utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "htgrid"),
                        x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{socket.gethostname()}"),
                    ]
                )
            )
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_path, cert_path = self.directory / f"{name}.key", self.directory / f"{name}.crt"
        # The key first: a reader that finds the new certificate finds its key too.
        write_private(key_path, _key_pem(key))
        chain = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(
            serialization.Encoding.PEM
        )
        write_private(cert_path, chain, mode=0o644)
        return CertFiles(cert_path, key_path, cert.not_valid_after_utc, renewed=True)


def self_signed_cert(
    cert_path: Path,
    key_path: Path,
    name: str,
    hosts: Sequence[str],
    *,
    valid_days: int = 400,
    clock: Clock = time.time,
) -> CertFiles:
    """A new key and a certificate of its own (self-signed) for `name` at `hosts`, for a
    daemon that holds no CA's key and whose peers pin its certificate (an execute node
    joining a pool advertises it in its token-authenticated ad); the PEM is at `cert_path`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.fromtimestamp(clock(), UTC)
    cert = (
        _self_issued(key, name, now, valid_days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, _key_pem(key))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return CertFiles(cert_path, key_path, cert.not_valid_after_utc, renewed=True)


def _tls12(context: ssl.SSLContext) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def server_ssl_context(cert: CertFiles, *, client_cas: Iterable[Path] = ()) -> ssl.SSLContext:
    """A server's TLS context presenting `cert` (TLS 1.2 or newer). With `client_cas`, a
    client may present a certificate, which must be one of theirs (the handshake fails
    otherwise); whether it did is the application's to check (`getpeercert`)."""
    context = _tls12(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    try:
        cert.load_into(context)
    except (OSError, ssl.SSLError) as exc:
        raise CertificateError(f"{cert.cert}: cannot load the certificate: {exc}") from None
    cas = list(client_cas)
    if cas:
        _load_cas(context, cas)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _load_cas(context: ssl.SSLContext, ca_files: Iterable[Path]) -> int:
    loaded = 0
    for path in ca_files:
        try:
            context.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(f"{path}: cannot load the CA certificate: {exc}") from None
        loaded += 1
    return loaded


def pinned_ssl_context(pem: str, identity: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client's TLS context trusting one server certificate, `pem` (pinned: the peer
    presents exactly it, for the host name it names), presenting `identity` (the
    certificate and key files) if given."""
    context = _tls12(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    try:
        context.load_verify_locations(cadata=pem)
    except (ValueError, ssl.SSLError) as exc:
        raise CertificateError(f"the pinned certificate cannot be read: {exc}") from None
    if identity is not None:
        try:
            context.load_cert_chain(*identity)
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(f"{identity[0]}: cannot load the certificate: {exc}") from None
    return context


def client_ssl_context(ca_files: Iterable[Path]) -> ssl.SSLContext:
    """A client's TLS context trusting only these CA certificates (not the system's),
    checking host names (TLS 1.2 or newer)."""
    context = _tls12(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    if not _load_cas(context, ca_files):
        raise CertificateError("no CA certificate to trust: run `htgrid up` to make the pool CA")
    return context
