"""The collector's memory: what admins notice of condor_collector's update semantics."""

from __future__ import annotations

import functools
import json
from copy import copy

import pytest

from htgrid.classad import ClassAd, parseOne
from htgrid.collector import (
    AdStore,
    AdType,
    InvalidAd,
    InvalidQuery,
    UnknownCommand,
    parse_command,
)
from htgrid.errors import ClassAdSyntaxError


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def slot(name: str, **attrs: object) -> ClassAd:
    ad = ClassAd({"MyType": "Machine", "Name": name, "OpSys": "LINUX", "Memory": 2048})
    for key, value in attrs.items():
        ad[key] = value
    return ad


def names(ads: list[ClassAd]) -> list[str]:
    return [str(ad["Name"]) for ad in ads]


def test_an_update_replaces_the_daemons_previous_ad_and_is_stamped() -> None:
    clock = Clock()
    store = AdStore(clock=clock)
    assert store.update("UPDATE_STARTD_AD", slot("slot1@a", Memory=1024)).accepted
    clock.now += 10
    store.update("UPDATE_STARTD_AD", slot("slot1@a", Memory=4096))
    (ad,) = store.query("Machine")
    assert ad["Memory"] == 4096
    assert ad["LastHeardFrom"] == int(clock.now)


def test_a_startd_restarted_on_another_port_replaces_its_ads() -> None:
    """condor_collector keys a startd's ads by name and host: the ads of a node that
    stopped without invalidating them (killed, or its invalidation lost) are replaced by
    its successor's, on another port, not matched beside them until they expire. Other
    nodes of the same host, and the same name on another host, stay apart."""
    store = AdStore(clock=Clock())
    for port, started in ((40001, 1), (40002, 2)):
        address = f"<127.0.0.2:{port}?CCBID=127.0.0.1:9618%23node2>"
        store.update(
            "UPDATE_STARTD_AD",
            slot("slot1@node2", MyAddress=address, DaemonStartTime=started),
        )
    store.update("UPDATE_STARTD_AD", slot("slot1@node3", MyAddress="<127.0.0.2:40003>"))
    store.update("UPDATE_STARTD_AD", slot("slot1@node2", MyAddress="<[::1]:40001>"))
    store.update("UPDATE_STARTD_AD", slot("slot1@node2", MyAddress="<host?sock=/a/s.sock>"))
    ads = store.query("Machine")
    assert sorted((str(ad["Name"]), str(ad["MyAddress"])) for ad in ads) == [
        ("slot1@node2", "<127.0.0.2:40002?CCBID=127.0.0.1:9618%23node2>"),
        ("slot1@node2", "<[::1]:40001>"),
        ("slot1@node2", "<host?sock=/a/s.sock>"),
        ("slot1@node3", "<127.0.0.2:40003>"),
    ]


def test_ads_expire_after_their_lifetime_unless_refreshed() -> None:
    clock = Clock()
    store = AdStore(clock=clock, default_lifetime=900)
    store.update("UPDATE_STARTD_AD", slot("short", ClassAdLifetime=100))
    store.update("UPDATE_STARTD_AD", slot("cron", UpdateInterval=300))  # three missed updates
    store.update("UPDATE_STARTD_AD", slot("plain"))
    clock.now += 99
    assert names(store.query("Machine")) == ["short", "cron", "plain"]
    clock.now += 2
    assert names(store.query("Machine")) == ["cron", "plain"]  # gone at once from answers
    clock.now += 800  # 901 s after the updates
    assert names(store.query("Machine")) == []
    store.update("UPDATE_STARTD_AD", slot("plain"))  # a refresh starts the clock again
    assert store.expire() == 2  # ... and housekeeping frees the memory of the others
    assert names(store.query("Machine")) == ["plain"]


def test_an_older_update_does_not_overwrite_a_newer_one() -> None:
    store = AdStore(clock=Clock())
    store.update("UPDATE_STARTD_AD", slot("s", UpdateSequenceNumber=5, Memory=1))
    stale = store.update("UPDATE_STARTD_AD", slot("s", UpdateSequenceNumber=4, Memory=2))
    assert not stale.accepted
    assert "UpdateSequenceNumber 4" in stale.reason
    assert store.query("Machine")[0]["Memory"] == 1
    # The same number again (a resend) and a higher one are taken.
    assert store.update("UPDATE_STARTD_AD", slot("s", UpdateSequenceNumber=5, Memory=3)).accepted
    assert store.update("UPDATE_STARTD_AD", slot("s", UpdateSequenceNumber=9, Memory=4)).accepted
    assert store.query("Machine")[0]["Memory"] == 4


