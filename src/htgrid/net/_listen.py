"""The TCP sockets the daemons' network APIs listen on."""

from __future__ import annotations

import socket

__all__ = ["tcp_listener"]


def tcp_listener(host: str) -> socket.socket:
    """A TCP socket for `host` (an IPv6 address has a colon), not yet bound.

    Made as TCP by name (IPPROTO_TCP, not 0): asyncio turns Nagle's algorithm off only on
    the connections of a socket that says it is TCP. With Nagle on, a response's last TLS
    record waited for the client's delayed ACK: 40 ms added to every remote request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock
