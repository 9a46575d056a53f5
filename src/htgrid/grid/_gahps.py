"""GAHP server processes: one per (grid type, credential), restarted when one dies.

A server that dies takes its requests in flight with it: their callers get
GahpServerExited and treat the request as lost (a lost submit is looked up by its tag,
a lost status poll is simply the next poll's business). The next call starts a new
server, after a back-off if starting keeps failing.

The pids of the servers started are kept in a file, so that a grid manager restarted
after a kill -9 first waits for its predecessor's servers to exit (they quit on EOF):
nothing they still had in flight can then land at the batch system after recovery has
looked for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from htgrid._privsep import Account
from htgrid.gahp import Clock, GahpClient, GahpError
from htgrid.gahp.client import GahpProcess, Spawner, spawn_subprocess
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import GahpUnavailable

__all__ = ["GahpHandle", "GahpPids"]

log = logging.getLogger("htgrid.grid")


class GahpPids:
    """The file listing the GAHP servers this grid manager (or its predecessor) started."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, pid: int | None) -> None:
        if pid is None:
            return
        with open(self.path, "a", encoding="ascii") as out:
            out.write(f"{pid}\n")

    async def reap_predecessors(self, clock: Clock, patience: float = 15.0) -> list[int]:
        """Wait for servers a killed predecessor left running; TERM them after `patience` s."""
        pids = [pid for pid in self._read() if _is_gahp(pid)]
        deadline = clock.monotonic() + patience
        signalled = False
        while pids:
            if clock.monotonic() >= deadline:
                if signalled:
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    break
                for pid in pids:
                    log.warning("GAHP server %d of an earlier grid manager is still up: TERM", pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
                signalled, deadline = True, clock.monotonic() + 5.0
            await clock.sleep(0.05)
            pids = [pid for pid in pids if _is_gahp(pid)]
        self.path.write_text("", encoding="ascii")
        return pids

    def _read(self) -> list[int]:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return []
        return [int(word) for word in text.split() if word.isdigit()]


def _is_gahp(pid: int) -> bool:
    """Whether `pid` is alive and still a GAHP server (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    zombie = stat.rpartition(")")[2].split()[:1] == ["Z"]
    return not zombie and b"gahp" in cmdline.lower()


class GahpHandle:
    """One GAHP server, started on first use and again after it dies."""

    def __init__(
        self,
        key: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        clock: Clock,
        config: GridManagerConfig,
        pids: GahpPids | None = None,
        spawn: Spawner = spawn_subprocess,
        owner: Account | None = None,
    ) -> None:
        self.key = key
        self.argv = tuple(argv)
        self.env = dict(env)
        #: Whose server it is, when not this process's user's (`spawn` starts it as them).
        self.owner = owner
        self.clock = clock
        self.config = config
        self.pids = pids
        self._spawn = spawn
        self._client: GahpClient | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        #: How many servers were started (a restart makes it grow).
        self.starts = 0

    @property
    def started(self) -> bool:
        """Whether a live server is there now."""
        return self._client is not None and self._client.alive

    def supports(self, command: str) -> bool:
        """Whether the live server listed `command` (False before the first start)."""
        return self._client is not None and self._client.supports(command)

    async def client(self) -> GahpClient:
        """The live server's client, starting one if needed; GahpUnavailable if it cannot."""
        if self._client is not None and self._client.alive:
            return self._client
        async with self._lock:
            if self._client is not None and self._client.alive:
                return self._client
            if self._client is not None:
                log.warning(
                    "GAHP server %s (pid %s) is gone: restarting", self.key, self._client.pid
                )
                self._client = None
            if self.clock.monotonic() < self._retry_at:
                raise GahpUnavailable(self._last_error)
            try:
                client = await GahpClient.start(
                    self.argv,
                    env=self.env,
                    spawn=self._spawn_recorded,
                    clock=self.clock,
                    max_pending=self.config.max_pending_requests,
                    response_timeout=self.config.gahp_response_timeout,
                    max_line=self.config.gahp_max_line,
                )
            except (OSError, GahpError) as err:
                self._failures += 1
                self._retry_at = self.clock.monotonic() + self.config.backoff(self._failures)
                self._last_error = f"cannot start the {self.key} GAHP server: {err}"
                raise GahpUnavailable(self._last_error) from err
            self._failures = 0
            self.starts += 1
            self._client = client
            log.info("GAHP server %s started (pid %s)", self.key, client.pid)
            return client

    async def call(
        self, command: str, *args: str, timeout: float | None = None, later: bool = False
    ) -> tuple[str, ...]:
        """An asynchronous command's result fields (after the request id); a `later` one
        (new work) waits behind the others queued.

        Raises GahpUnavailable (no server), GahpServerExited or GahpTimeout (the request is
        lost), GahpRequestRefused (an E or F return line), LocalGahpError (not supported).
        """
        client = await self.client()
        limit = self.config.gahp_call_timeout if timeout is None else timeout
        return await client.call(command, *args, timeout=limit, later=later)

    async def close(self) -> None:
        """QUIT the server, if one is up."""
        if self._client is not None:
            with contextlib.suppress(GahpError, OSError):
                await self._client.close()
            self._client = None

    async def _spawn_recorded(
        self, argv: Sequence[str], env: Mapping[str, str] | None
    ) -> GahpProcess:
        process = await self._spawn(argv, env)
        if self.pids is not None:
            self.pids.add(process.pid)
        return process
