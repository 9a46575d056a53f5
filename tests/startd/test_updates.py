"""A node's periodic update sends whole only the slot ads that changed since the
collector took them; the others are refreshed (kept alive, their sequence, clock and
load set), and an ad the collector no longer holds at the version refreshed (it
restarted, or the ad went) goes whole at once. The collector over HTTP in-process."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.collector import AdStore, CollectorClient, CollectorRefused
from htgrid.collector.app import create_app
from htgrid.startd import Resources, StartdConfig
from htgrid.startd._ads import AdContext
from htgrid.startd._claims import Slots
from htgrid.startd._daemon import Startd

from .conftest import MACHINE

T0 = 1_700_000_000.0


class _Wire(httpx.AsyncBaseTransport):
    """The collector app, the requests sent to it noted; `refuse` answers the next
    update 403, `old` answers /v1/changes as a collector of before it (404)."""

    def __init__(self, store: AdStore) -> None:
        self.app = httpx.ASGITransport(app=create_app(store))
        self.sent: list[tuple[str, bytes]] = []
        self.refuse = False
        self.old = False

    def restart(self) -> AdStore:
        """A new collector on the same address: a new store, empty."""
        store = AdStore(clock=lambda: T0)
        self.app = httpx.ASGITransport(app=create_app(store))
        return store

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        path = request.url.path
        self.sent.append((path, body))
        problem = {"error": "ProtocolError", "detail": f"no such resource: POST {path}"}
        if self.old and path.startswith("/v1/changes/"):
            return httpx.Response(404, json=problem)
        if self.refuse and path.startswith(("/v1/changes/", "/v1/updates/")):
            self.refuse = False
            return httpx.Response(403, json={"detail": "not now", "status": 403})
        return await self.app.handle_async_request(request)

    def changes(self) -> list[dict[str, object]]:
        """The bodies of the /v1/changes requests since the last call."""
        out = [json.loads(b) for p, b in self.sent if p.startswith("/v1/changes/")]
        self.sent.clear()
        return out


class _Node:
    def __init__(self, tmp_path: Path, wire: _Wire, store: AdStore) -> None:
        config = StartdConfig.load(tmp_path)
        self.startd = Startd(config, pool="collector.test", machine=MACHINE, clock=lambda: T0)
        self.startd._slots = Slots(MACHINE.offered, MACHINE.hostname, clock=lambda: T0)
        self.startd._ctx = AdContext(config, MACHINE, "<127.0.0.2:9>", int(T0))
        self.wire, self.store = wire, store
        self.client = CollectorClient("collector.test", transport=wire, home=tmp_path)

    def claim(self, n: int) -> None:
        job = ClassAd({"ClusterId": n, "ProcId": 0, "User": "u@x", "Owner": "u"})
        self.startd.slots.carve(f"{n:020d}", Resources(1, 100, 1000), job, "schedd@x", 60)

    def update(self) -> None:
        asyncio.run(self.startd._ads.advertise(self.client))

    def stored(self) -> dict[str, ClassAd]:
        return {str(ad["Name"]): ad for ad in self.store.query("Machine")}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[_Node]:
    (tmp_path / "htgrid.conf").write_text("")
    store = AdStore(clock=lambda: T0)
    yield _Node(tmp_path, _Wire(store), store)


def _names(ads: object) -> list[str]:
    assert isinstance(ads, list)
    return sorted(str(ad["Name"]) for ad in ads)


def _refreshed(body: dict[str, object]) -> list[str]:
    refresh = body["refresh"]
    assert isinstance(refresh, list)
    return sorted(str(ad["Name"]) for _, ad in refresh)


def test_only_the_changed_ads_go_whole_the_others_are_refreshed(node: _Node) -> None:
    for n in range(3):
        node.claim(n)
    node.update()
    (first,) = node.wire.changes()
    everyone = sorted(node.stored())
    assert _names(first["ads"]) == everyone and len(everyone) == 4 and first["refresh"] == []
    before = node.stored()

    node.update()  # nothing changed
    (second,) = node.wire.changes()
    assert second["ads"] == [] and _refreshed(second) == everyone
    (_, refresh), *_ = second["refresh"]  # type: ignore[misc]
    assert set(refresh) == {"MyType", "Name", "Machine", "MyAddress"} | {
        "UpdateSequenceNumber",
        "MyCurrentTime",
        "TotalLoadAvg",
        "LoadAvg",
    }
    after = node.stored()
    for name, ad in after.items():  # the same ads, their sequence moved on
        assert ad["UpdateSequenceNumber"] == before[name]["UpdateSequenceNumber"] + 1
        assert ad["UpdatesTotal"] == 2 and ad["UpdatesLost"] == 0
        same = {k: v for k, v in dict(ad).items() if k not in _MOVING}
        assert same == {k: v for k, v in dict(before[name]).items() if k not in _MOVING}

    node.claim(3)  # a new dynamic slot, and the partitionable slot's free resources
    node.update()
    (third,) = node.wire.changes()
    pslot = "slot1@node.test"
    assert _names(third["ads"]) == sorted([pslot, "slot1_4@node.test"])
    assert _refreshed(third) == [n for n in everyone if n != pslot]
    assert node.stored()[pslot]["Cpus"] == 0


_MOVING = {"UpdateSequenceNumber", "UpdatesTotal", "UpdatesSequenced", "MyCurrentTime"}


def test_a_restarted_collector_gets_every_ad_whole_in_the_same_update(node: _Node) -> None:
    node.claim(1)
    node.update()
    node.wire.changes()
    node.store = node.wire.restart()  # the collector lost its ads
    node.update()
    refreshed, again = node.wire.changes()
    assert refreshed["ads"] == [] and _refreshed(refreshed) == sorted(
        ["slot1@node.test", "slot1_1@node.test"]
    )
    assert _names(again["ads"]) == _refreshed(refreshed) and again["refresh"] == []
    assert sorted(node.stored()) == _refreshed(refreshed)
    node.update()  # refreshed again from then on
    (third,) = node.wire.changes()
    assert third["ads"] == [] and _refreshed(third) == sorted(node.stored())


def test_an_ad_removed_from_the_collector_goes_whole_again(node: _Node) -> None:
    node.claim(1)
    node.update()
    node.store.invalidate("INVALIDATE_STARTD_ADS", ClassAd({"Name": "slot1_1@node.test"}))
    node.wire.changes()
    node.update()
    _, again = node.wire.changes()
    assert _names(again["ads"]) == ["slot1_1@node.test"]
    assert sorted(node.stored()) == ["slot1@node.test", "slot1_1@node.test"]


def test_after_a_refused_update_the_changes_go_whole_at_the_next(node: _Node) -> None:
    node.update()
    node.claim(1)  # a change the refused update carried
    node.wire.refuse = True
    with pytest.raises(CollectorRefused):
        node.update()
    node.wire.changes()
    node.update()
    (body,) = node.wire.changes()
    assert _names(body["ads"]) == ["slot1@node.test", "slot1_1@node.test"]
    assert node.stored()["slot1@node.test"]["Cpus"] == 3


def test_a_collector_of_before_gets_every_ad_whole(node: _Node) -> None:
    node.claim(1)
    node.wire.old = True
    for _ in range(2):
        node.update()
    updates = [json.loads(b) for p, b in node.wire.sent if p.startswith("/v1/updates/")]
    assert [_names(u) for u in updates] == [["slot1@node.test", "slot1_1@node.test"]] * 2
    assert sorted(node.stored()) == ["slot1@node.test", "slot1_1@node.test"]


def test_a_stream_of_activity_changes_goes_in_one_update_a_second(node: _Node) -> None:
    """Jobs starting and ending on kept claims (no resources moved), many times a
    second: the node updates its collector once a second with them all, as HTCondor's
    startd does, not at each change (those updates were a fifth of a node's CPU)."""
    node.claim(1)
    sent: list[float] = []  # the loop's time of each update

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        request = node.wire.handle_async_request

        async def noted(req: httpx.Request) -> httpx.Response:
            if req.url.path.startswith("/v1/changes/"):
                sent.append(loop.time())
            return await request(req)

        node.wire.handle_async_request = noted  # type: ignore[method-assign]
        task = asyncio.create_task(node.startd._ads.run(node.client))
        deadline = loop.time() + 30
        try:
            while len(sent) < 3:  # the join, then two updates of activity
                assert loop.time() < deadline, f"only {len(sent)} updates"
                node.startd._active()  # a job started or ended on the claim
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert min(gaps) >= 0.95, gaps
