"""A client certificate over TLS, mapped by the map file's SSL lines (and GSI lines, read as
SSL), as HTCondor-CE maps a grid user's DN: a running pool's API, a site CA the pool
trusts (`htgrid trust add`'s directory), certificates it issued."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from htgrid.net.security import MapFile
from htgrid.pool import trusted_ca_files
from htgrid.testing import PersonalPool

_NOW = datetime.datetime.now(datetime.UTC)


class SiteCA:
    """A grid CA of a site: it signs its users' certificates."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(hours=1))
            .not_valid_after(_NOW + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
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
            .sign(self.key, hashes.SHA256())
        )
        self.pem = directory / "ca.crt"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def user(self, name: str, *rdns: tuple[x509.ObjectIdentifier, str]) -> tuple[str, str]:
        """A user certificate whose subject is `rdns`, in order: (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in rdns]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(hours=1))
            .not_valid_after(_NOW + datetime.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        cert_file, key_file = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_file.chmod(0o600)
        return str(cert_file), str(key_file)


def _dn(*cns: str) -> list[tuple[x509.ObjectIdentifier, str]]:
    return [
        (NameOID.DOMAIN_COMPONENT, "org"),
        (NameOID.DOMAIN_COMPONENT, "example"),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, "People"),
        *((NameOID.COMMON_NAME, cn) for cn in cns),
    ]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PersonalPool, SiteCA]]:
    root = tmp_path_factory.mktemp("ssl")
    site = SiteCA(root / "site", "Example Grid CA")
    pool = PersonalPool(
        root / "pool",
        daemons=("MASTER", "SCHEDD", "COLLECTOR"),
        config={"UID_DOMAIN": "users.example.org"},
    )
    (pool.home / "etc").mkdir(exist_ok=True)
    (pool.home / "etc" / "mapfile").write_text(
        'SSL "/^\\/DC=org\\/DC=example\\/OU=People\\/CN=Jane Doe$/" jane\n'
        'GSI "^\\/DC=org\\/DC=example\\/OU=People\\/CN=Bob Roe$" bob\n'
    )
    trusted = pool.config.trusted_ca_dir
    trusted.mkdir(parents=True, exist_ok=True)
    (trusted / "example-grid.crt").write_bytes(site.pem.read_bytes())
    with pool:
        yield pool, site


def _client(
    pool: PersonalPool, cert: tuple[str, str] | None, url: str | None = None
) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(pool.config.ca_dir / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(*cert)
    return httpx.Client(base_url=url or pool.url, verify=context, timeout=30)


def _you(pool: PersonalPool, cert: tuple[str, str]) -> dict[str, object]:
    with _client(pool, cert) as http:
        answer = http.get("/v1/health")
    assert answer.status_code == 200, answer.text
    you: dict[str, object] = answer.json()["you"]
    return you


def test_a_mapped_dn_is_its_user_and_may_submit(pool: tuple[PersonalPool, SiteCA]) -> None:
    ce, site = pool
    jane = site.user("jane", *_dn("Jane Doe"))
    assert _you(ce, jane) == {"user": "jane", "admin": False}
    with _client(ce, jane) as http:
        reserved = http.post("/v1/clusters")
    assert reserved.status_code == 201, reserved.text
    bob = site.user("bob", *_dn("Bob Roe"))  # by a GSI line, read as SSL
    assert _you(ce, bob)["user"] == "bob"
    audit = (ce.home / "log" / "AuditLog").read_text()
    assert (
        'method=SSL issuer="/CN=Example Grid CA" subject="/DC=org/DC=example/OU=People/CN=Jane Doe"'
        in audit
    )
    assert 'mapped="jane@users.example.org" user="jane"' in audit


def test_an_unmapped_dn_may_read_but_not_submit(pool: tuple[PersonalPool, SiteCA]) -> None:
    ce, site = pool
    # The SSL line is anchored: a longer DN (a proxy's, say) is not Jane's.
    eve = site.user("eve", *_dn("Jane Doe", "Eve"))
    assert _you(ce, eve)["user"] == "ssl"  # HTCondor's ssl@unmapped
    with _client(ce, eve) as http:
        refused = http.post("/v1/clusters")
    assert refused.status_code == 403
    assert "does not grant WRITE" in refused.json()["detail"]


def test_a_certificate_of_a_ca_the_pool_does_not_trust_is_refused(
    pool: tuple[PersonalPool, SiteCA], tmp_path: Path
) -> None:
    ce, _ = pool
    rogue = SiteCA(tmp_path / "rogue", "Example Grid CA").user("jane", *_dn("Jane Doe"))
    with _client(ce, rogue) as http, pytest.raises(httpx.TransportError):
        http.get("/v1/health")
    # Without a certificate, nor a token: who it is, the API cannot tell.
    with _client(ce, None) as http:
        assert http.get("/v1/health").status_code == 401
    assert len(trusted_ca_files(ce.config)) == 2  # the pool's CA and the site's


def test_the_collector_takes_the_same_certificates(pool: tuple[PersonalPool, SiteCA]) -> None:
    ce, site = pool
    url = f"https://{ce.collector}"
    jane, eve = site.user("jane2", *_dn("Jane Doe")), site.user("eve2", *_dn("Eve"))
    for who in (jane, eve):  # anyone mapped or not reads the pool's ads
        with _client(ce, who, url) as http:
            assert http.get("/v1/ads", params={"type": "Schedd"}).status_code == 200
            # Advertising is a daemon's: neither a user nor ssl@unmapped may.
            refused = http.post("/v1/updates/UPDATE_STARTD_AD", json=[{"Name": "x"}])
            assert refused.status_code == 403
    with _client(ce, None, url) as http:
        assert http.get("/v1/ads").status_code == 401


def test_ssl_lines_quoted_as_htcondor_ces_map_files_write_them() -> None:
    mapped = MapFile.parse(
        'SSL "/^\\/DC=org\\/CN=(\\w+) Doe$/" \\1\n'
        'GSI "^\\/DC=org\\/CN=Bob Roe$" bob\n'
        'SSL "/DC=org/CN=Exact Name" exact\n'
    )
    assert mapped.lookup(["SSL"], "/DC=org/CN=Jane Doe")[0] == "Jane"  # type: ignore[index]
    assert mapped.lookup(["GSI"], "/DC=org/CN=Bob Roe")[0] == "bob"  # type: ignore[index]
    assert mapped.lookup(["GSI"], "/DC=org/CN=Bob Roe/CN=proxy") is None
    assert mapped.lookup(["SSL"], "/DC=org/CN=Exact Name")[0] == "exact"  # type: ignore[index]
    assert mapped.lookup(["SSL"], "/DC=org/CN=Exact Names") is None
