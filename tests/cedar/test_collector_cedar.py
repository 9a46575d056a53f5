"""htgrid's collector through the official `htcondor2.Collector`, over CEDAR, on the port
its HTTPS API serves: queries, locating daemons, advertising, and who is refused."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import classad2
import htcondor2
import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient
from htgrid.net.security import RevocationList, SecurityConfig, TokenIssuer, daemon_token
from htgrid.testing import wait_for
from htgrid.testing.collector import pool_home, user_token

from .conftest import DOMAIN, Configure, Daemon, running_collector


def _machine(name: str, cpus: int, memory: int) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    ad["MyType"] = "Machine"
    ad["Name"] = name
    ad["Machine"] = name.partition("@")[2] or name
    ad["Cpus"] = cpus
    ad["Memory"] = memory
    ad["MyAddress"] = "<127.0.0.1:9?noUDP>"
    ad["Requirements"] = classad2.ExprTree("TARGET.RequestCpus <= Cpus")
    return ad


def _schedd_ad(name: str) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    ad["MyType"] = "Scheduler"
    ad["Name"] = name
    ad["Machine"] = "host1"
    ad["MyAddress"] = "<127.0.0.1:9999?noUDP>"
    ad["CondorVersion"] = "$CondorVersion: 25.0.0 2025-01-01 BuildID: test $"
    ad["CondorPlatform"] = "$CondorPlatform: x86_64 $"
    return ad


def _daemon(home: Path) -> str:
    token = daemon_token(SecurityConfig.load(home))
    assert token is not None
    return token


def _advertise(collector: Daemon, home: Path, condor: Configure, ads: list, command: str) -> None:
    condor(collector.address, token=_daemon(home))
    htcondor2.Collector(collector.address).advertise(ads, command)


def _https_query(address: str, home: Path, ad_type: str) -> list[ClassAd]:
    async def run() -> list[ClassAd]:
        async with CollectorClient(address, home=home, daemon=True) as client:
            return await client.query(ad_type)

    return asyncio.run(run())


def test_query_constraint_projection_and_typed_values(
    collector: Daemon, home: Path, condor: Configure
) -> None:
    ads = [_machine(f"slot1@node{i}", cpus=i, memory=1024 * i) for i in range(1, 5)]
    _advertise(collector, home, condor, ads, "UPDATE_STARTD_AD")
    condor(collector.address, token=user_token(home, "alice"))
    c = htcondor2.Collector(collector.address)
    # An update has no answer: the ads are there once the collector has read them.
    wait_for(lambda: len(c.query(htcondor2.AdTypes.Startd)) == 4)
    found = c.query(htcondor2.AdTypes.Startd, "Cpus >= 3", ["Name", "Memory"])
    assert sorted(ad["Name"] for ad in found) == ["slot1@node3", "slot1@node4"]
    assert all(set(ad.keys()) == {"Name", "Memory"} for ad in found)
    assert {ad["Memory"] for ad in found} == {3072, 4096}
    whole = c.query(htcondor2.AdTypes.Startd, 'Name == "slot1@node2"')
    assert len(whole) == 1
    assert whole[0]["Cpus"] == 2
    assert str(whole[0].lookup("Requirements")) == "TARGET.RequestCpus <= Cpus"
    # Only machine ads for a machine query: the collector's own ad is not one.
    assert len(c.query(htcondor2.AdTypes.Startd)) == 4
    assert [ad["Name"] for ad in c.query(htcondor2.AdTypes.Collector)] == ["htgrid pool"]


def test_locate_locate_all_and_direct_query(
    collector: Daemon, home: Path, condor: Configure
) -> None:
    _advertise(
        collector, home, condor, [_schedd_ad("sched1"), _schedd_ad("sched2")], "UPDATE_SCHEDD_AD"
    )
    condor(collector.address, token=user_token(home, "alice"))
    c = htcondor2.Collector(collector.address)
    located = wait_for(
        lambda: (
            len(c.locateAll(htcondor2.DaemonTypes.Schedd)) == 2
            and c.locateAll(htcondor2.DaemonTypes.Schedd)
        )
    )
    assert sorted(ad["Name"] for ad in located) == ["sched1", "sched2"]
    one = c.locate(htcondor2.DaemonTypes.Schedd, "sched2")
    assert one["Name"] == "sched2"
    assert one["MyAddress"] == "<127.0.0.1:9999?noUDP>"
    me = c.locate(htcondor2.DaemonTypes.Collector)
    direct = c.directQuery(htcondor2.DaemonTypes.Collector, me["Name"])
    assert direct["Name"] == "htgrid pool"


def test_advertised_ads_are_the_https_sides_too(
    collector: Daemon, home: Path, condor: Configure
) -> None:
    """One store, two protocols on one port: what CEDAR advertises HTTPS reads."""
    _advertise(collector, home, condor, [_machine("slot1@n1", 8, 4096)], "UPDATE_STARTD_AD")
    ads = wait_for(lambda: _https_query(collector.address, home, "Machine"))
    assert [(ad["Name"], ad["Cpus"]) for ad in ads] == [("slot1@n1", 8)]


def test_a_users_token_may_read_but_not_advertise(
    collector: Daemon, home: Path, condor: Configure
) -> None:
    condor(collector.address, token=user_token(home, "alice"))
    c = htcondor2.Collector(collector.address)
    with pytest.raises(htcondor2.HTCondorException):
        c.advertise([_machine("slot1@evil", 1, 1)], "UPDATE_STARTD_AD")
    wait_for(lambda: "may not UPDATE_STARTD_AD" in collector.logged())
    assert "needs ADVERTISE_STARTD" in collector.logged()
    assert c.query(htcondor2.AdTypes.Startd) == []


def _refused(
    collector: Daemon, condor: Configure, token: str | None, methods: str = "TOKEN"
) -> None:
    condor(collector.address, token=token, methods=methods)
    with pytest.raises(htcondor2.HTCondorException):
        htcondor2.Collector(collector.address).query(htcondor2.AdTypes.Collector)


def test_a_forged_token_is_refused(
    collector: Daemon, home: Path, condor: Configure, tmp_path: Path
) -> None:
    # Same trust domain and key name, another key: its signature is not this pool's.
    other = pool_home(tmp_path / "other", DOMAIN)
    _refused(collector, condor, user_token(other, "alice"))
    wait_for(lambda: "forged" in collector.logged())


def test_an_expired_token_is_refused(collector: Daemon, home: Path, condor: Configure) -> None:
    config = SecurityConfig.load(home)
    old = TokenIssuer(config, clock=lambda: time.time() - 7200).create(
        f"alice@{DOMAIN}", lifetime=60
    )
    _refused(collector, condor, old)
    wait_for(lambda: "expired" in collector.logged())


def test_a_revoked_token_is_refused_even_on_a_resumed_session(
    collector: Daemon, home: Path, condor: Configure
) -> None:
    token = user_token(home, "alice")
    condor(collector.address, token=token)
    c = htcondor2.Collector(collector.address)
    assert c.query(htcondor2.AdTypes.Collector)  # a session is made, then resumed below
    payload = token.split(".")[1]
    jti = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]
    RevocationList(SecurityConfig.load(home).revocation_file).add(jti)
    with pytest.raises(htcondor2.HTCondorException):
        c.query(htcondor2.AdTypes.Collector)  # the session ends
    with pytest.raises(htcondor2.HTCondorException):
        c.query(htcondor2.AdTypes.Collector)  # and a new one is not made
    wait_for(lambda: "has been revoked" in collector.logged())


def test_anonymous_and_claimtobe_read_nothing(collector: Daemon, condor: Configure) -> None:
    _refused(collector, condor, None, methods="ANONYMOUS,CLAIMTOBE")
    wait_for(lambda: "no authentication method in common" in collector.logged())


def test_anonymous_reads_where_the_pool_lets_anyone_read(
    home: Path, condor: Configure, tmp_path: Path
) -> None:
    """SEC_READ_AUTHENTICATION = OPTIONAL: a client without a token queries, and still
    may not advertise."""
    with (home / "htgrid.conf").open("a") as conf:
        conf.write("SEC_READ_AUTHENTICATION = OPTIONAL\n")
    with running_collector(home, tmp_path / "CollectorLog") as collector:
        condor(collector.address, token=None)
        c = htcondor2.Collector(collector.address)
        assert [ad["Name"] for ad in c.query(htcondor2.AdTypes.Collector)] == ["htgrid pool"]
        wait_for(lambda: "known as unauthenticated@unmapped" in collector.logged())
        with pytest.raises(htcondor2.HTCondorException):
            c.advertise([_machine("slot1@anon", 1, 1)], "UPDATE_STARTD_AD")
        assert c.query(htcondor2.AdTypes.Startd) == []


def test_no_token_is_refused(collector: Daemon, condor: Configure) -> None:
    _refused(collector, condor, None)
    wait_for(lambda: "authentication failed" in collector.logged())


@pytest.mark.parametrize("with_token", [True, False])
def test_the_clients_defaults(
    collector: Daemon, home: Path, condor: Configure, with_token: bool
) -> None:
    """No SEC_* settings at all (methods FS,TOKEN,KERBEROS,SCITOKENS,SSL, everything
    OPTIONAL): the token when there is one, else FS; encrypted either way."""
    token = user_token(home, "alice") if with_token else None
    condor(collector.address, token=token, methods=None, recommended=False)
    ads = htcondor2.Collector(collector.address).query(htcondor2.AdTypes.Collector)
    assert [ad["Name"] for ad in ads] == ["htgrid pool"]
    expected = "alice@cedar.test (IDTOKENS)" if with_token else "(FS)"
    wait_for(lambda: expected in collector.logged())


def test_fs_names_the_local_user(collector: Daemon, condor: Configure) -> None:
    condor(collector.address, methods="FS")
    ads = htcondor2.Collector(collector.address).query(htcondor2.AdTypes.Collector)
    assert [ad["Name"] for ad in ads] == ["htgrid pool"]
    wait_for(lambda: "(FS) for QUERY_COLLECTOR_ADS" in collector.logged())
