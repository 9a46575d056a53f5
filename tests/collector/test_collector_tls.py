"""The collector behind TLS and tokens: who may read, who may advertise, and what the
command line says to a user without the right token or CA."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.cli import main
from htgrid.collector import CollectorClient, CollectorRefused, CollectorUnavailable
from htgrid.net.security import (
    SecurityConfig,
    client_ssl_context,
    save_token,
    user_token_dir,
)
from htgrid.pool import trusted_ca_files
from htgrid.testing.collector import pool_home, user_token

from .conftest import DOMAIN

StartRequest = Callable[[str], tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]]

SITE = ClassAd({"MyType": "Machine", "Name": "site1", "Memory": 2048})


def _query(address: str, home: Path, token: str | None = None) -> list[ClassAd]:
    async def run() -> list[ClassAd]:
        async with CollectorClient(address, home=home, token=token) as client:
            return await client.query("Machine")

    return asyncio.run(run())


def _advertise(address: str, home: Path, **kw: object) -> None:
    async def run() -> None:
        async with CollectorClient(address, home=home, **kw) as client:  # type: ignore[arg-type]
            (result,) = await client.advertise("UPDATE_STARTD_AD", [SITE])
            assert result.accepted

    asyncio.run(run())


def test_the_daemon_token_advertises_and_a_user_token_reads(pool: str, home: Path) -> None:
    _advertise(pool, home, daemon=True)
    ads = _query(pool, home, user_token(home, "alice"))
    assert [ad["Name"] for ad in ads] == ["site1"]


def test_a_user_token_may_not_advertise_and_the_refusal_is_logged(
    pool: str, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="htgrid.net.security")
    with pytest.raises(CollectorRefused, match="ADVERTISE_STARTD") as err:
        _advertise(pool, home, token=user_token(home, "alice"))
    assert err.value.status == 403
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("UPDATE_STARTD_AD" in m and "alice@collector.test" in m for m in refusals)
    assert _query(pool, home, user_token(home, "alice")) == []  # nothing was stored


def test_no_token_or_a_forged_one_is_401_with_the_pools_realm(
    pool: str, home: Path, tmp_path: Path
) -> None:
    verify = client_ssl_context(trusted_ca_files(SecurityConfig.load(home)))
    with httpx.Client(base_url=f"https://{pool}", verify=verify) as http:
        bare = http.get("/v1/ads")
    assert bare.status_code == 401
    assert bare.headers["WWW-Authenticate"] == f'Bearer realm="{DOMAIN}"'
    # Same trust domain, another pool's key: the signature gives it away.
    impostor = pool_home(tmp_path / "impostor", DOMAIN)
    forged = user_token(impostor, "condor")
    with pytest.raises(CollectorRefused, match="signature") as err:
        _advertise(pool, home, token=forged)
    assert err.value.status == 401
    with pytest.raises(CollectorRefused) as err:
        _query(pool, home, forged)
    assert err.value.status == 401


def _client_home(tmp_path: Path, pool_dir: Path, *, trust: bool) -> Path:
    """Another pool's home on the same host, trusting `pool_dir`'s CA if asked."""
    other = pool_home(tmp_path / "client", "client.test")
    if trust:
        trusted = other / "etc" / "ca" / "trusted.d"
        trusted.mkdir(parents=True, exist_ok=True)
        shutil.copy(pool_dir / "etc" / "ca" / "ca.crt", trusted / "collector-test.crt")
    return other


def test_htgrid_status_from_another_pool_with_a_users_token(
    pool: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _advertise(pool, home, daemon=True)
    monkeypatch.setenv("HTGRID_HOME", str(_client_home(tmp_path, home, trust=True)))
    # No token of this pool yet: a clear refusal naming its trust domain.
    assert main(["status", "-pool", pool, "-af", "Name"]) == 1
    err = capsys.readouterr().err
    assert "collector.test" in err and "token" in err
    save_token(user_token_dir() / "collector", user_token(home, "alice"))
    assert main(["status", "-pool", pool, "-af", "Name"]) == 0
    assert capsys.readouterr().out.split() == ["site1"]


def test_a_collector_whose_ca_is_not_trusted_is_named_so(
    pool: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _client_home(tmp_path, home, trust=False)
    with pytest.raises(CollectorUnavailable, match=r"trusted\.d"):
        _query(pool, other, user_token(home, "alice"))


def test_a_request_cancelled_in_the_tls_handshake_leaves_no_socket_open(
    home: Path, cancelled_in_handshake: Callable[[StartRequest], tuple[int, list[str]]]
) -> None:
    """A daemon stopping while its collector is silent (dead, its listener kept by the
    master) cancels a request mid-handshake: the socket is closed then, not by the GC."""

    def start(address: str) -> tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]:
        client = CollectorClient(address, home=home, daemon=True)
        return client.health(), client.aclose

    assert cancelled_in_handshake(start) == (0, [])


def test_an_annex_token_advertises_the_hosts_under_its_name_and_no_other(
    pool: str, home: Path
) -> None:
    from htgrid.net.security import TokenIssuer

    token = TokenIssuer(SecurityConfig.load(home)).create(
        f"big.annex@{DOMAIN}", authz=["ADVERTISE_STARTD"], lifetime=600
    )

    def slot(machine: str, name: str | None = None) -> ClassAd:
        return ClassAd(
            {"MyType": "Machine", "Machine": machine, "Name": name or f"slot1@{machine}"}
        )

    async def send(ad: ClassAd) -> None:
        async with CollectorClient(pool, home=home, token=token) as client:
            (result,) = await client.advertise("UPDATE_STARTD_AD", [ad])
            assert result.accepted

    # Each instance of the annex is a host under big.annex: one token serves them all.
    asyncio.run(send(slot("i-0abc.big.annex")))
    asyncio.run(send(slot("i-0def.big.annex")))
    names = {ad["Name"] for ad in _query(pool, home, user_token(home, "alice"))}
    assert {"slot1@i-0abc.big.annex", "slot1@i-0def.big.annex"} <= names
    # Not another annex's, not a host merely ending alike, not a Name of another host.
    for bad in (
        slot("i-0abc.other.annex"),
        slot("i-0abcbig.annex"),
        slot("node7"),
        slot("i-0abc.big.annex", "slot1@node7"),
    ):
        with pytest.raises(CollectorRefused) as err:
            asyncio.run(send(bad))
        assert err.value.status == 403, bad


def test_an_annex_token_removes_the_slots_of_its_hosts_by_name_and_no_others(
    pool: str, home: Path
) -> None:
    """An annex's instance releases a dynamic slot: its startd removes the slot's ad by
    Name, and the Name's host is the instance (under the annex), not the annex itself."""
    from htgrid.net.security import TokenIssuer

    token = TokenIssuer(SecurityConfig.load(home)).create(
        f"big.annex@{DOMAIN}", authz=["ADVERTISE_STARTD"], lifetime=600
    )
    host, other = "i-0abc.big.annex", "node7"
    ads = [
        ClassAd({"MyType": "Machine", "Machine": machine, "Name": name})
        for machine, name in ((host, f"slot1@{host}"), (host, f"slot1_1@{host}"))
    ]
    alien = ClassAd({"MyType": "Machine", "Machine": other, "Name": f"slot1_1@{other}"})

    async def run() -> None:
        async with CollectorClient(pool, home=home, daemon=True) as daemon:
            await daemon.advertise("UPDATE_STARTD_AD", [alien])
        async with CollectorClient(pool, home=home, token=token) as node:
            await node.advertise("UPDATE_STARTD_AD", ads)
            gone = ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": f"slot1_1@{host}"})
            assert await node.invalidate("INVALIDATE_STARTD_ADS", gone) == 1
            for name in (f"slot1_1@{other}", "slot1_1@i-0abc.other.annex", "slot1_1@big.annexx"):
                query = ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": name})
                with pytest.raises(CollectorRefused) as err:
                    await node.invalidate("INVALIDATE_STARTD_ADS", query)
                assert err.value.status == 403, name

    asyncio.run(run())
    names = {ad["Name"] for ad in _query(pool, home, user_token(home, "alice"))}
    assert names == {f"slot1@{host}", f"slot1_1@{other}"}


