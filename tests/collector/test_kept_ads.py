"""KeptAds: a query's ads kept decoded between queries, only what changed read again,
answering ad for ad as a plain query does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.collector import AdStore, CollectorClient, InvalidQuery, KeptAds, ProtocolError
from htgrid.collector.app import create_app

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def slot(name: str, sequence: int, **attrs: object) -> ClassAd:
    ad = ClassAd(
        {
            "MyType": "Machine",
            "Name": name,
            "Machine": name.rpartition("@")[2],
            "MyAddress": f"<{name}>",
            "DaemonStartTime": int(T0) - 100,
            "UpdateSequenceNumber": sequence,
            "UpdateInterval": 300,
            "MyCurrentTime": int(T0) + sequence,
            "State": "Unclaimed",
            "Memory": 4096,
        }
    )
    ad.update(attrs)
    return ad


def run(test: Callable[[CollectorClient, AdStore, Clock], Awaitable[None]]) -> None:
    clock = Clock()
    store = AdStore(clock=clock)

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(store))
        async with CollectorClient("collector.test", transport=transport) as client:
            await test(client, store, clock)

    asyncio.run(main())


def dicts(ads: Sequence[ClassAd]) -> list[dict[str, object]]:
    return [dict(ad) for ad in ads]


def test_kept_ads_answer_as_a_query_decoding_only_ads_whose_content_changed() -> None:
    async def test(client: CollectorClient, store: AdStore, clock: Clock) -> None:
        kept = KeptAds(client, "Machine")
        names = [f"slot{i}@node" for i in range(4)]
        for name in names:
            store.update("UPDATE_STARTD_AD", slot(name, 1))
        first = await kept.ads()
        assert dicts(first) == dicts(await client.query("Machine")) and len(first) == 4
        assert kept.decoded == 4
        # Updates that change nothing but the stamps: the same ads, refreshed, none decoded.
        clock.now += 7
        for name in names:
            store.update("UPDATE_STARTD_AD", slot(name, 2))
        again = await kept.ads()
        assert dicts(again) == dicts(await client.query("Machine"))
        assert {ad["LastHeardFrom"] for ad in again} == {int(clock.now)}
        assert {ad["UpdateSequenceNumber"] for ad in again} == {2}
        assert kept.decoded == 4
        # Not sent again: the very ads kept.
        assert all(a is b for a, b in zip(await kept.ads(), again, strict=True))
        # One slot claimed: that one ad is read again, with its new values.
        clock.now += 1
        store.update("UPDATE_STARTD_AD", slot(names[1], 3, State="Claimed", RemoteUser="u@x"))
        changed = await kept.ads()
        assert kept.decoded == 5
        assert dicts(changed) == dicts(await client.query("Machine"))
        assert changed[1]["State"] == "Claimed" and changed[1]["RemoteUser"] == "u@x"
        # An ad removed, one expired (UpdateInterval 300: three missed updates): gone.
        query = ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": names[0]})
        assert await client.invalidate("INVALIDATE_STARTD_ADS", query) == 1
        clock.now += 600
        for name in names[1:3]:
            store.update("UPDATE_STARTD_AD", slot(name, 4))
        clock.now += 400  # names[3], last heard 1,000 s ago, expires
        left = await kept.ads()
        assert [ad["Name"] for ad in left] == names[1:3]
        assert dicts(left) == dicts(await client.query("Machine"))
        assert left[0]["State"] == "Unclaimed"  # the claim's end read again

    run(test)


def test_constraint_and_projection_are_kept_as_a_query_has_them() -> None:
    async def test(client: CollectorClient, store: AdStore, clock: Clock) -> None:
        kept = KeptAds(client, "Machine", "Memory >= 2048", ["Name", "Memory", "LastHeardFrom"])
        store.update("UPDATE_STARTD_AD", slot("a@n", 1))
        store.update("UPDATE_STARTD_AD", slot("b@n", 1, Memory=1024))
        assert dicts(await kept.ads()) == [
            {"Name": "a@n", "Memory": 4096, "LastHeardFrom": int(T0)}
        ]
        clock.now += 5
        store.update("UPDATE_STARTD_AD", slot("a@n", 2, Memory=1024))  # leaves the selection
        store.update("UPDATE_STARTD_AD", slot("b@n", 2, Memory=8192))  # enters it
        assert dicts(await kept.ads()) == [
            {"Name": "b@n", "Memory": 8192, "LastHeardFrom": int(T0) + 5}
        ]
        clock.now += 5
        store.update("UPDATE_STARTD_AD", slot("b@n", 3, Memory=8192))
        assert dicts(await kept.ads()) == [
            {"Name": "b@n", "Memory": 8192, "LastHeardFrom": int(T0) + 10}
        ]

    run(test)


def test_a_restarted_collector_is_read_in_full() -> None:
    async def main() -> None:
        stores = [AdStore(clock=lambda: T0), AdStore(clock=lambda: T0 + 1)]
        stores[0].update("UPDATE_STARTD_AD", slot("a@n", 1))
        stores[0].update("UPDATE_STARTD_AD", slot("b@n", 1))
        # The restarted collector counts from 1 again: its version 1 is another ad.
        stores[1].update("UPDATE_STARTD_AD", slot("b@n", 1, Memory=64))
        apps = [create_app(s) for s in stores]
        which = [0]

        async def handler(request: httpx.Request) -> httpx.Response:
            transport = httpx.ASGITransport(app=apps[which[0]])
            return await transport.handle_async_request(request)

        transport = httpx.MockTransport(handler)
        async with CollectorClient("collector.test", transport=transport) as client:
            kept = KeptAds(client, "Machine")
            assert [ad["Name"] for ad in await kept.ads()] == ["a@n", "b@n"]
            which[0] = 1
            (ad,) = await kept.ads()
            assert ad["Name"] == "b@n" and ad["Memory"] == 64

    asyncio.run(main())


class Canned:
    """A collector's answers, given in turn."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.asked: list[tuple[str, int] | None] = []

    async def query_changes(
        self, ad_type: object, constraint: object, projection: object, since: tuple[str, int] | None
    ) -> bytes:
        self.asked.append(since)
        return self.bodies.pop(0)