def test_a_restarted_daemon_counts_again_and_the_collector_counts_lost_updates() -> None:
    store = AdStore(clock=Clock())
    for seq in (1, 2, 5):  # 3 and 4 never arrived
        store.update(
            "UPDATE_SCHEDD_AD",
            ClassAd({"Name": "schedd@a", "DaemonStartTime": 100, "UpdateSequenceNumber": seq}),
        )
    ad = store.query("Scheduler")[0]
    assert (ad["UpdatesTotal"], ad["UpdatesSequenced"], ad["UpdatesLost"]) == (3, 3, 2)
    assert ad["MyType"] == "Scheduler"  # filled in from the command
    restarted = ClassAd({"Name": "schedd@a", "DaemonStartTime": 200, "UpdateSequenceNumber": 1})
    assert store.update("UPDATE_SCHEDD_AD", restarted).accepted
    ad = store.query("Scheduler")[0]
    assert (ad["UpdateSequenceNumber"], ad["UpdatesTotal"], ad["UpdatesLost"]) == (1, 1, 0)


def test_invalidation_by_requirements_as_in_the_condor_advertise_manual() -> None:
    store = AdStore(clock=Clock())
    for name in ("condor.example.com", "other.example.com"):
        store.update("UPDATE_STARTD_AD", slot(name))
    query = parseOne(
        'MyType = "Query"\nTargetType = "Machine"\nRequirements = Name == "condor.example.com"\n'
    )
    assert store.invalidate("INVALIDATE_STARTD_ADS", query) == 1
    assert names(store.query("Machine")) == ["other.example.com"]


def test_invalidation_by_name_and_of_generic_ads() -> None:
    store = AdStore(clock=Clock())
    store.update("UPDATE_STARTD_AD", slot("a", MyAddress="<10.0.0.1:9618>"))
    store.update("UPDATE_STARTD_AD", slot("a", MyAddress="<10.0.0.2:9618>"))
    gone = store.invalidate(
        "INVALIDATE_STARTD_ADS", ClassAd({"Name": "a", "MyAddress": "<10.0.0.1:9618>"})
    )
    assert gone == 1
    assert store.query("Machine", projection=["MyAddress"])[0]["MyAddress"] == "<10.0.0.2:9618>"
    store.update("UPDATE_AD_GENERIC", ClassAd({"MyType": "Sensor", "Name": "t1"}))
    assert names(store.query("Sensor")) == ["t1"]
    query = ClassAd({"MyType": "Query", "TargetType": "Sensor", "Requirements": True})
    assert store.invalidate("INVALIDATE_ADS_GENERIC", query) == 1
    with pytest.raises(InvalidAd):
        store.invalidate("INVALIDATE_STARTD_ADS", ClassAd({"MyType": "Query"}))


def test_ads_the_collector_cannot_store_are_refused() -> None:
    store = AdStore(clock=Clock())
    with pytest.raises(InvalidAd, match="no Name"):
        store.update("UPDATE_STARTD_AD", ClassAd({"Memory": 1}))
    with pytest.raises(InvalidAd, match='MyType = "Scheduler"'):
        store.update("UPDATE_SCHEDD_AD", slot("x"))
    with pytest.raises(InvalidAd, match="MyType"):
        store.update("UPDATE_AD_GENERIC", ClassAd({"Name": "x"}))
    with pytest.raises(UnknownCommand):
        parse_command("UPDATE_TOASTER_AD")
    # A startd ad may be known by its Machine alone, as condor_collector allows.
    assert store.update("UPDATE_STARTD_AD", ClassAd({"Machine": "m1"})).name == "m1"


def test_constraint_queries_with_projection_and_limit() -> None:
    store = AdStore(clock=Clock())
    for i in range(6):
        store.update("UPDATE_STARTD_AD", slot(f"slot{i}@a", Memory=1024 * i))
    store.update("UPDATE_SCHEDD_AD", ClassAd({"Name": "schedd@a", "Memory": 99999}))
    big = store.query(AdType.STARTD, "Memory >= 3072", ["Name", "Memory"])
    assert names(big) == ["slot3@a", "slot4@a", "slot5@a"]
    assert sorted(big[0].keys()) == ["Memory", "Name"]
    assert len(store.query(None, "Memory > 4100")) == 2  # every type: a slot and the schedd
    assert len(store.query("Machine", limit=2)) == 2
    assert store.query_json("Machine", 'Name == "slot1@a"', ["Name"]) == '[{"Name": "slot1@a"}]'
    with pytest.raises(ClassAdSyntaxError) as err:
        store.query("Machine", "Memory >=")
    assert err.value.column == 10
    with pytest.raises(InvalidQuery):
        store.query("Machine", limit=-1)


