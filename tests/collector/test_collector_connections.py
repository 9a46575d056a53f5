"""A client's connections to its collector over TLS: kept from one update to the next,
made again when the collector's end goes (a collector restarted), a collector silent
past the timeout, and what a client without the pool's token is told."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient, CollectorRefused, CollectorUnavailable
from htgrid.net.security import save_token, user_token_dir
from htgrid.testing.collector import pool_home, user_token

from .conftest import DOMAIN


class _Relay:
    """A TCP relay in front of the collector that counts the connections it carries,
    can cut them all (the collector's end gone), or hold them unanswered."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self.accepted = 0
        self.silent = False
        self._open: set[asyncio.StreamWriter] = set()
        self.address = ""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[_Relay]:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server:
            try:
                yield self
            finally:
                self.cut()

    def cut(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._open.add(writer)
        if self.silent:
            return  # the connection is held, nothing relayed
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._open.add(up_writer)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.transport.abort()


def _site(sequence: int) -> ClassAd:
    return ClassAd({"MyType": "Machine", "Name": "site1", "UpdateSequenceNumber": sequence})


def test_updates_share_a_connection_and_one_lost_is_made_again(pool: str, home: Path) -> None:
    async def run() -> None:
        async with (
            _Relay(pool).running() as relay,
            CollectorClient(relay.address, home=home, daemon=True) as client,
        ):
            for sequence in range(1, 4):
                (result,) = await client.advertise("UPDATE_STARTD_AD", [_site(sequence)])
                assert result.accepted
            assert len(await client.query("Machine")) == 1
            assert relay.accepted == 1  # one TLS handshake for all four requests
            relay.cut()  # the collector restarted: the kept connection is gone
            (result,) = await client.advertise("UPDATE_STARTD_AD", [_site(4)])
            assert result.accepted and relay.accepted == 2
            (ad,) = await client.query("Machine")
            assert ad["UpdateSequenceNumber"] == 4

    asyncio.run(run())


def test_a_collector_that_does_not_answer_in_time_is_unavailable(pool: str, home: Path) -> None:
    async def run() -> None:
        async with (
            _Relay(pool).running() as relay,
            CollectorClient(relay.address, home=home, daemon=True, timeout=0.5) as client,
        ):
            relay.silent = True
            with pytest.raises(CollectorUnavailable, match=f"{relay.address} timed out"):
                await client.advertise("UPDATE_STARTD_AD", [_site(1)])

    asyncio.run(run())


def test_a_refused_token_is_said_with_the_collectors_reason(pool: str, home: Path) -> None:
    async def run() -> None:
        async with CollectorClient(pool, home=home, token="not-a-token") as client:
            with pytest.raises(CollectorRefused) as err:
                await client.query("Machine")
        assert err.value.status == 401 and err.value.realm == DOMAIN
        assert str(err.value).startswith(f"the collector at {pool} refused the request: ")
        assert "no reason given" not in str(err.value)

    asyncio.run(run())


def test_a_user_without_a_token_is_told_where_one_was_looked_for_then_uses_one(
    pool: str, home: Path, tmp_path: Path
) -> None:
    # A user of another pool on the host, trusting this pool's CA, no token of it yet.
    mine = pool_home(tmp_path / "mine", "mine.test")
    trusted = mine / "etc" / "ca" / "trusted.d"
    trusted.mkdir(parents=True, exist_ok=True)
    shutil.copy(home / "etc" / "ca" / "ca.crt", trusted / "pool.crt")

    async def query() -> list[ClassAd]:
        async with CollectorClient(pool, home=mine) as client:
            return await client.query("Machine")

    with pytest.raises(CollectorRefused, match=f"trust domain '{DOMAIN}'") as err:
        asyncio.run(query())
    assert str(user_token_dir()) in str(err.value) and err.value.status == 401
    # A token of the pool in ~/.htgrid/tokens.d: found by the realm of the 401, sent again.
    save_token(user_token_dir() / "pool", user_token(home, "alice"))
    assert asyncio.run(query()) == []
