"""X.509 proxies: what a proxy file says (identity, expiration, VOMS FQANs), proxies made
and delegations signed, checked against what OpenSSL makes of them."""

from __future__ import annotations

import datetime
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from htgrid.client.x509 import (
    ProxyError,
    default_proxy_path,
    make_proxy,
    read_proxy,
    sign_proxy_request,
)
from htgrid.testing.voms import voms_extension

NOW = datetime.datetime.now(datetime.UTC)


def _name(*parts: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(o, v)]) for o, v in parts])


@pytest.fixture(scope="module")
def user() -> tuple[bytes, bytes]:
    """A CA-less user credential: /DC=org/DC=example/CN=Jane Doe, valid 30 days."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = _name(
        (NameOID.DOMAIN_COMPONENT, "org"),
        (NameOID.DOMAIN_COMPONENT, "example"),
        (NameOID.COMMON_NAME, "Jane Doe"),
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(days=1))
        .not_valid_after(NOW + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_a_proxy_names_its_identity_and_earliest_expiration(
    user: tuple[bytes, bytes], tmp_path: Path
) -> None:
    path = tmp_path / "x509up_u1000"
    made = datetime.datetime.now(datetime.UTC)
    path.write_bytes(make_proxy(*user, lifetime=3600, now=made))
    info = read_proxy(path)
    assert info.identity == "/DC=org/DC=example/CN=Jane Doe"
    assert info.subject.startswith("/DC=org/DC=example/CN=Jane Doe/CN=")
    proxy = x509.load_pem_x509_certificates(path.read_bytes())[0]
    assert info.expiration == int(proxy.not_valid_after_utc.timestamp())
    assert info.expiration == int(made.timestamp()) + 3600
    assert info.job_attrs() == {
        "x509userproxysubject": "/DC=org/DC=example/CN=Jane Doe",
        "x509UserProxyExpiration": info.expiration,
    }


def test_a_proxy_never_outlives_its_issuer(user: tuple[bytes, bytes], tmp_path: Path) -> None:
    info = read_proxy(tmp_path / "p", data=make_proxy(*user, lifetime=90 * 86400))
    issuer = x509.load_pem_x509_certificate(user[0])
    assert info.expiration == int(issuer.not_valid_after_utc.timestamp())


def test_voms_attributes_give_the_vo_and_fqans_as_htcondor_quotes_them(
    user: tuple[bytes, bytes],
) -> None:
    fqans = ["/cms/Role=NULL/Capability=NULL", "/cms/uscms,a&b/Role=pilot"]
    data = make_proxy(*user, extra=[voms_extension("cms", fqans)])
    info = read_proxy("proxy", data=data, voms=True)
    assert info.voname == "cms"
    assert info.fqans == tuple(fqans)
    attrs = info.job_attrs()
    assert attrs["x509UserProxyVOName"] == "cms"
    assert attrs["x509UserProxyFirstFQAN"] == "/cms/Role=NULL/Capability=NULL"
    # The identity, then each FQAN, ',' and '&' escaped (X509_FQAN_DELIMITER/_ESCAPE).
    assert attrs["x509UserProxyFQAN"] == (
        "/DC=org/DC=example/CN=Jane Doe,/cms/Role=NULL/Capability=NULL,"
        "/cms/uscms&comma;a&amp;b/Role=pilot"
    )
    # Not asked for (HTCondor's USE_VOMS_ATTRIBUTES off): none.
    assert "x509UserProxyVOName" not in read_proxy("proxy", data=data).job_attrs()


def test_what_is_not_a_proxy_is_refused_saying_where(tmp_path: Path) -> None:
    bad = tmp_path / "notaproxy"
    bad.write_text("hello\n")
    with pytest.raises(ProxyError, match="notaproxy holds no PEM certificate"):
        read_proxy(bad)
    with pytest.raises(ProxyError, match=r"cannot read the X\.509 proxy .*missing"):
        read_proxy(tmp_path / "missing")


def test_a_delegation_is_a_proxy_of_the_proxy(user: tuple[bytes, bytes]) -> None:
    proxy = make_proxy(*user)
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .sign(server_key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    chain = x509.load_pem_x509_certificates(sign_proxy_request(csr, proxy))
    first = x509.load_pem_x509_certificates(proxy)[0]
    assert chain[0].issuer == first.subject
    assert chain[0].public_key() == server_key.public_key()
    assert chain[1] == first
    assert read_proxy("d", data=sign_proxy_request(csr, proxy)).identity == (
        "/DC=org/DC=example/CN=Jane Doe"
    )


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")
def test_openssl_verifies_the_proxy_chain_as_a_proxy(
    user: tuple[bytes, bytes], tmp_path: Path
) -> None:
    (tmp_path / "ca.pem").write_bytes(user[0])
    proxy = make_proxy(*user)
    certs = x509.load_pem_x509_certificates(proxy)
    (tmp_path / "proxy.pem").write_bytes(certs[0].public_bytes(serialization.Encoding.PEM))
    done = subprocess.run(
        [
            "openssl",
            "verify",
            "-allow_proxy_certs",
            "-CAfile",
            str(tmp_path / "ca.pem"),
            str(tmp_path / "proxy.pem"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_default_proxy_is_x509_user_proxy_else_tmp_x509up_uid() -> None:
    assert default_proxy_path({"X509_USER_PROXY": "/p"}, uid=5) == "/p"
    assert default_proxy_path({}, uid=1234) == "/tmp/x509up_u1234"
