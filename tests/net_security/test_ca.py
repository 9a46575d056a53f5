"""The pool CA and daemon certificates: made once, kept, renewed before they lapse."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from htgrid.net.security import (
    CertificateError,
    PoolCA,
    SecurityConfig,
    client_ssl_context,
    server_ssl_context,
)
from htgrid.pool import trusted_ca_files

from ._support import FakeClock

DAY = 86400.0


@pytest.fixture
def ca(config: SecurityConfig, clock: FakeClock) -> PoolCA:
    return PoolCA(config.ca_dir, clock=clock)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_ca_is_made_once_with_a_private_key(ca: PoolCA) -> None:
    made = ca.ensure()
    assert made.renewed
    assert _mode(ca.key_path) == 0o600 and _mode(ca.cert_path) == 0o644
    cert = _cert(ca.cert_path)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    before = (ca.cert_path.read_bytes(), ca.key_path.read_bytes())
    again = ca.ensure()
    assert not again.renewed and again.not_after == made.not_after
    assert (ca.cert_path.read_bytes(), ca.key_path.read_bytes()) == before


def test_a_server_certificate_names_this_host(ca: PoolCA) -> None:
    issued = ca.ensure_server_cert("schedd", hosts=["submit.example.org", "10.1.2.3"])
    assert issued.renewed and _mode(issued.key) == 0o600
    chain = issued.cert.read_bytes()
    assert chain.count(b"BEGIN CERTIFICATE") == 2  # the leaf, then the CA
    cert = _cert(issued.cert)
    cert.verify_directly_issued_by(ca.certificate())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {
        "localhost",
        socket.gethostname(),
        "submit.example.org",
    }
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("10.1.2.3"),
    }
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert server_ssl_context(issued).minimum_version == ssl.TLSVersion.TLSv1_2


def test_ensure_server_cert_is_idempotent(ca: PoolCA) -> None:
    first = ca.ensure_server_cert("schedd")
    content = first.cert.read_bytes()
    again = ca.ensure_server_cert("schedd")
    assert not again.renewed and again.cert.read_bytes() == content


def test_rotation_before_expiry(ca: PoolCA, clock: FakeClock) -> None:
    first = ca.ensure_server_cert("schedd", valid_days=90, renew_within_days=30)
    serial = _cert(first.cert).serial_number
    clock.advance(59 * DAY)
    assert not ca.ensure_server_cert("schedd", valid_days=90, renew_within_days=30).renewed
    clock.advance(2 * DAY)  # 29 days left: inside the window
    renewed = ca.ensure_server_cert("schedd", valid_days=90, renew_within_days=30)
    assert renewed.renewed and renewed.not_after > first.not_after
    assert _cert(renewed.cert).serial_number != serial


def test_reissued_when_a_host_is_added_or_the_ca_changed(
    ca: PoolCA, config: SecurityConfig
) -> None:
    ca.ensure_server_cert("schedd")
    assert ca.ensure_server_cert("schedd", hosts=["new.example.org"]).renewed
    ca.cert_path.unlink()
    ca.key_path.unlink()
    ca.ensure()  # a new CA: what the old one signed is not trusted any more
    renewed = ca.ensure_server_cert("schedd", hosts=["new.example.org"])
    assert renewed.renewed
    _cert(renewed.cert).verify_directly_issued_by(ca.certificate())


def test_the_ca_renews_itself_with_its_own_key(ca: PoolCA, clock: FakeClock) -> None:
    ca.ensure(valid_days=3650)
    server = ca.ensure_server_cert("schedd", valid_days=3650)
    key = ca.key_path.read_bytes()
    clock.advance(3300 * DAY)
    renewed = ca.ensure(valid_days=3650, renew_within_days=365)
    assert renewed.renewed and ca.key_path.read_bytes() == key
    # A certificate issued before the renewal still verifies against the renewed CA.
    _cert(server.cert).verify_directly_issued_by(ca.certificate())


def test_bad_names_and_missing_cas(ca: PoolCA, config: SecurityConfig) -> None:
    for name in ("ca", "../x", ""):
        with pytest.raises(CertificateError, match="cannot name a certificate"):
            ca.ensure_server_cert(name)
    with pytest.raises(CertificateError, match="no CA certificate to trust"):
        client_ssl_context(trusted_ca_files(config))
    with pytest.raises(CertificateError, match="cannot load the CA certificate"):
        client_ssl_context([config.home / "missing.crt"])


def test_trusted_cas_include_other_pools(
    ca: PoolCA, config: SecurityConfig, tmp_path: Path, clock: FakeClock
) -> None:
    ca.ensure()
    other = PoolCA(tmp_path / "other", clock=clock)
    other.ensure()
    config.trusted_ca_dir.mkdir()
    (config.trusted_ca_dir / "other.crt").write_bytes(other.cert_path.read_bytes())
    (config.trusted_ca_dir / "README").write_text("CA certificates of pools we submit to\n")
    assert trusted_ca_files(config) == [ca.cert_path, config.trusted_ca_dir / "other.crt"]
    context = client_ssl_context(trusted_ca_files(config))
    assert len(context.get_ca_certs()) == 2
