"""`htgrid gridmanager`: the process the queue daemon starts."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from htgrid.cli import main


def _gridmanager(home: Path, *more: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "htgrid.cli", "gridmanager", "--home", str(home), *more]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_one_per_queue_and_a_clean_stop(tmp_path: Path) -> None:
    first = _gridmanager(tmp_path, "--feed-interval", "0.1")
    try:
        lock = tmp_path / "spool" / "gridmanager" / "lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert time.monotonic() < deadline, "the grid manager did not start"
            assert first.poll() is None
            time.sleep(0.05)
        second = _gridmanager(tmp_path)
        assert second.wait(30) == 3
        log = (tmp_path / "log" / "GridmanagerLog").read_text()
        assert "another grid manager runs on" in log
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    assert (tmp_path / "spool" / "queue.db").exists()


def test_settings_are_checked(tmp_path: Path, capsys: object) -> None:
    assert main(["gridmanager", "--home", str(tmp_path), "--set", "nonsense=1"]) == 2
    assert main(["gridmanager", "--home", str(tmp_path), "--set", "poll_interval=soon"]) == 2