def test_ten_thousand_ads_are_stored_and_queried() -> None:
    # How fast is for bench/ (no timed assertions in tests): about 1 s here.
    store = AdStore(clock=Clock())
    template = slot("x", Arch="X86_64", Requirements=True, State="Unclaimed", Cpus=1)
    for i in range(10_000):
        ad = template.__copy__()
        ad["Name"] = f"slot{i % 8 + 1}@node{i // 8}"
        ad["Memory"] = 1024 * (i % 16)
        store.update("UPDATE_STARTD_AD", ad)
    found = store.query("Machine", 'Memory >= 8192 && Arch == "X86_64"', ["Name"])
    text = store.query_json("Machine")
    assert len(found) == 5_000
    assert text.count('"Name"') == 10_000


def _refresh(name: str, sequence: int, **attrs: object) -> ClassAd:
    ad = ClassAd({"Name": name, "MyAddress": "<127.0.0.2:9>", "UpdateSequenceNumber": sequence})
    ad.update(attrs)
    return ad


def test_a_refresh_keeps_the_ad_alive_as_the_whole_ad_would() -> None:
    """A daemon sends the attributes every update changes for the version the store
    gave its ad: the ad lives on, stamped and counted as after a whole update, its
    content version the same (a negotiator keeping it decodes nothing again)."""
    clock = Clock()
    store = AdStore(clock=clock)
    ad = slot("slot1@a", MyAddress="<127.0.0.2:9>", UpdateInterval=100)
    ad.update(UpdateSequenceNumber=1, DaemonStartTime=5, LoadAvg=0.5)
    first = store.update("UPDATE_STARTD_AD", ad)
    asked = store.query_changes("Machine", None, None, None)
    clock.now += 250
    refreshed = store.refresh(
        "UPDATE_STARTD_AD", _refresh("slot1@a", 2, LoadAvg=1.5), (store.epoch, first.version)
    )
    assert refreshed.accepted and refreshed.version > first.version
    clock.now += 250  # 500 s after the whole update: three intervals are 300 s
    (kept,) = store.query("Machine")
    assert (kept["Memory"], kept["LoadAvg"], kept["UpdateSequenceNumber"]) == (2048, 1.5, 2)
    assert kept["LastHeardFrom"] == int(clock.now) - 250 and kept["UpdatesTotal"] == 2
    whole = copy(ad)
    whole.update(UpdateSequenceNumber=2, LoadAvg=1.5)
    other = AdStore(clock=clock)
    other.update("UPDATE_STARTD_AD", whole)
    other.update("UPDATE_STARTD_AD", whole)
    (same,) = other.query("Machine")
    assert dict(kept) == {**dict(same), "LastHeardFrom": kept["LastHeardFrom"]}
    epoch = json.loads(asked)
    changes = json.loads(
        store.query_changes("Machine", None, None, (epoch["epoch"], epoch["version"]))
    )
    ((content, volatile, flag),) = changes["ads"]
    assert content == epoch["ads"][0][0] and flag == 1 and volatile["LoadAvg"] == 1.5


def test_a_refresh_of_an_ad_not_held_at_its_version_is_not_accepted() -> None:
    clock = Clock()
    store = AdStore(clock=clock)
    ad = slot("slot1@a", MyAddress="<127.0.0.2:9>", UpdateInterval=100, UpdateSequenceNumber=1)
    version = (store.epoch, store.update("UPDATE_STARTD_AD", ad).version)
    refresh = functools.partial(store.refresh, "UPDATE_STARTD_AD")
    assert not refresh(_refresh("slot1@a", 2), ("another epoch", version[1])).accepted
    assert not refresh(_refresh("slot1@b", 2), version).accepted  # never stored
    assert not refresh(_refresh("slot1@a", 2), (store.epoch, version[1] + 7)).accepted
    assert "send the whole ad" in refresh(_refresh("slot1@a", 2), (store.epoch, 0)).reason
    with pytest.raises(InvalidAd, match="not Memory"):  # only what every update changes
        refresh(_refresh("slot1@a", 2, Memory=1), version)
    clock.now += 301  # expired
    assert not refresh(_refresh("slot1@a", 2), version).accepted
    assert store.query("Machine") == []
