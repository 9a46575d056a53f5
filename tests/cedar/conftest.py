"""htgrid's daemons as HTCondor's official client sees them: a collector process on a
loopback port (HTTPS and CEDAR on the same port), and the `htcondor2` wheel configured as
a user would: CONDOR_CONFIG with the pool's address and SEC_* settings, tokens in its
token directory.

The daemons run in processes of their own: the bindings hold the GIL while they wait on
the network, so a server in a thread of the test process would never answer.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import htcondor2
import pytest

from htgrid.testing import wait_for
from htgrid.testing.collector import pool_home
from htgrid.testing.ports import free_port

DOMAIN = "cedar.test"
SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class Daemon:
    address: str
    log: Path
    process: subprocess.Popen[bytes]

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pool's home as $HTGRID_HOME, with ~ a scratch directory (no real user's token)."""
    path = tmp_path / "pool"
    for name, value in {"HOME": tmp_path / "user", "HTGRID_HOME": path}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("HTGRID_TOKEN", raising=False)
    return pool_home(path, DOMAIN)


@contextmanager
def running_collector(home: Path, log: Path) -> Iterator[Daemon]:
    """A collector process of the pool in `home` on a free loopback port."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=SRC)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "htgrid.collector", "--home", str(home), "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _accepts(port) or process.poll() is not None, timeout=60)
        assert process.poll() is None, log.read_text()
        yield Daemon(f"127.0.0.1:{port}", log, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def collector(home: Path, tmp_path: Path) -> Iterator[Daemon]:
    with running_collector(home, tmp_path / "CollectorLog") as daemon:
        yield daemon


Configure = Callable[..., Path]


@pytest.fixture
def condor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Configure]:
    """configure(pool, token=..., methods=..., extra=...): the client's CONDOR_CONFIG,
    written and loaded; `token` goes in its SEC_TOKEN_DIRECTORY (mode 0600)."""
    serial = iter(range(1_000_000))

    def configure(
        pool: str,
        *,
        token: str | None = None,
        methods: str | None = "TOKEN",
        extra: str = "",
        recommended: bool = True,
    ) -> Path:
        n = next(serial)
        tokens = tmp_path / f"tokens.{n}"
        tokens.mkdir(mode=0o700)
        if token is not None:
            path = tokens / "token"
            path.write_text(token + "\n")
            path.chmod(0o600)
        config = tmp_path / f"condor_config.{n}"
        config.write_text(
            f"COLLECTOR_HOST = {pool}\n"
            + ("use security:recommended\n" if recommended else "")
            + f"SEC_TOKEN_DIRECTORY = {tokens}\n"
            + (f"SEC_CLIENT_AUTHENTICATION_METHODS = {methods}\n" if methods else "")
            + f"{extra}\n"
        )
        monkeypatch.setenv("CONDOR_CONFIG", str(config))
        htcondor2.reload_config()
        return config

    yield configure
    monkeypatch.undo()
    htcondor2.reload_config()
