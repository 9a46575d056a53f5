"""The schedd's listener for reversed connections (CCB) under a flood of connections
that never say a connect id: it keeps a bounded number, dropping the oldest first."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from htgrid.collector import ReverseConnector


def _target(address: str) -> tuple[str, int]:
    host, _, port = address.strip("<>").rpartition(":")
    return host, int(port)


async def _eof(reader: asyncio.StreamReader) -> bool:
    return await reader.read(1) == b""


def test_silent_connections_are_bounded_oldest_dropped_first(tmp_path: Path) -> None:
    async def scenario() -> None:
        listener = ReverseConnector("127.0.0.1", tmp_path, max_unidentified=4)
        await listener.start()
        try:
            host, port = _target(listener.address)
            opened = []
            for _ in range(10):
                reader, writer = await asyncio.open_connection(host, port)
                opened.append((reader, writer))
                await asyncio.sleep(0)  # let the listener take it, in order
            # The six oldest are closed by the listener well before the 10 s a silent
            # connection may otherwise take; the newest stay open until it closes.
            async with asyncio.timeout(5):
                for reader, _ in opened[:6]:
                    assert await _eof(reader)
            newest = [asyncio.ensure_future(_eof(r)) for r, _ in opened[6:]]
            await asyncio.sleep(0.2)
            assert not any(task.done() for task in newest)
        finally:
            await listener.aclose()
        async with asyncio.timeout(5):
            assert all(await asyncio.gather(*newest))
        for _, writer in opened:
            writer.close()

    asyncio.run(scenario())


def test_a_connection_that_says_garbage_is_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        listener = ReverseConnector("127.0.0.1", tmp_path)
        await listener.start()
        try:
            sock = socket.create_connection(_target(listener.address), timeout=5)
            with sock:
                sock.sendall(b"not an id at all\n")
                assert await asyncio.to_thread(sock.recv, 1) == b""
        finally:
            await listener.aclose()

    asyncio.run(scenario())


def test_it_listens_on_the_port_of_its_last_start_unless_taken(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = ReverseConnector("127.0.0.1", tmp_path)
        await first.start()
        address = first.address
        port = int(address.strip("<>").rpartition(":")[2])
        again = ReverseConnector("127.0.0.1", tmp_path)
        await again.start(port)  # taken (the first listens there): another port
        assert again.address != address
        await again.aclose()
        await first.aclose()
        last = ReverseConnector("127.0.0.1", tmp_path)
        await last.start(port)  # free again: the same
        assert last.address == address
        await last.aclose()

    asyncio.run(scenario())
