"""X.509 proxy certificates (RFC 3820) as grid jobs carry them: read, made, delegated.

* `read_proxy(path)` -> `ProxyInfo`: the proxy's identity (the end-entity subject the
  chain starts from, OpenSSL's `/DC=org/CN=Name` form), its expiration (the earliest
  notAfter of the chain it holds, as HTCondor's x509_proxy_expiration_time), its e-mail
  address, and its VOMS attributes (VO name and FQANs) when asked;
  `ProxyInfo.job_attrs()` is what the schedd writes into a job ad
  (x509userproxysubject, x509UserProxyExpiration, x509UserProxyEmail,
  x509UserProxyVOName, x509UserProxyFirstFQAN, x509UserProxyFQAN).
* `make_proxy(cert, key, ...)`: a new RFC 3820 proxy signed by a credential (what
  grid-proxy-init does), and `sign_proxy_request(csr, proxy)`: a delegation, the
  server's request signed by our proxy (what ARC's and GRAM's delegation services take).

Certificates are read and made with `cryptography`. VOMS attribute certificates (RFC
5755, in the proxy's extension 1.3.6.1.4.1.8005.100.100.5) are read with pyasn1-modules'
rfc5755 definitions, not verified: HTCondor's schedd also reads them unverified
(extract_VOMS_info with VERIFY_NONE), and only when USE_VOMS_ATTRIBUTES is true.
"""

from __future__ import annotations

import datetime
import io
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import NameOID, ObjectIdentifier

from htgrid.errors import HTGridError

__all__ = [
    "ProxyError",
    "ProxyInfo",
    "default_proxy_path",
    "dn_text",
    "make_proxy",
    "read_proxy",
    "sign_proxy_request",
]

#: RFC 3820's proxyCertInfo, and the pre-RFC (GT3) one.
PROXY_CERT_INFO = ObjectIdentifier("1.3.6.1.5.5.7.1.14")
_GT3_PROXY_CERT_INFO = ObjectIdentifier("1.3.6.1.4.1.3536.1.222")
#: VOMS: the proxy extension holding the attribute certificates, and the FQAN attribute.
VOMS_AC_SEQ = ObjectIdentifier("1.3.6.1.4.1.8005.100.100.5")
_VOMS_FQANS = "1.3.6.1.4.1.8005.100.100.4"
#: DER of ProxyCertInfo { pCPathLenConstraint absent, proxyPolicy { id-ppl-inheritAll } }.
_INHERIT_ALL = bytes.fromhex("300c300a06082b06010505071501")

#: OpenSSL's short names, for the `/A=v/B=w` form grid tools print.
_SHORT = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.EMAIL_ADDRESS: "emailAddress",
    NameOID.USER_ID: "UID",
    NameOID.SERIAL_NUMBER: "serialNumber",
}


class ProxyError(HTGridError, ValueError):
    """An X.509 proxy file that cannot be read, or is not a proxy."""


def default_proxy_path(environ: dict[str, str] | None = None, uid: int | None = None) -> str:
    """Where grid tools look for the user's proxy: X509_USER_PROXY, else /tmp/x509up_u<uid>."""
    env = os.environ if environ is None else environ
    found = env.get("X509_USER_PROXY")
    if found:
        return found
    return f"/tmp/x509up_u{os.getuid() if uid is None else uid}"


def dn_text(name: x509.Name) -> str:
    """A distinguished name as OpenSSL's X509_NAME_oneline writes it: `/DC=org/CN=Name`."""
    parts = []
    for rdn in name.rdns:
        for attr in rdn:
            key = _SHORT.get(attr.oid, attr.oid.dotted_string)
            value = attr.value if isinstance(attr.value, str) else attr.value.decode("latin-1")
            parts.append(f"/{key}={value}")
    return "".join(parts)


def _is_proxy(cert: x509.Certificate) -> bool:
    for oid in (PROXY_CERT_INFO, _GT3_PROXY_CERT_INFO):
        try:
            cert.extensions.get_extension_for_oid(oid)
        except x509.ExtensionNotFound:
            continue
        return True
    # A legacy (GT2) proxy: the issuer's subject plus CN=proxy or CN=limited proxy.
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    last = cns[-1].value if cns else ""
    return last in ("proxy", "limited proxy") and cert.subject.rdns[:-1] == cert.issuer.rdns


