"""The daemons' network APIs answer without Nagle's delay: their connections have
TCP_NODELAY on (with it off, each remote request waited 40 ms for a delayed ACK)."""

from __future__ import annotations

import asyncio
import socket

from htgrid.net._listen import tcp_listener


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