def test_an_annex_token_registers_its_hosts_with_the_broker_and_no_others(
    pool: str, home: Path
) -> None:
    """An annex's instance behind NAT (CCB_ADDRESS, PRIVATE_NETWORK_NAME) registers with
    the broker as itself, a host under the annex, and advertises that registration."""
    from htgrid.net.security import TokenIssuer

    token = TokenIssuer(SecurityConfig.load(home)).create(
        f"big.annex@{DOMAIN}", authz=["ADVERTISE_STARTD"], lifetime=600
    )
    host = "i-0abc.big.annex"

    def ad(ccbid: str) -> ClassAd:
        slot = ClassAd({"MyType": "Machine", "Machine": host, "Name": f"slot1@{host}"})
        slot["MyAddress"] = f"<10.0.0.5:1?CCBID={pool}#{ccbid}>"
        return slot

    async def run() -> None:
        async with CollectorClient(pool, home=home, token=token) as node:
            async with contextlib.aclosing(node.ccb_requests(host, 5)) as registration:
                acknowledged = await anext(registration)
                assert acknowledged.connect_id == "", acknowledged  # registered
            (result,) = await node.advertise("UPDATE_STARTD_AD", [ad(host)])
            assert result.accepted
            for other in ("i-0abc.other.annex", "node7"):
                with pytest.raises(CollectorRefused):
                    async for _ in node.ccb_requests(other, 5):
                        pass
                with pytest.raises(CollectorRefused, match="its own broker registration"):
                    await node.advertise("UPDATE_STARTD_AD", [ad(other)])

    asyncio.run(run())


def test_an_execute_token_advertises_the_annex_name_of_its_own_annex_only(
    pool: str, home: Path
) -> None:
    # Jobs aimed at an annex match its slots by AnnexName; any user may get a token for
    # an annex of theirs from the schedd, so no token draws another annex's jobs.
    from htgrid.net.security import TokenIssuer

    issuer = TokenIssuer(SecurityConfig.load(home))
    big = issuer.create(f"big.annex@{DOMAIN}", authz=["ADVERTISE_STARTD"], lifetime=600)
    node7 = issuer.create(f"node7@{DOMAIN}", authz=["ADVERTISE_STARTD"], lifetime=600)

    def send(token: str, machine: str, annex: object) -> None:
        ad = ClassAd({"MyType": "Machine", "Machine": machine, "Name": f"slot1@{machine}"})
        ad["AnnexName"] = annex

        async def go() -> None:
            async with CollectorClient(pool, home=home, token=token) as client:
                (result,) = await client.advertise("UPDATE_STARTD_AD", [ad])
                assert result.accepted

        asyncio.run(go())

    send(big, "i-0abc.big.annex", "big")
    send(big, "i-0abc.big.annex", "BIG")  # ClassAd string equality ignores case
    for token, machine, annex in (
        (big, "i-0abc.big.annex", "other"),
        (big, "i-0abc.big.annex", 7),
        (node7, "node7", "big"),
    ):
        with pytest.raises(CollectorRefused) as err:
            send(token, machine, annex)
        assert err.value.status == 403 and "AnnexName" in str(err.value), annex
    names = {ad["Name"] for ad in _query(pool, home, user_token(home, "alice"))}
    assert "slot1@node7" not in names
