"""`htgrid up` and `htgrid down`: starting the daemon in the background, and stopping it.

`start` first makes the pool's security material (signing key, CA, the daemons' server
certificate and token: `htgrid.net.security.ensure_pool_security`), then spawns
`python -m htgrid.master --background` (which detaches into its own session, logging to
SchedLog, and runs the schedd and the pool's other daemons) and waits until the daemon answers on
its socket; if the daemon dies first, the end of its log says why.
`reconfig` sends SIGHUP (condor_reconfig). `stop` sends SIGTERM and waits until the daemon has exited, i.e. until it has stopped
its jobs and its child daemons and closed the queue.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htgrid.errors import HTGridError
from htgrid.net import DaemonUnavailable, ScheddClient
from htgrid.net.security import PoolSecurity, SecurityConfig, ensure_pool_security
from htgrid.schedd import ScheddConfig, ScheddError

__all__ = ["DaemonInfo", "alive", "ensure_security", "reconfig", "start", "stop"]

_POLL = 0.05


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """A running daemon: its pid and where its socket, log and queue are."""

    pid: int
    socket: Path
    log: Path
    queue: Path
    already_running: bool = False
    collector: str | None = None  # host:port of the pool's collector
    daemons: tuple[str, ...] = ()  # what DAEMON_LIST runs (MASTER, SCHEDD, STARTD...)
    security: PoolSecurity | None = None  # the pool's trust domain, CA, certificate, token


def _health(config: ScheddConfig) -> dict[str, Any] | None:
    """The health answer of the daemon on the socket, or None."""
    if not config.socket.exists():
        return None
    try:
        with ScheddClient(config.socket, timeout=5.0) as client:
            return client.health()
    except DaemonUnavailable:
        return None


def _answer(config: ScheddConfig) -> int | None:
    """The pid of the daemon answering on the socket, or None."""
    health = _health(config)
    return None if health is None else int(health["pid"])


def _info(
    config: ScheddConfig, pid: int, already: bool, security: PoolSecurity | None
) -> DaemonInfo:
    health = _health(config) or {}
    collector = health.get("collector")
    return DaemonInfo(
        pid,
        config.socket,
        config.log_file,
        config.spool / "queue.db",
        already,
        collector if isinstance(collector, str) else None,
        tuple(health.get("daemons") or ()),
        security,
    )


def ensure_security(config: ScheddConfig) -> PoolSecurity:
    """The pool's security material, made or renewed (ScheddError when it cannot be)."""
    try:
        return ensure_pool_security(SecurityConfig.load(config.home))
    except (HTGridError, OSError) as exc:
        raise ScheddError(f"cannot make the pool's security material: {exc}") from exc


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _pid_file(config: ScheddConfig) -> int | None:
    try:
        return int(config.pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _why_not(config: ScheddConfig) -> str:
    """Why the daemon exited while starting: its own last words, else the log's end."""
    tail = _log_tail(config.log_file)
    reasons = [line.partition("cannot run: ")[2] for line in tail.splitlines()]
    reasons = [reason for reason in reasons if reason]
    if reasons:
        return f"the daemon could not start: {reasons[-1]} (see {config.log_file})"
    return f"the daemon exited while starting; the end of {config.log_file}:\n{tail}"


def start(config: ScheddConfig, *, timeout: float = 30.0, execute: bool = True) -> DaemonInfo:
    """Start the daemon unless one answers already; its info once it answers.

    `execute=False` starts it without an execute node (`htgrid up -no-execute`).
    """
    config.make_dirs()
    security = ensure_security(config)
    pid = _answer(config)
    if pid is not None:
        return _info(config, pid, True, security)
    argv = [sys.executable, "-m", "htgrid.master", "--home", str(config.home), "--background"]
    if not execute:
        argv.append("--no-execute")
    with open(config.log_file, "ab") as log:
        try:
            spawned = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=config.home,
                timeout=timeout,
                check=True,
            )
            child = int(spawned.stdout.split()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise ScheddError(f"cannot start the daemon: {exc}") from exc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = _answer(config)
        # Started once it answers and has written its pid file, which it does when every
        # daemon of the pool is up: not merely once its socket answers.
        if pid is not None and _pid_file(config) == pid:
            return _info(config, pid, pid != child, security)
        if not alive(child):
            pid = _answer(config)  # lost a race with another `htgrid up`?
            if pid is not None:
                return _info(config, pid, True, security)
            raise ScheddError(_why_not(config))
        time.sleep(_POLL)
    raise ScheddError(f"the daemon (pid {child}) did not answer within {timeout:g} s")


def _daemon_pid(config: ScheddConfig) -> int | None:
    try:
        pid = int(config.pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _answer(config)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            mine = b"htgrid.master" in f.read()
    except OSError:
        mine = False
    return pid if mine and alive(pid) else _answer(config)


def reconfig(config: ScheddConfig) -> int | None:
    """condor_reconfig: SIGHUP to the daemon, which reads htgrid.conf again and passes it
    on to its children that do; its pid, or None when none runs."""
    pid = _daemon_pid(config)
    if pid is None:
        return None
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return None
    return pid


def stop(config: ScheddConfig, *, timeout: float | None = None) -> int | None:
    """Stop the daemon cleanly; its pid, or None when none was running."""
    pid = _daemon_pid(config)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    # Running jobs get their vacate time before SIGKILL; then the daemon records them.
    limit = timeout if timeout is not None else 2 * config.kill_grace + 45.0
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not alive(pid):  # it has let go of the lock before, its jobs recorded
            return pid
        time.sleep(_POLL)
    raise ScheddError(
        f"the daemon (pid {pid}) did not stop within {limit:g} s; see {config.log_file}"
    )
