"""The personal pool around the queue: the collector, the negotiator and the execute node,
as the schedd's `Companion` (htgrid.schedd): the master's part of the one process.

What runs is DAEMON_LIST's choice (`htgrid up -no-execute` leaves STARTD out):

- COLLECTOR: a child process serving a loopback socket this daemon binds (COLLECTOR_HOST;
  port 0 picks a free one) and keeps across the collector's restarts; its address is
  written to run/collector.address for the command line to find. It speaks TLS with the
  pool's server certificate and takes the pool's tokens; the daemons here present the
  pool's daemon token (etc/tokens.d/daemon), made with the rest of the pool's security
  material before anything starts.
- NEGOTIATOR: a task of this daemon (it reads the queue directly), cycling every
  NEGOTIATOR_INTERVAL; should it fail, it is restarted after a back-off.
- STARTD: a child process, the execute node; the shadows run vanilla jobs on it.

`htgrid reconfig` (condor_reconfig) reaches the schedd here and, as SIGHUP, every child:
each reads htgrid.conf again and takes what can change while it runs.
- the schedd's ad, sent to the collector every SCHEDD_INTERVAL.
- the ads of the annexes this pool made (`htgrid annex create` records them under
  spool/annexes), refreshed every ANNEX_UPDATE_INTERVAL while any is recorded, by
  `python -m htgrid.annex.keep` (a process: the cloud's calls block and need boto3).

Stopping goes in the order that loses nothing: no more matches, running vanilla jobs
vacated (back to idle), then the execute node, the schedd's ad, the collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from htgrid._ports import port_holder
from htgrid.client import pool_url
from htgrid.collector import CollectorClient
from htgrid.errors import HTGridError
from htgrid.master._supervise import ChildSpec, Supervisor
from htgrid.negotiator import NegotiatorConfig
from htgrid.negotiator.daemon import CollectorMachines, Negotiator
from htgrid.net.security import SecurityConfig, ensure_pool_security
from htgrid.net.server import tcp_listener
from htgrid.pool import ConfigFile
from htgrid.schedd import (
    NegotiationLoop,
    QueueJobs,
    Running,
    ScheddAdvertiser,
    ScheddConfig,
    ScheddError,
    default_schedd_name,
)

__all__ = ["Pool"]

if TYPE_CHECKING:
    from htgrid.queue import JobQueue

_log = logging.getLogger("htgrid.master")
_BIND_TRIES: Final = 50  # a collector of a daemon that just died may still hold the port


class Pool:
    """Starts, reports on and stops the pool's daemons besides the queue (the schedd's
    `Companion`)."""

    def __init__(self, config: ScheddConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._schedd: Running | None = None
        self.supervisor = Supervisor(config.backoff, on_no_restart=self._exited_for_good)
        self.collector_address: str | None = None
        self._listener: socket.socket | None = None
        self._client: CollectorClient | None = None
        self._advertiser: ScheddAdvertiser | None = None
        self._views: list[CollectorClient] = []
        self._negotiation: NegotiationLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.idle_shutdown = False

    @property
    def pool(self) -> str:
        """The collector this pool advertises to and negotiates from."""
        return self.collector_address or self.config.collector_host

    async def listen(self) -> None:
        """Bind the collector's port (COLLECTOR_HOST), before the daemon answers anyone:
        `htgrid up` reports a port another program holds, and nothing starts."""
        if "COLLECTOR" in self.config.daemons and self._listener is None:
            self._listener = await self._bind()

    def close_listener(self) -> None:
        """Let go of the collector's port (the daemon could not start after all)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def start(self, schedd: Running) -> None:
        """Start the daemons DAEMON_LIST names and the schedd's ad, beside `schedd`."""
        self._schedd = schedd
        cfg = self.config
        python = sys.executable
        # `htgrid up` made these already; a daemon started otherwise makes them here.
        await asyncio.to_thread(ensure_pool_security, SecurityConfig.load(cfg.home))
        if "COLLECTOR" in cfg.daemons:
            await self.listen()
            assert self._listener is not None
            host, port = self._listener.getsockname()[:2]
            self.collector_address = f"{host}:{port}"
            await asyncio.to_thread(_write, cfg.collector_address_file, self.collector_address)
            self.supervisor.add(
                ChildSpec(
                    "collector",
                    (
                        python,
                        "-m",
                        "htgrid.collector",
                        "--home",
                        str(cfg.home),
                        "--fd",
                        str(self._listener.fileno()),
                        "--parent-fd",
                        "{parent_fd}",
                    ),
                    cfg.collector_log,
                    pass_fds=(self._listener.fileno(),),
                    reconfig=True,
                )
            )
        if "STARTD" in cfg.daemons:
            self.supervisor.add(
                ChildSpec(
                    "startd",
                    (
                        python,
                        "-m",
                        "htgrid.startd",
                        "--home",
                        str(cfg.home),
                        "--pool",
                        self.pool,
                        "--parent-fd",
                        "{parent_fd}",
                    ),
                    cfg.startd_log,
                    stop_timeout=cfg.kill_grace + 30.0,
                    reconfig=True,
                )
            )
        if "GRIDMANAGER" in cfg.daemons:
            # The grid manager opens the same queue database; its log goes to stderr,
            # which the supervisor writes to GridmanagerLog.
            self.supervisor.add(
                ChildSpec(
                    "gridmanager",
                    (
                        python,
                        "-m",
                        "htgrid.cli",
                        "gridmanager",
                        "--home",
                        str(cfg.home),
                        "--log",
                        "-",
                        "--parent-fd",
                        "{parent_fd}",
                    ),
                    cfg.gridmanager_log,
                    reconfig=True,
                )
            )
        if "JOB_ROUTER" in cfg.daemons:
            self.supervisor.add(
                ChildSpec(
                    "job_router",
                    (
                        python,
                        "-m",
                        "htgrid.cli",
                        "job_router",
                        "--home",
                        str(cfg.home),
                        "--log",
                        "-",
                        "--parent-fd",
                        "{parent_fd}",
                    ),
                    cfg.jobrouter_log,
                    reconfig=True,
                )
            )
        self.supervisor.start()
        self._client = CollectorClient(self.pool, timeout=10.0, home=cfg.home, daemon=True)
        address = f"<{socket.gethostname()}?sock={cfg.socket}>"
        views = [
            CollectorClient(host, timeout=10.0, home=cfg.home, daemon=True)
            for host in cfg.view_hosts
        ]
        self._views = views
        shared = (await asyncio.to_thread(ConfigFile.read, cfg.home)).flag("USE_SHARED_PORT")
        self._advertiser = ScheddAdvertiser(
            schedd.worker,
            self._client,
            address=address,
            interval=cfg.schedd_interval,
            started=int(self._clock()),
            clock=self._clock,
            name=cfg.schedd_name,
            url=schedd.api_url,
            extra=_ce_attributes(cfg, self.pool) if "JOB_ROUTER" in cfg.daemons else None,
            views=views,
            # HTCondor's clients reach the schedd through the collector's port.
            shared_port=self.pool if shared else None,
        )
        self._tasks.append(asyncio.create_task(self._advertiser.run(), name="schedd ad"))
        self._tasks.append(asyncio.create_task(self._restarting(self._keep_annexes, "annex ads")))
        if "NEGOTIATOR" in cfg.daemons:
            negotiator = Negotiator(
                QueueJobs(schedd.worker, schedd.shadows, clock=self._clock),
                CollectorMachines(self._client),
                config=NegotiatorConfig(),
                collector=self._client,
                interval=cfg.negotiator_interval,
                # A match not yet in the slot's ad is assumed for this long at most: the
                # startd refuses a claim it cannot give, so a short guess costs little.
                pending_lifetime=max(10.0, 3 * cfg.negotiator_interval),
                name=f"negotiator@{default_schedd_name().partition('@')[2]}",
            )
            self._negotiation = NegotiationLoop(
                negotiator,
                schedd.worker,
                interval=cfg.negotiator_interval,
                min_interval=cfg.negotiator_min_interval,
            )
            schedd.shadows.on_slot_freed(self._negotiation.reschedule)
            schedd.shadows.on_claim_answered(negotiator.claim_answered)
            self._tasks.append(
                asyncio.create_task(self._restarting(self._negotiation.run, "negotiator"))
            )

    async def _bind(self) -> socket.socket:
        url = pool_url(self.config.collector_host)
        host, _, port = url.removeprefix("https://").rpartition(":")
        for attempt in range(_BIND_TRIES):
            sock = tcp_listener(host)
            try:
                sock.bind((host.strip("[]"), int(port)))
                sock.listen(128)
                sock.set_inheritable(True)
                return sock
            except OSError as exc:
                sock.close()
                holder = await asyncio.to_thread(port_holder, int(port))
                # Only this pool's own collector, left by a daemon that just died, goes
                # away by itself (it stops when its parent's pipe closes): wait for it.
                # So when the holder is gone before it could be told (that collector
                # exiting just then, on a busy host). Any other program: say which, at once.
                ours = holder is None or _our_collector(holder.command, self.config.home)
                if not ours or attempt == _BIND_TRIES - 1:
                    held = f" (held by {holder})" if holder is not None else ""
                    raise ScheddError(
                        f"the collector cannot listen on {host}:{port} (COLLECTOR_HOST): "
                        f"{exc.strerror}{held}"
                    ) from exc
                await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def _restarting(self, work: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run `work` until cancelled, starting it again after a back-off if it fails."""
        failures = 0
        while True:
            began = time.monotonic()
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                _log.exception("the %s failed", name)
            if time.monotonic() - began >= self.config.backoff.recover:
                failures = 0
            delay = self.config.backoff.delay(failures)
            failures += 1
            _log.error("restarting the %s in %g s", name, delay)
            await asyncio.sleep(delay)

    async def _keep_annexes(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.annex_update_interval)
            if not await asyncio.to_thread(_has_annexes, cfg.annex_dir):
                continue
            log = await asyncio.to_thread(open, cfg.annex_log, "ab")
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "htgrid.annex.keep", "--home", str(cfg.home),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            finally:
                log.close()
            try:
                # A cloud that hangs holds up one refresh, not the next ones.
                await asyncio.wait_for(proc.wait(), max(60.0, 2 * cfg.annex_update_interval))
            except TimeoutError:
                _log.error("the refresh of the annex ads did not finish: killed")
            finally:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()

    def _exited_for_good(self, name: str, status: int) -> None:
        if name == "startd":
            # STARTD_NOCLAIM_SHUTDOWN: HTCondor's startd then tells its master to shut
            # down the machine's daemons, and the master runs its shutdown script.
            _log.info("the execute node shut down for want of work: stopping the pool")
            self.idle_shutdown = True
            if self._schedd is not None:
                self._schedd.request_stop()

    def status(self) -> dict[str, Any]:
        return {
            "collector": self.collector_address or self.config.collector_host,
            "daemons": sorted(self.config.daemons),
            "children": self.supervisor.status(),
            "negotiator": self._negotiation is not None,
        }

    def feed_positions(self) -> list[int]:
        """Where this pool's in-process followers of the change feed are."""
        return [self._negotiation.seq] if self._negotiation is not None else []

    def reconfig(self) -> None:
        """condor_reconfig: the children that take it read htgrid.conf again."""
        told = self.supervisor.reconfig()
        if told:
            _log.info("reconfig: told the %s", ", ".join(told))

    def reschedule(self) -> None:
        if self._negotiation is not None:
            self._negotiation.reschedule()

    async def stop_matching(self) -> None:
        """Stop the negotiator and the schedd's ad (the schedd vacates its jobs next)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Stop the daemons: the execute node first (its jobs vacated already)."""
        await self.supervisor.stop(order=["startd", "job_router", "gridmanager"])
        if self._advertiser is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advertiser.invalidate(), 2.0)
        if self._client is not None:
            # Before the collector stops: it waits for its clients' TLS connections to go.
            await self._client.aclose()
        for view in self._views:
            await view.aclose()
        await self.supervisor.stop()  # the collector, and any other child
        self.supervisor.close()
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.collector_address_file)


def _has_annexes(directory: Path) -> bool:
    return directory.is_dir() and any(directory.glob("*.json"))


def _ce_attributes(cfg: ScheddConfig, pool: str) -> Callable[[JobQueue], dict[str, Any]]:
    """A CE's attributes of its schedd ad (see ScheddAdvertiser): its routes, read from
    htgrid.conf at each update so that a reconfigured router is advertised as it is."""

    # Imported here for start-up: only a CE's master reads routes.
    from htgrid.router import RouterConfig, route_ads

    def attributes(queue: JobQueue) -> dict[str, Any]:
        try:
            config = RouterConfig.load(cfg.home)
        except HTGridError as err:
            _log.warning("the CE's routes are not advertised: %s", err)
            return {}
        return {
            "grid_resource": f"condor {cfg.schedd_name} {pool}",
            "JobRouterName": config.name,
            "JobRouterRoutes": route_ads(queue, config),
        }

    return attributes


def _our_collector(command: str, home: Path) -> bool:
    """Whether `command` is the collector a master of `home` starts."""
    words = command.split()
    return "htgrid.collector" in words and str(home) in words


def _write(path: os.PathLike[str], text: str) -> None:
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    os.replace(tmp, path)
