"""The daemons' network APIs answer without Nagle's delay: their connections have
TCP_NODELAY on (with it off, each remote request waited 40 ms for a delayed ACK)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from htgrid.net._listen import tcp_listener, unix_listener


async def _nodelay_of_accepted(sock: socket.socket) -> int:
    """TCP_NODELAY of a connection an asyncio server accepted on `sock`."""
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    sock.bind(("127.0.0.1", 0))
    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()


def test_connections_of_a_daemon_listener_send_at_once() -> None:
    assert asyncio.run(_nodelay_of_accepted(tcp_listener("127.0.0.1"))) != 0


def test_a_socket_not_made_as_tcp_by_name_would_delay() -> None:
    # What the listeners were: asyncio leaves Nagle on for their connections.
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    assert asyncio.run(_nodelay_of_accepted(plain)) == 0


def test_a_client_finding_a_daemons_unix_socket_connects_before_it_serves(
    tmp_path: Path,
) -> None:
    # The socket file appears at its bind; a client that found it (a test waiting for a
    # node's socket, a command racing a starting daemon) was refused until the server's
    # start. It connects now, and is answered once the server serves.
    path = tmp_path / "api.sock"
    sock = unix_listener(path)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(path))

        async def serve_and_answer() -> bytes:
            async def hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(b"hello")
                await writer.drain()
                writer.close()

            server = await asyncio.start_unix_server(hello, sock=sock)
            async with server:
                reader, writer = await asyncio.open_unix_connection(sock=client)
                try:
                    return await asyncio.wait_for(reader.read(), 10)
                finally:
                    writer.close()

        assert asyncio.run(serve_and_answer()) == b"hello"
    finally:
        client.close()
        sock.close()
