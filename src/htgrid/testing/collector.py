"""A collector in a thread of the test process, with its pool's security material.

    home = pool_home(tmp_path / "pool", "pool.test")     # htgrid.conf, key, CA, daemon token
    with collector_thread(home) as address:               # "127.0.0.1:PORT": TLS and CEDAR
        async with CollectorClient(address, home=home, daemon=True) as client:
            ...

`user_token(home, "alice")` mints a user's token of that pool (READ and WRITE, no
ADVERTISE), as `htgrid token create -identity alice@<trust domain>` does.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from htgrid.collector.daemon import make_server, serve_on
from htgrid.net.security import SecurityConfig, TokenIssuer, ensure_pool_security

__all__ = ["collector_thread", "pool_home", "user_token"]


def pool_home(home: Path, trust_domain: str, conf: str = "") -> Path:
    """`home` with an htgrid.conf naming `trust_domain` and the pool's security material."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "htgrid.conf").write_text(f"TRUST_DOMAIN = {trust_domain}\n{conf}")
    ensure_pool_security(SecurityConfig.load(home))
    return home


def user_token(home: Path, user: str, *, lifetime: float | None = 3600) -> str:
    """A token of the pool in `home` for `user@<trust domain>`, a plain user's rights."""
    config = SecurityConfig.load(home)
    return TokenIssuer(config).create(f"{user}@{config.trust_domain}", lifetime=lifetime)


@contextmanager
def collector_thread(home: Path, housekeeping_interval: float = 60.0) -> Iterator[str]:
    """host:port of a collector of the pool in `home`, served by a thread until exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = make_server("127.0.0.1", port, home=home, housekeeping_interval=housekeeping_interval)
    thread = threading.Thread(target=lambda: asyncio.run(serve_on(server, sock, home)), daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(1000):
        if server.started or not thread.is_alive():
            break
        started.wait(0.01)
    if not server.started:
        raise RuntimeError(f"the collector of {home} did not start on port {port}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
