"""The daemon started again right after a crash binds the collector's port (COLLECTOR_HOST)
even when the dead daemon's collector lets go of it only just then."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from htgrid.master import _pool
from htgrid.schedd import ScheddConfig
from htgrid.testing.ports import free_port


def test_a_port_whose_holder_is_gone_before_it_is_found_is_bound_when_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    (tmp_path / "htgrid.conf").write_text(
        f"DAEMON_LIST = MASTER, SCHEDD, COLLECTOR\nCOLLECTOR_HOST = 127.0.0.1:{port}\n"
    )
    pool = _pool.Pool(ScheddConfig.load(tmp_path))
    old = socket.socket()
    old.bind(("127.0.0.1", port))
    old.listen()
    looked = threading.Event()

    def gone(_port: int) -> None:
        # The old collector exits between the failed bind and the look for its holder.
        looked.set()
        return None

    def exits() -> None:
        looked.wait(10)
        old.close()

    monkeypatch.setattr(_pool, "port_holder", gone)
    let_go = threading.Thread(target=exits)
    let_go.start()
    try:
        asyncio.run(pool.listen())
        assert looked.is_set()
        # The port is the new daemon's: it listens there, and nobody else may.
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
        with pytest.raises(OSError), socket.socket() as other:
            other.bind(("127.0.0.1", port))
    finally:
        let_go.join()
        pool.close_listener()
