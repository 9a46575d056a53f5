"""Execute nodes of other machines join a pool: over TLS, with the token its administrator
made for them and its CA; the collector takes from a node's token its own ads only; a
node the pool refuses exits non-zero and says why."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from htgrid.classad import ClassAd, ExprTree
from htgrid.collector import CollectorClient, CollectorRefused
from htgrid.net.security import SecurityConfig
from htgrid.startd import TLS_CERTIFICATE, host_port_of
from htgrid.testing import QUEUE_ONLY, PersonalPool, run_cli
from htgrid.testing.node import ExecuteNode


def _presented(address: str) -> bytes:
    """The certificate (DER) the server at `<host:port>` presents."""
    where = host_port_of(address)
    assert where is not None, address
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only to look
    with socket.create_connection(where, timeout=10) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_a_node_joins_over_tls_on_its_own_address_with_its_token(
    pool: PersonalPool, tmp_path: Path
) -> None:
    with ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2") as node:
        (slot,) = node.joined()
        assert slot["Name"] == "slot1@node2"
        assert slot["Machine"] == "node2"
        assert slot["Cpus"] == 2 and slot["Memory"] == 2048
        address = slot["MyAddress"]
        assert address.startswith("<127.0.0.2:"), address
        # What the ad names is what the node presents there: schedds may pin it.
        pinned = x509.load_pem_x509_certificate(slot[TLS_CERTIFICATE].encode())
        assert _presented(address) == pinned.public_bytes(serialization.Encoding.DER)
        san = pinned.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.2" in {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
        assert node.process is not None and node.process.poll() is None
        assert node.stop() == 0
    # It took its ads with it.
    assert node.slots() == []


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("no token", "wants a token of its pool"),
        ("another node's name", "may advertise the slots of node 'node4' only"),
        ("a user's token", "does not grant ADVERTISE_STARTD"),
        ("a token of another pool's key", "signature does not match its signing key"),
        ("a revoked token", "has been revoked"),
    ],
)
def test_a_node_the_pool_refuses_exits_non_zero_saying_why(
    pool: PersonalPool, tmp_path: Path, case: str, why: str
) -> None:
    home = tmp_path / "node3"
    if case == "no token":
        node = ExecuteNode(pool, home, "node3", "127.0.0.3", token=False)
    elif case == "another node's name":
        node = ExecuteNode(pool, home, "node3", "127.0.0.3", identity=f"node4@{pool_domain(pool)}")
    elif case == "a user's token":
        node = ExecuteNode(pool, home, "node3", "127.0.0.3", authz=("READ", "WRITE"))
    elif case == "a token of another pool's key":
        other = PersonalPool(tmp_path / "other", daemons=QUEUE_ONLY)
        node = ExecuteNode(pool, home, "node3", "127.0.0.3", token=False)
        token = other.token(f"node3@{pool_domain(pool)}", authz=["ADVERTISE_STARTD"])
        node.token_file.parent.mkdir(parents=True, exist_ok=True)
        node.token_file.write_text(token + "\n")
        node.token_file.chmod(0o600)
    else:
        node = ExecuteNode(pool, home, "node3", "127.0.0.3")
        status, _, err = run_cli(pool.home, "token", "revoke", "-token", str(node.token_file))
        assert status == 0, err
    with node:
        status = node.wait(60)
    log = node.log()
    assert status == 1, log
    assert "refuses this execute node" in log and why in log, log
    assert node.slots() == []


def pool_domain(pool: PersonalPool) -> str:
    return SecurityConfig.load(pool.home).trust_domain


def test_a_nodes_token_advertises_and_invalidates_that_nodes_ads_only(
    pool: PersonalPool, tmp_path: Path
) -> None:
    domain = pool_domain(pool)
    node_token = pool.token(f"node5@{domain}", authz=["ADVERTISE_STARTD"])
    other = ClassAd({"MyType": "Machine", "Name": "slot1@node6", "Machine": "node6"})
    own = ClassAd({"MyType": "Machine", "Name": "slot1@node5", "Machine": "node5"})
    forged = ClassAd({"MyType": "Machine", "Name": "slot1@node6", "Machine": "node5"})

    async def scenario() -> None:
        async with (
            CollectorClient(pool.collector, home=pool.home, daemon=True) as daemon,
            CollectorClient(pool.collector, home=pool.home, token=node_token) as node,
        ):
            await daemon.advertise("UPDATE_STARTD_AD", [other])
            (result,) = await node.advertise("UPDATE_STARTD_AD", [own])
            assert result.accepted
            for ads in ([other], [own, forged]):
                with pytest.raises(CollectorRefused, match="node 'node5' only") as refused:
                    await node.advertise("UPDATE_STARTD_AD", ads)
                assert refused.value.status == 403
            everything = ClassAd({"MyType": "Query", "TargetType": "Machine"})
            everything["Requirements"] = ExprTree("true")
            assert await node.invalidate("INVALIDATE_STARTD_ADS", everything) == 1
            with pytest.raises(CollectorRefused, match="node 'node5' only"):
                await node.invalidate("INVALIDATE_STARTD_ADS", ClassAd({"Name": "slot1@node6"}))
            names = {ad["Name"] for ad in await daemon.query("Machine")}
            assert "slot1@node6" in names and "slot1@node5" not in names
            await daemon.invalidate("INVALIDATE_STARTD_ADS", ClassAd({"Name": "slot1@node6"}))

    asyncio.run(scenario())


def test_a_wildcard_network_interface_is_refused_with_the_reason(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node = ExecuteNode(pool, tmp_path / "node8", "node8", "0.0.0.0")
    with node:
        status = node.wait(60)
    assert status == 1, node.log()
    assert "NETWORK_INTERFACE = 0.0.0.0: name the one address schedds reach" in node.log()
    assert node.slots() == []


def test_a_node_killed_and_started_again_replaces_its_ads_in_the_collector(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """A node killed -9 invalidates nothing; started again, on another port, its ads
    replace those of its predecessor (condor_collector keys a startd's ads by name and
    host): jobs are not matched to a node that is gone until its ads expire."""
    node = ExecuteNode(pool, tmp_path / "node7", "node7", "127.0.0.7")
    try:
        node.start()
        (first,) = node.joined()
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        node.start()
        (again,) = node.joined()  # this run's, not what the killed one left
        assert again["MyAddress"] != first["MyAddress"]
        assert [ad["MyAddress"] for ad in node.slots()] == [again["MyAddress"]]
    finally:
        node.close()
