"""QUERY_MULTIPLE_ADS: several ad types in one query, as HTCondor's collector answers it
(the official client's `query(AdTypes.StartDaemon)`, and condor_status's multi-type
queries with their per-type Requirements, Projection and LimitResults)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import classad2
import htcondor2
import pytest

from htgrid.classad import ClassAd
from htgrid.testing import wait_for
from htgrid.testing.collector import pool_home

from .conftest import DOMAIN, Configure, Daemon, running_collector
from .test_cedar_limits import _RawClient
from .test_collector_cedar import _daemon, _machine, _schedd_ad


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Daemon]]:
    """A collector anyone may query (so that a bare CEDAR client reads in plaintext)."""
    tmp = tmp_path_factory.mktemp("multi")
    home = pool_home(tmp / "pool", DOMAIN, "SEC_READ_AUTHENTICATION = OPTIONAL\n")
    with running_collector(home, tmp / "CollectorLog") as daemon:
        yield home, daemon


def _startd_daemon_ad(name: str) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    ad["MyType"] = "StartD"
    ad["Name"] = name
    ad["MyAddress"] = "<127.0.0.1:9618?noUDP>"
    return ad


def _advertise_all(home: Path, daemon: Daemon, condor: Configure) -> htcondor2.Collector:
    condor(daemon.address, token=_daemon(home))
    c = htcondor2.Collector(daemon.address)
    c.advertise([_machine(f"slot1@m{i}", i, 100 * i) for i in range(1, 5)], "UPDATE_STARTD_AD")
    c.advertise([_schedd_ad("s1"), _schedd_ad("s2")], "UPDATE_SCHEDD_AD")
    c.advertise([_startd_daemon_ad("m1"), _startd_daemon_ad("m2")], "UPDATE_AD_GENERIC")
    wait_for(lambda: len(c.query(htcondor2.AdTypes.Any)) >= 9)
    return c


def _multi_query(address: str, lines: list[str]) -> list[ClassAd]:
    """A QUERY_MULTIPLE_ADS as condor_status sends one, on a plaintext session."""
    client = _RawClient(address)
    try:
        client.hello(53)
        return client.query(lines)
    finally:
        client.sock.close()


def test_the_clients_start_daemon_query(collector: tuple[Path, Daemon], condor: Configure) -> None:
    """`query(AdTypes.StartDaemon)` is a QUERY_MULTIPLE_ADS of TargetType "StartD":
    the startd daemons' ads, not their slots'."""
    home, daemon = collector
    c = _advertise_all(home, daemon, condor)
    found = c.query(htcondor2.AdTypes.StartDaemon)
    assert sorted(ad["Name"] for ad in found) == ["m1", "m2"]
    one = c.query(htcondor2.AdTypes.StartDaemon, 'Name == "m2"', ["Name"])
    assert [dict(ad) for ad in one] == [{"Name": "m2"}]


def test_several_types_with_their_own_requirements_projection_and_limit(
    collector: tuple[Path, Daemon], condor: Configure
) -> None:
    home, daemon = collector
    _advertise_all(home, daemon, condor)
    ads = _multi_query(
        daemon.address,
        [
            'MyType = "Query"',
            'TargetType = "Machine,Scheduler,StartD"',
            "MachineRequirements = Cpus >= 2",
            'MachineProjection = "Name Cpus"',
            "MachineLimitResults = 2",
            'Projection = "Name MyType"',
            'SchedulerRequirements = Name == "s2"',
        ],
    )
    machines = [ad for ad in ads if "Cpus" in ad]
    assert len(machines) == 2
    assert all(ad["Cpus"] >= 2 and set(ad.keys()) == {"Name", "Cpus"} for ad in machines)
    rest = [(ad["MyType"], ad["Name"]) for ad in ads if "Cpus" not in ad]
    # In the order of TargetType: the machines, then the schedd, then the startds.
    assert rest == [("Scheduler", "s2"), ("StartD", "m1"), ("StartD", "m2")] or rest == [
        ("Scheduler", "s2"),
        ("StartD", "m2"),
        ("StartD", "m1"),
    ]
    assert ads[:2] == machines
    # LimitResults caps the whole answer.
    capped = _multi_query(
        daemon.address,
        ['TargetType = "Scheduler,StartD"', "LimitResults = 3", 'Projection = "Name"'],
    )
    assert len(capped) == 3
    assert [ad["Name"] for ad in capped[:2]] in (["s1", "s2"], ["s2", "s1"])
