"""SSL authentication over CEDAR, judged by the official client: TLS with the pool CA's
certificates inside CEDAR messages, the client's certificate mapped by the map file's SSL
lines (as on the HTTPS side); one from another CA, or one no line maps, is refused."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import htcondor2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htgrid.net.cedar import CedarCall, CedarService, Command, Level
from htgrid.net.cedar._auth_ssl import subject_oneline
from htgrid.net.security import (
    CertFiles,
    PoolCA,
    Principal,
    SecurityConfig,
    UnmappedIdentity,
    self_signed_cert,
    server_ssl_context,
)
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.collector import pool_home

from .conftest import DOMAIN, SRC, Configure, Daemon, running_collector
from .test_collector_cedar import _schedd_ad
from .test_fuzz import _auth_ad, _packet, _security, _serve_once


@dataclass
class SslPool:
    home: Path
    ca: PoolCA
    collector: Daemon
    address: str  # by host name: the client checks that the daemon's certificate names it


def _dn(name: str) -> str:
    return f"/O=htgrid/CN={name}@{socket.gethostname()}"


def _by_name(daemon: Daemon) -> str:
    return "localhost:" + daemon.address.rpartition(":")[2]


@pytest.fixture(scope="module")
def ssl_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = pool_home(tmp_path_factory.mktemp("ssl") / "pool", DOMAIN)
    (home / "etc" / "mapfile").write_text(
        f'SSL "{_dn("alice")}" alice\nSSL /^\\/O=htgrid\\/CN=pilot@/ condor\n'
    )
    return home


@pytest.fixture
def pool(ssl_home: Path, tmp_path: Path) -> Iterator[SslPool]:
    """A collector of its own for each test: the client caches its sessions by the
    daemon's address for the life of the process."""
    ca = PoolCA(SecurityConfig.load(ssl_home).ca_dir)
    with running_collector(ssl_home, tmp_path / "CollectorLog") as collector:
        yield SslPool(ssl_home, ca, collector, _by_name(collector))


@pytest.fixture(autouse=True)
def _user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The client keeps the hosts it trusted in ~/.condor/known_hosts.
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


def _ssl_client(
    condor: Configure, address: str, ca: Path, cert: CertFiles | None, extra: str = ""
) -> htcondor2.Collector:
    lines = [f"AUTH_SSL_CLIENT_CAFILE = {ca}", extra]
    if cert is not None:
        lines += [
            f"AUTH_SSL_CLIENT_CERTFILE = {cert.cert}",
            f"AUTH_SSL_CLIENT_KEYFILE = {cert.key}",
        ]
    condor(address, methods="SSL", extra="\n".join(lines))
    return htcondor2.Collector(address)


def test_a_certificate_the_map_file_maps_queries(pool: SslPool, condor: Configure) -> None:
    c = _ssl_client(condor, pool.address, pool.ca.cert_path, pool.ca.issue("alice"))
    assert [ad["Name"] for ad in c.query(htcondor2.AdTypes.Collector)] == ["htgrid pool"]
    log = pool.collector.logged()
    assert "known as alice@" in log
    assert "(SSL) for QUERY_COLLECTOR_ADS" in log
    # The session is resumed: the next query needs no TLS handshake of its own.
    assert [ad["Name"] for ad in c.query(htcondor2.AdTypes.Collector)] == ["htgrid pool"]
    assert pool.collector.logged().count("(SSL) for QUERY_COLLECTOR_ADS") == log.count(
        "(SSL) for QUERY_COLLECTOR_ADS"
    )


def test_a_certificate_mapped_to_an_administrator_advertises(
    pool: SslPool, condor: Configure
) -> None:
    """The map file names the pilot's certificate `condor`, one of the pool's
    administrators: it may advertise, which alice's may not."""
    alice = _ssl_client(condor, pool.address, pool.ca.cert_path, pool.ca.issue("alice"))
    with pytest.raises(htcondor2.HTCondorException):
        alice.advertise([_schedd_ad("alices-schedd")], "UPDATE_SCHEDD_AD")
    wait_for(lambda: "may not UPDATE_SCHEDD_AD" in pool.collector.logged())
    c = _ssl_client(condor, pool.address, pool.ca.cert_path, pool.ca.issue("pilot"))
    c.advertise([_schedd_ad("ssl-schedd")], "UPDATE_SCHEDD_AD")
    found = wait_for(lambda: c.query(htcondor2.AdTypes.Schedd, 'Name == "ssl-schedd"'))
    assert found[0]["MyAddress"] == "<127.0.0.1:9999?noUDP>"
    assert c.query(htcondor2.AdTypes.Schedd, 'Name == "alices-schedd"') == []


