"""A free loopback port for a test that must name one before a daemon binds it (a
collector that is restarted on the same port, say).

The port is taken below the kernel's ephemeral range: a port found by binding port 0 is
an ephemeral one, which any outgoing connection on the host may take as its own port
once it is let go, or a client retrying a daemon that is down may connect to itself on,
so the daemon meant to listen there finds it in use. Tests run side by side (pytest -n,
other runs on the host): the port is drawn at random and checked free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

__all__ = ["free_port"]

_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST: Final = 10000


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port of `host` nobody listens on now, outside the ephemeral range."""
    top = _ephemeral_start() - 1
    for _ in range(200):
        port = random.randint(_LOWEST, top)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port of {host} in {_LOWEST}-{top}")
