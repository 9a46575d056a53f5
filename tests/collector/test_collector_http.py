"""The collector over HTTP: the API, its errors, and the daemon on a real port (TLS)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.collector import (
    AdStore,
    CollectorClient,
    CollectorUnavailable,
    ProtocolError,
    UnknownCommand,
)
from htgrid.collector.app import create_app
from htgrid.collector.daemon import make_server
from htgrid.errors import ClassAdSyntaxError


def run(test: Callable[[CollectorClient, AdStore], Awaitable[None]]) -> None:
    store = AdStore(clock=lambda: 1_700_000_000.0)

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(store))
        async with CollectorClient("collector.test", transport=transport) as client:
            await test(client, store)

    asyncio.run(main())


SITE = ClassAd(
    {
        "MyType": "Machine",
        "TargetType": "Job",
        "Name": "Example1_Gatekeeper",
        "resource_name": "gt2 grid.example.com/jobmanager-pbs",
        "UpdateSequenceNumber": 4,
        "WantAdRevaluate": True,
        "CurMatches": 1,
    }
)


def test_advertise_query_and_invalidate_over_http() -> None:
    async def test(client: CollectorClient, store: AdStore) -> None:
        (result,) = await client.advertise("UPDATE_STARTD_AD", [SITE])
        assert result.accepted and result.name == "Example1_Gatekeeper"
        (ad,) = await client.query("Machine", "CurMatches < 10", ["Name", "resource_name"])
        assert dict(ad) == {
            "Name": "Example1_Gatekeeper",
            "resource_name": "gt2 grid.example.com/jobmanager-pbs",
        }
        older = SITE.__copy__()
        older["UpdateSequenceNumber"] = 3
        (stale,) = await client.advertise("UPDATE_STARTD_AD", [older])
        assert not stale.accepted and "older" in stale.reason
        health = await client.health()
        assert health["ads"] == {"Machine": 1}
        query = ClassAd({"MyType": "Query", "TargetType": "Machine"})
        query["Requirements"] = True
        assert await client.invalidate("INVALIDATE_STARTD_ADS", query) == 1
        assert await client.query("Machine") == []

    run(test)


def test_errors_come_back_as_the_same_htgrid_errors() -> None:
    async def test(client: CollectorClient, store: AdStore) -> None:
        with pytest.raises(UnknownCommand):
            await client.advertise("UPDATE_TOASTER_AD", [SITE])
        # Ads stand alone: one the collector cannot keep does not sink the others.
        bad, good = await client.advertise("UPDATE_STARTD_AD", [ClassAd({"Memory": 1}), SITE])
        assert not bad.accepted and "no Name" in bad.reason
        assert good.accepted
        # The client checks a constraint before sending it; the daemon does too.
        with pytest.raises(ClassAdSyntaxError):
            await client.query("Machine", "Memory >")
        with pytest.raises(ClassAdSyntaxError) as err:
            await client._request("GET", "/v1/ads", params={"constraint": "Memory >"})
        assert (err.value.line, err.value.column) == (1, 9)
        with pytest.raises(ProtocolError, match="no such resource"):
            await client._request("GET", "/v1/nothing")
        with pytest.raises(ProtocolError, match="not JSON"):
            await client._request("POST", "/v1/updates/UPDATE_STARTD_AD", body=b"[{")

    run(test)


def test_nothing_listening_is_collector_unavailable(home: Path) -> None:
    with socket.socket() as s:  # a port surely closed: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

        async def main() -> None:
            async with CollectorClient(f"127.0.0.1:{port}", timeout=5) as client:
                await client.query("Machine")

        with pytest.raises(CollectorUnavailable, match="no collector answers"):
            asyncio.run(main())


def test_the_daemon_serves_on_a_loopback_port(home: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server("127.0.0.1", port, home=home, housekeeping_interval=0.05)

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            async with CollectorClient(f"127.0.0.1:{port}") as client:
                await client.advertise("UPDATE_STARTD_AD", [SITE])
                machines = await client.query("Machine")
                collectors = await client.query("Collector")
        finally:
            server.should_exit = True
            await serving
        assert [ad["Name"] for ad in machines] == ["Example1_Gatekeeper"]
        # The collector advertises itself, as condor_collector does.
        assert collectors[0]["MyAddress"] == f"<127.0.0.1:{port}>"

    asyncio.run(main())


def test_a_node_removes_its_released_slots_in_one_request() -> None:
    async def test(client: CollectorClient, store: AdStore) -> None:
        for i in range(3):
            ad = SITE.__copy__()
            ad["Name"] = f"slot1_{i}@node"
            await client.advertise("UPDATE_STARTD_AD", [ad])
        queries = [
            ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": f"slot1_{i}@node"})
            for i in (0, 2)
        ]
        assert await client.invalidate("INVALIDATE_STARTD_ADS", queries) == 2
        assert [ad["Name"] for ad in await client.query("Machine")] == ["slot1_1@node"]

    run(test)