def test_a_certificate_of_another_ca_is_refused(
    pool: SslPool, condor: Configure, tmp_path: Path
) -> None:
    """Same subject, another CA: the TLS handshake fails."""
    other = PoolCA(tmp_path / "other-ca")
    other.ensure()
    c = _ssl_client(condor, pool.address, pool.ca.cert_path, other.issue("alice"))
    with pytest.raises(htcondor2.HTCondorException):
        c.query(htcondor2.AdTypes.Collector)
    wait_for(lambda: "SSL: the TLS handshake failed" in pool.collector.logged())


def test_a_certificate_no_line_maps_is_refused(pool: SslPool, condor: Configure) -> None:
    c = _ssl_client(condor, pool.address, pool.ca.cert_path, pool.ca.issue("mallory"))
    with pytest.raises(htcondor2.HTCondorException):
        c.query(htcondor2.AdTypes.Collector)
    wait_for(lambda: f"maps '{_dn('mallory')}'" in pool.collector.logged())


def test_no_certificate_is_refused_where_reading_needs_authentication(
    pool: SslPool, condor: Configure
) -> None:
    c = _ssl_client(condor, pool.address, pool.ca.cert_path, None)
    with pytest.raises(htcondor2.HTCondorException):
        c.query(htcondor2.AdTypes.Collector)
    wait_for(lambda: "presented no certificate" in pool.collector.logged())


def test_no_certificate_reads_where_the_pool_lets_anyone_read(
    condor: Configure, tmp_path: Path
) -> None:
    """SEC_READ_AUTHENTICATION = OPTIONAL and a client that insists on authenticating:
    SSL without a certificate is `unauthenticated`, which reads and does not advertise."""
    home = pool_home(tmp_path / "pool", DOMAIN, "SEC_READ_AUTHENTICATION = OPTIONAL\n")
    ca = PoolCA(SecurityConfig.load(home).ca_dir)
    with running_collector(home, tmp_path / "CollectorLog") as collector:
        c = _ssl_client(
            condor, _by_name(collector), ca.cert_path, None, "SEC_CLIENT_AUTHENTICATION = REQUIRED"
        )
        assert [ad["Name"] for ad in c.query(htcondor2.AdTypes.Collector)] == ["htgrid pool"]
        assert "known as unauthenticated@unmapped" in collector.logged()
        with pytest.raises(htcondor2.HTCondorException):
            c.advertise([_schedd_ad("anon")], "UPDATE_SCHEDD_AD")