AD = b'{"MyType": "Machine", "Name": "a@n", "Memory": 4096}'


def test_an_answer_naming_an_ad_not_kept_is_asked_again_in_full() -> None:
    # A constraint that holds only now (time()) names an ad the last answer left out.
    canned = Canned(
        b'{"epoch": "e", "version": 3, "ads": [[2, ' + AD + b"]]}",
        b'{"epoch": "e", "version": 4, "ads": [2, 1]}',
        b'{"epoch": "e", "version": 4, "ads": [[1, '
        + AD.replace(b"a@n", b"z@n")
        + b"], [2, "
        + AD
        + b"]]}",
    )
    kept = KeptAds(canned, "Machine")  # type: ignore[arg-type]

    async def main() -> None:
        assert [ad["Name"] for ad in await kept.ads()] == ["a@n"]
        assert [ad["Name"] for ad in await kept.ads()] == ["z@n", "a@n"]

    asyncio.run(main())
    assert canned.asked == [None, ("e", 3), None]


def test_a_collector_that_answers_with_a_plain_array_still_serves() -> None:
    canned = Canned(b"[" + AD + b"]", b"[" + AD + b"]")
    kept = KeptAds(canned, "Machine")  # type: ignore[arg-type]

    async def main() -> None:
        assert [ad["Name"] for ad in await kept.ads()] == ["a@n"]
        assert [ad["Name"] for ad in await kept.ads()] == ["a@n"]

    asyncio.run(main())
    assert canned.asked == [None, None]


@pytest.mark.parametrize(
    "body",
    [b"[{]", b'{"epoch": "e", "version": 1, "ads": ["x"]}', b'{"ads": [[1, ' + AD + b"]]}"],
)
def test_a_garbled_answer_is_a_protocol_error(body: bytes) -> None:
    kept = KeptAds(Canned(body), "Machine")  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        asyncio.run(kept.ads())


def test_since_must_be_an_earlier_answers() -> None:
    async def test(client: CollectorClient, store: AdStore, clock: Clock) -> None:
        with pytest.raises(InvalidQuery, match="EPOCH:VERSION"):
            await client.query_changes("Machine", None, None, ("e", "x"))  # type: ignore[arg-type]

    run(test)
