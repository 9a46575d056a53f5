"""The MyProxy client against a real myproxy-server (`.ci/myproxy-up.sh`): a stored
credential's proxy got with its passphrase, a wrong passphrase refused with the server's
reason (never the passphrase), a server that is not the one named refused. Skipped
without the server, except in CI."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from htgrid.client.myproxy import MyProxyError, MyProxyRefused, MyProxyServer, get_delegation
from htgrid.client.x509 import read_proxy
from htgrid.testing.myproxy import MYPROXY_PORT, destroy_credential, new_credential, require_myproxy

require_myproxy(module=True)

SERVER = MyProxyServer("localhost", MYPROXY_PORT)
PASSPHRASE = "htgrid-" + secrets.token_hex(6)


@pytest.fixture(scope="module")
def credential() -> Iterator[str]:
    name = new_credential("htgrid-client", PASSPHRASE)
    yield name
    destroy_credential("htgrid-client", name)


def test_a_stored_credential_gives_a_proxy_of_its_identity(credential: str, tmp_path: Path) -> None:
    pem = get_delegation(
        SERVER, "htgrid-client", PASSPHRASE, lifetime=900, credential_name=credential
    )
    (tmp_path / "proxy").write_bytes(pem)
    info = read_proxy(tmp_path / "proxy")
    assert info.identity == "/DC=org/DC=realgridtest/CN=Test User"
    assert 800 < info.expiration - time.time() <= 900
    # The file grid-proxy-init writes: the proxy, its key (which signs for it), the chain.
    key = serialization.load_pem_private_key(pem, password=None)
    first = x509.load_pem_x509_certificates(pem)[0]
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    assert first.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
    # Presenting that proxy, as the grid manager presents the job's, works too.
    again = get_delegation(
        SERVER,
        "htgrid-client",
        PASSPHRASE,
        lifetime=600,
        credential_name=credential,
        client_proxy=str(tmp_path / "proxy"),
    )
    assert read_proxy("again", data=again).identity == info.identity


def test_a_wrong_passphrase_is_refused_with_the_servers_reason(credential: str) -> None:
    wrong = "not-" + PASSPHRASE
    with pytest.raises(MyProxyRefused) as refused:
        get_delegation(SERVER, "htgrid-client", wrong, lifetime=600, credential_name=credential)
    assert "password" in str(refused.value).lower()
    assert wrong not in str(refused.value) and PASSPHRASE not in str(refused.value)


def test_a_server_that_is_not_the_one_named_is_refused(credential: str) -> None:
    other = MyProxyServer("127.0.0.1", MYPROXY_PORT, "/DC=org/CN=another myproxy")
    with pytest.raises(MyProxyError, match="not MyProxyServerDN /DC=org/CN=another myproxy"):
        get_delegation(other, "htgrid-client", PASSPHRASE, lifetime=600, credential_name=credential)
    named = MyProxyServer("127.0.0.1", MYPROXY_PORT, "/DC=org/DC=realgridtest/CN=localhost")
    pem = get_delegation(
        named, "htgrid-client", PASSPHRASE, lifetime=600, credential_name=credential
    )
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_myproxyhost_is_host_and_port() -> None:
    assert MyProxyServer.parse("myproxy.example.org") == MyProxyServer("myproxy.example.org")
    assert MyProxyServer.parse("localhost:7600", "/CN=x") == MyProxyServer(
        "localhost", 7600, "/CN=x"
    )
    assert MyProxyServer.parse("[::1]:7512") == MyProxyServer("::1", 7512)
    for bad in ("host:port", "host:0", "", "a b"):
        with pytest.raises(MyProxyError, match="MyProxyHost"):
            MyProxyServer.parse(bad)