def test_the_subject_is_named_as_openssl_names_it() -> None:
    """X509_NAME_oneline's form, which HTCondor's map files are written against."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org"),
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "People"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Jane Doe"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "jane@example.org"),
        ]
    )
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    assert subject_oneline(cert.public_bytes(Encoding.DER)) == (
        "/DC=org/DC=example/OU=People/CN=Jane Doe/emailAddress=jane@example.org"
    )


def _ssl_service(tmp: Path) -> CedarService:
    cert = self_signed_cert(tmp / "d.crt", tmp / "d.key", "fuzz", ["localhost"])
    context = server_ssl_context(cert, client_cas=[cert.cert])

    def user(subject: str | None) -> Principal:
        raise UnmappedIdentity(f"fuzzing {subject}")

    security = replace(
        _security(), read_authentication=Level.REQUIRED, tls=lambda: context, ssl_user=user
    )

    async def query(call: CedarCall) -> None:
        await call.send(call.writer().int(0))

    return CedarService("fuzz", [Command(5, "QUERY", "READ", query)], security)


_SSL_HELLO = _auth_ad(
    [
        "Command = 5",
        'AuthMethods = "SSL"',
        'AuthenticationNew = "REQUIRED"',
        'Encryption = "NEVER"',
        'Integrity = "NEVER"',
    ]
) + _packet(struct.pack(">q", 256))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    opening=st.sampled_from([0, -1, 3, 1 << 40]),
    messages=st.lists(
        st.tuples(
            st.sampled_from([-1, 0, 1, 2, 3, 4, 99]),
            st.integers(-2, 1 << 21),
            st.binary(max_size=200),
        ),
        max_size=6,
    ),
)
def test_random_ssl_exchanges_end_the_connection_with_a_reason(
    opening: int,
    messages: list[tuple[int, int, bytes]],
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After the client picks SSL: any opening status and any TLS messages (statuses out
    of range, lengths that lie, bytes that are no TLS) end that connection, logged."""
    caplog.set_level(logging.INFO, logger="htgrid.net.cedar")
    caplog.clear()
    service = _ssl_service(tmp_path_factory.mktemp("fuzz"))
    data = _SSL_HELLO + _packet(struct.pack(">q", opening))
    for status, length, body in messages:
        data += _packet(struct.pack(">qq", status, length) + body)
    asyncio.run(_serve_once(data, service))
    assert not [r for r in caplog.records if r.exc_info]
    assert any(r.levelno >= logging.INFO for r in caplog.records if r.name == "htgrid.net.cedar")


@pytest.fixture(scope="module")
def schedd_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("ssl-schedd") / "pool"
    os.environ["PYTHONPATH"] = SRC
    pool = PersonalPool(home, kill_grace=2, fsync=False, daemons=("MASTER", "SCHEDD", "COLLECTOR"))
    (home / "etc").mkdir(parents=True, exist_ok=True)
    (home / "etc" / "mapfile").write_text(f'SSL "{_dn("submitter")}" root\n')
    with pool:
        yield pool


def test_the_schedd_takes_ssl_too(
    schedd_pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """The schedd located through the collector, by SSL with a certificate the map file
    names root: it submits and queries. (The schedd's address is its IP, which the
    client cannot check a certificate's names against: SSL_SKIP_HOST_CHECK.)"""
    ca = PoolCA(SecurityConfig.load(schedd_pool.home).ca_dir)
    collector = _ssl_client(
        condor,
        "localhost:" + schedd_pool.collector.rpartition(":")[2],
        ca.cert_path,
        ca.issue("submitter"),
        "SSL_SKIP_HOST_CHECK = true",
    )
    schedd = htcondor2.Schedd(wait_for(lambda: collector.locate(htcondor2.DaemonTypes.Schedd)))
    submit = htcondor2.Submit(
        {"executable": "/bin/true", "requirements": "false", "log": str(tmp_path / "log")}
    )
    cluster = schedd.submit(submit).cluster()
    assert [ad["Owner"] for ad in schedd.query(f"ClusterId == {cluster}", ["Owner"])] == ["root"]
    log = (schedd_pool.home / "log" / "SchedLog").read_text(errors="replace")
    assert "(SSL) for QMGMT_WRITE_CMD" in log


def test_a_client_slow_at_every_ssl_message_is_cut_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each TLS message within the timeout, none ever finishing the handshake: the
    exchange's own deadline ends it, as one silent message would."""
    caplog.set_level(logging.INFO, logger="htgrid.net.cedar")

    async def crawl() -> int:
        service = _ssl_service(tmp_path)
        service.handshake_timeout = 0.4
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=theirs)
        serving = asyncio.create_task(service.serve(reader, writer))
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(ours, _SSL_HELLO + _packet(struct.pack(">q", 0)))
        sent = 0
        while not serving.done() and sent < 60:
            with contextlib.suppress(ConnectionError):
                await loop.sock_sendall(ours, _packet(struct.pack(">qq", 2, 0)))
            sent += 1
            await asyncio.sleep(0.3)
        await asyncio.wait_for(serving, 10)
        ours.close()
        return sent

    assert asyncio.run(crawl()) < 10  # 3 timeouts' worth, not 60 messages' worth
    assert any("the exchange took more than" in r.getMessage() for r in caplog.records)