@dataclass(frozen=True, slots=True)
class ProxyInfo:
    """What a proxy file says about its holder."""

    path: str
    #: The proxy's own subject, and the identity it speaks for (the end-entity subject).
    subject: str
    identity: str
    #: The earliest notAfter of the certificates in the file (epoch seconds).
    expiration: int
    email: str | None = None
    #: VOMS: the VO's name and its FQANs (empty without VOMS attributes, or unread).
    voname: str | None = None
    fqans: tuple[str, ...] = ()

    def expired(self, now: float) -> bool:
        return self.expiration <= now

    def job_attrs(self) -> dict[str, str | int]:
        """The job ad's x509 attributes, as HTCondor's schedd sets them from the file."""
        attrs: dict[str, str | int] = {
            "x509userproxysubject": self.identity,
            "x509UserProxyExpiration": self.expiration,
        }
        if self.email:
            attrs["x509UserProxyEmail"] = self.email
        if self.voname is not None and self.fqans:
            attrs["x509UserProxyVOName"] = self.voname
            attrs["x509UserProxyFirstFQAN"] = self.fqans[0]
            attrs["x509UserProxyFQAN"] = ",".join(_quote(v) for v in (self.identity, *self.fqans))
        return attrs


def _quote(text: str) -> str:
    """HTCondor's quote_x509_string with its default knobs: '&' and ',' escaped."""
    return text.replace("&", "&amp;").replace(",", "&comma;")


def read_proxy(path: str | Path, *, voms: bool = False, data: bytes | None = None) -> ProxyInfo:
    """The proxy in `path` (or `data`, its bytes) read; ProxyError saying why not.
    `voms`: read its VOMS attributes too (HTCondor's USE_VOMS_ATTRIBUTES)."""
    where = str(path)
    if data is None:
        try:
            data = Path(where).read_bytes()
        except OSError as err:
            raise ProxyError(f"cannot read the X.509 proxy {where}: {err.strerror}") from None
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ProxyError(f"{where} holds no PEM certificate: it is not an X.509 proxy") from None
    leaf = chain[0]
    identity = next((c for c in chain if not _is_proxy(c)), None)
    if identity is None:
        # The file lacks the end-entity certificate: its subject is the proxy's own
        # less the CN components the proxies added (HTCondor's identity name).
        rdns = list(leaf.subject.rdns)
        while rdns and _is_proxy(leaf) and len(rdns) > 1 and _is_proxy_cn(rdns[-1]):
            rdns.pop()
        identity_text = dn_text(x509.Name(rdns))
    else:
        identity_text = dn_text(identity.subject)
    expiration = min(int(c.not_valid_after_utc.timestamp()) for c in chain)
    email = None
    for cert in chain:
        found = cert.subject.get_attributes_for_oid(NameOID.EMAIL_ADDRESS)
        if found:
            email = str(found[0].value)
            break
    voname, fqans = _voms(chain, where) if voms else (None, ())
    return ProxyInfo(where, dn_text(leaf.subject), identity_text, expiration, email, voname, fqans)


def _is_proxy_cn(rdn: x509.RelativeDistinguishedName) -> bool:
    values = [a.value for a in rdn if a.oid == NameOID.COMMON_NAME]
    return len(values) == 1 and (
        str(values[0]).isdigit() or values[0] in ("proxy", "limited proxy")
    )


def _voms(chain: Sequence[x509.Certificate], where: str) -> tuple[str | None, tuple[str, ...]]:
    """The VO name and FQANs of the first VOMS attribute certificate in the chain."""
    for cert in chain:
        try:
            ext = cert.extensions.get_extension_for_oid(VOMS_AC_SEQ)
        except x509.ExtensionNotFound:
            continue
        assert isinstance(ext.value, x509.UnrecognizedExtension)
        try:
            return _voms_fqans(ext.value.value)
        except Exception as err:  # pyasn1's errors: the extension is malformed
            raise ProxyError(f"{where}: cannot read its VOMS attributes: {err}") from None
    return None, ()


