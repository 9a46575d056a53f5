"""`htgrid startd` as a process of its own: its exit action, and recovery after kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from htgrid.startd import ClaimState, StartdClient

from .conftest import claim_id, job_ad, script, until


def _startd(home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HTGRID_HOME": str(home)}
    log = open(home / "startd.log", "ab")  # noqa: SIM115 (the child holds it)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "htgrid.cli", "startd"], env=env, stdout=log, stderr=log
        )
    finally:
        log.close()


def _wait_socket(home: Path) -> None:
    deadline = time.monotonic() + 20
    while not (home / "run" / "startd.sock").exists():
        assert time.monotonic() < deadline, (home / "startd.log").read_text()
        time.sleep(0.05)


def test_alone_it_runs_its_exit_action_when_idle_too_long(tmp_path: Path) -> None:
    marker = tmp_path / "powered-off"
    home = tmp_path / "home"
    home.mkdir()
    (home / "htgrid.conf").write_text(
        "COLLECTOR_HOST = 127.0.0.1:1\nSTARTD_NOCLAIM_SHUTDOWN = 1\n"
        f"DEFAULT_MASTER_SHUTDOWN_SCRIPT = echo halt > {marker}\n"
    )
    proc = _startd(home)
    try:
        assert proc.wait(timeout=30) == 0  # the exit action's status: it replaced the node
    finally:
        proc.kill()
    assert marker.read_text() == "halt\n"
    log = (home / "startd.log").read_text()
    assert "no claim for 1 s (STARTD_NOCLAIM_SHUTDOWN)" in log
    assert "running DEFAULT_MASTER_SHUTDOWN_SCRIPT" in log


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ")[1][:1] != b"Z"
    except OSError:
        return False


def test_a_restarted_node_kills_what_a_killed_one_left_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # The job is root's (the tests run as root): the node lets it run.
    (home / "htgrid.conf").write_text("COLLECTOR_HOST = 127.0.0.1:1\nALLOW_ROOT_JOBS = true\n")
    iwd = tmp_path / "iwd"
    pidfile = tmp_path / "pid"
    script(iwd, f"echo $$ > {pidfile}\nexec sleep 300\n")
    job = job_ad(iwd, ShouldTransferFiles="NO")

    async def start_job() -> None:
        async with StartdClient(home / "run" / "startd.sock") as client:
            cid = claim_id()
            await client.request_claim(cid, job, "schedd@test", 60)
            await until(client, cid, ClaimState.RUNNING, await client.activate(cid, job))

    first = _startd(home)
    second = None
    try:
        _wait_socket(home)
        asyncio.run(start_job())
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline  # running: its shell is about to write it
            time.sleep(0.02)
        orphan = int(pidfile.read_text())
        sandboxes = os.listdir(home / "execute")
        assert len(sandboxes) == 1
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert _alive(orphan)  # nothing killed it yet: the node died, not its job
        (home / "run" / "startd.sock").unlink()
        second = _startd(home)
        _wait_socket(home)
        deadline = time.monotonic() + 10
        while _alive(orphan):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert os.listdir(home / "execute") == []
        assert (
            "killed 1 process(es) left by jobs of an earlier startd"
            in (home / "startd.log").read_text()
        )
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)
