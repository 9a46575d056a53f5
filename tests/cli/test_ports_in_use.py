"""`htgrid up` (and `htgrid collector`) on a port another program holds: an error at once
that names the port and the program, a non-zero exit, and nothing left running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid
from htgrid.schedd import ScheddConfig
from htgrid.testing import run_cli

SRC = str(Path(htgrid.__file__).resolve().parents[1])  # the htgrid under test, for children


@pytest.fixture
def held() -> Iterator[int]:
    """A loopback port this test process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _processes_of(home: Path) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(home).encode() in words:
            found.append(b" ".join(words).decode(errors="replace"))
    return found


@pytest.mark.parametrize(
    ("knob", "other"),
    [("COLLECTOR_HOST", "SCHEDD_ADDRESS = 127.0.0.1:0"), ("SCHEDD_ADDRESS", "")],
)
def test_up_on_a_port_in_use_fails_at_once_and_leaves_nothing(
    tmp_path: Path, held: int, knob: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", SRC)  # the daemon `htgrid up` starts
    home = tmp_path / "pool"
    home.mkdir()
    (home / "htgrid.conf").write_text(
        f"DAEMON_LIST = MASTER, SCHEDD, COLLECTOR\nCOLLECTOR_HOST = 127.0.0.1:0\n{other}\n"
        f"{knob} = 127.0.0.1:{held}\n"
    )
    try:
        rc, out, err = run_cli(home, "up")
        assert rc == 1, out + err
        assert "started" not in out
        assert f"127.0.0.1:{held}" in err and "Address already in use" in err
        assert f"held by pid {os.getpid()}" in err
        config = ScheddConfig.load(home)
        files = (config.pid_file, config.socket, config.url_file, config.collector_address_file)
        assert [path for path in files if path.exists()] == []
        assert _processes_of(home) == []
        # Told another port, the same pool comes up: nothing of the failed start is in
        # its way.
        (home / "htgrid.conf").write_text(
            "DAEMON_LIST = MASTER, SCHEDD, COLLECTOR\nCOLLECTOR_HOST = 127.0.0.1:0\n"
        )
        rc, out, err = run_cli(home, "up")
        assert rc == 0 and "started" in out, err
    finally:
        run_cli(home, "down")


def test_collector_on_a_port_in_use_says_so(tmp_path: Path, held: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "htgrid", "collector", "--port", str(held)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "HTGRID_HOME": str(tmp_path)},
        timeout=60,
    )
    assert done.returncode == 1
    assert "listening" not in done.stderr and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{held}: Address already in use" in done.stderr
    assert f"held by pid {os.getpid()}" in done.stderr