def _voms_fqans(der: bytes) -> tuple[str | None, tuple[str, ...]]:
    from pyasn1.codec.der import decoder
    from pyasn1.type import univ
    from pyasn1_modules import rfc5755

    seq, _ = decoder.decode(
        der, asn1Spec=univ.SequenceOf(componentType=rfc5755.AttributeCertificate())
    )
    for ac in seq:
        for attribute in ac["acinfo"]["attributes"]:
            if str(attribute["type"]) != _VOMS_FQANS:
                continue
            for raw in attribute["values"]:
                syntax, _ = decoder.decode(bytes(raw), asn1Spec=rfc5755.IetfAttrSyntax())
                voname = None
                if syntax["policyAuthority"].isValue:
                    for general in syntax["policyAuthority"]:
                        uri = general.getComponent()
                        # VOMS writes `<vo>://<host>:<port>`.
                        voname = str(uri).partition("://")[0] or None
                        break
                fqans = tuple(
                    bytes(value.getComponent()).decode("utf-8", "replace")
                    for value in syntax["values"]
                )
                return voname, fqans
    return None, ()


def _proxy_builder(
    issuer: x509.Certificate, public_key: rsa.RSAPublicKey, lifetime: float, now: datetime.datetime
) -> x509.CertificateBuilder:
    serial = secrets.randbits(31) | 1
    subject = x509.Name(
        [
            *issuer.subject.rdns,
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, str(serial))]),
        ]
    )
    not_after = min(now + datetime.timedelta(seconds=lifetime), issuer.not_valid_after_utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.UnrecognizedExtension(PROXY_CERT_INFO, _INHERIT_ALL), critical=True)
    )


def _pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def make_proxy(
    cert_pem: bytes,
    key_pem: bytes,
    *,
    lifetime: float = 12 * 3600,
    now: datetime.datetime | None = None,
    extra: Sequence[x509.Extension[x509.ExtensionType]] = (),
) -> bytes:
    """A new RFC 3820 proxy of the credential `cert_pem` (its chain may follow) and
    `key_pem`: the proxy certificate, its new key, then the issuer's chain (the file
    grid-proxy-init writes). `extra`: more extensions (a VOMS AC sequence, in tests)."""
    chain = x509.load_pem_x509_certificates(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ProxyError("only RSA credentials can sign proxies here")
    proxy_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    when = now or datetime.datetime.now(datetime.UTC)
    builder = _proxy_builder(chain[0], proxy_key.public_key(), lifetime, when)
    for ext in extra:
        builder = builder.add_extension(ext.value, critical=ext.critical)
    proxy = builder.sign(key, hashes.SHA256())
    key_out = proxy_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return _pem(proxy) + key_out + _pem(*chain)


def _request_key(csr_pem: bytes) -> Any:
    """The public key of a PEM certificate request. ARC CE 6 writes its delegation
    requests with version 2 (PKCS #10 knows only 0), which `cryptography` refuses: the
    key is taken from the request's structure read with pyasn1-modules' rfc2986."""
    try:
        return x509.load_pem_x509_csr(csr_pem).public_key()
    except (ValueError, x509.InvalidVersion):
        pass
    from pyasn1.codec.der import decoder, encoder
    from pyasn1_modules import pem, rfc2986

    try:
        der = pem.readPemFromFile(
            io.StringIO(csr_pem.decode("ascii", "replace")),
            "-----BEGIN CERTIFICATE REQUEST-----",
            "-----END CERTIFICATE REQUEST-----",
        )
        request, _ = decoder.decode(der, asn1Spec=rfc2986.CertificationRequest())
        spki = encoder.encode(request["certificationRequestInfo"]["subjectPKInfo"])
        return serialization.load_der_public_key(spki)
    except Exception:  # pyasn1's and cryptography's errors alike: not a request
        raise ProxyError("the delegation request is not a PEM certificate request") from None


def sign_proxy_request(csr_pem: bytes, proxy_pem: bytes, *, lifetime: float = 12 * 3600) -> bytes:
    """A delegation: the request `csr_pem` signed by the proxy in `proxy_pem` (which holds
    its key) as a new proxy, followed by the proxy's chain (without its key)."""
    public = _request_key(csr_pem)
    chain = x509.load_pem_x509_certificates(proxy_pem)
    key = serialization.load_pem_private_key(proxy_pem, password=None)
    if not isinstance(public, rsa.RSAPublicKey):
        raise ProxyError("the delegation request's key is not an RSA key")
    signer: CertificateIssuerPrivateKeyTypes = key  # type: ignore[assignment]
    builder = _proxy_builder(chain[0], public, lifetime, datetime.datetime.now(datetime.UTC))
    return _pem(builder.sign(signer, hashes.SHA256()), *chain)
