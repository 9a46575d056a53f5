"""The daemon: one asyncio loop running the API, the local universe, the event log
writer, the periodic policy timer and the shadows of vanilla jobs, over one queue
thread; and, beside it in the same process, a `Companion`: the pool's other daemons,
which `htgrid.master` runs (the collector and the execute node as children, the
negotiator as a task, the schedd's ad) and composes with this daemon.

Start-up: take the pool's lock (one daemon per home), open the queue, recover from a
crash (kill what earlier runs left, evict jobs with no process), serve the socket and
the same API over TLS with tokens on SCHEDD_ADDRESS (its URL in run/schedd.url), start
the companion, write the pid file. SIGTERM or SIGINT: stop taking requests, no more
matches (the companion's negotiator), running vanilla jobs vacated (back to idle), the
companion's daemons stopped, running local jobs stopped (back to idle), the jobs' events
written, the queue closed, the socket, the URL file and the pid file removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from htgrid import __version__
from htgrid._aio import noted
from htgrid._files import write_atomic
from htgrid._privsep import OwnerPolicy, closed_to_others
from htgrid.collector import ReverseConnector
from htgrid.errors import HTGridError
from htgrid.net.security import (
    SERVER_CERT,
    AuditLog,
    GatekeeperConfig,
)
from htgrid.net.server import (
    SizeLimit,
)
from htgrid.pool import family_marker
from htgrid.queue import JobQueue
from htgrid.queue.faults import FaultLog
from htgrid.schedd._annex_tokens import AnnexTokens
from htgrid.schedd._config import ScheddConfig, ScheddError
from htgrid.schedd._listeners import start_socket_api, start_tls_api
from htgrid.schedd._local import LocalRunner
from htgrid.schedd._service import QueueService
from htgrid.schedd._shadow import ShadowManager, ShadowSettings
from htgrid.schedd._spool_sweep import SweepFailures, remove_spools, spooled_jobs
from htgrid.schedd._userlog import UserLogWriter
from htgrid.schedd._worker import QueueWorker
from htgrid.web import Sources

__all__ = ["Companion", "Daemon", "Running"]

_log = logging.getLogger("htgrid.schedd")


@dataclass(frozen=True, slots=True)
class Running:
    """What the schedd hands its companion once its APIs listen."""

    worker: QueueWorker
    shadows: ShadowManager
    api_url: str  # the queue's TLS API, advertised as HTGridURL
    request_stop: Callable[[], None]  # what SIGTERM does: stop the whole process cleanly


class Companion(Protocol):
    """What runs beside the schedd in its process: the master's part of it (HTCondor's
    condor_master and its DAEMON_LIST). The schedd calls each method at its own point of
    its life, in the order that loses nothing."""

    @property
    def pool(self) -> str:
        """The collector the pool reports to (host:port), for the log."""

    async def listen(self) -> None:
        """Take the ports it serves on, before the schedd answers anyone."""

    def close_listener(self) -> None:
        """Let the ports go: the schedd could not start after all."""

    async def start(self, schedd: Running) -> None:
        """Start, once the schedd's APIs listen."""

    async def stop_matching(self) -> None:
        """Make no more matches: the schedd vacates its running vanilla jobs next."""

    async def stop(self) -> None:
        """Stop the rest, once those jobs are back to idle (before the local jobs stop)."""

    def status(self) -> dict[str, Any]:
        """Its part of the health answer."""

    def feed_positions(self) -> list[int]:
        """Where its followers of the queue's change feed are."""

    def reschedule(self) -> None:
        """Negotiate soon (condor_reschedule)."""

    def reconfig(self) -> None:
        """Read htgrid.conf again (condor_reconfig), in its part and its children."""


class Daemon:
    """The personal pool's daemon for one home directory; `companion` runs beside it
    (`htgrid.master` gives the pool's other daemons)."""

    def __init__(
        self,
        config: ScheddConfig,
        *,
        clock: Callable[[], float] = time.time,
        companion: Companion | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._stop = asyncio.Event()
        self._started = clock()
        self._runner: LocalRunner | None = None
        self._shadows: ShadowManager | None = None
        self._audit: AuditLog | None = None  # SCHEDD_AUDIT_LOG
        self._reverse: ReverseConnector | None = None
        self._writer: UserLogWriter | None = None
        self._trimmed = 0
        self._policy_faults = FaultLog(_log, "periodic policy evaluation")
        self._quarantined = 0  # rows of the queue set aside as unreadable
        self.companion = companion
        self._reconfigs: set[asyncio.Task[None]] = set()
        self._spool_failures = SweepFailures()
        # Whose jobs run here, and as whom: the daemon's user (root: each job as its owner).
        self.policy = OwnerPolicy(allow_root=config.allow_root_jobs)

    def request_stop(self) -> None:
        """Begin a clean shutdown (what SIGTERM does)."""
        self._stop.set()

    def _on_sighup(self) -> None:
        """condor_reconfig (`htgrid reconfig`, SIGHUP): htgrid.conf read again."""
        task = asyncio.create_task(self.reconfig(), name="reconfig")
        self._reconfigs.add(task)
        task.add_done_callback(self._reconfigs.discard)

    async def reconfig(self) -> None:
        """Take the knobs that can change live (SYSTEM_PERIODIC_*, PERIODIC_EXPR_INTERVAL),
        and pass the reconfig on to the companion's daemons. DENY_*/ALLOW_* and the map
        file need none: they are read again after each edit. A configuration that cannot
        be read keeps the one in force."""
        try:
            new = await asyncio.to_thread(ScheddConfig.load, self.config.home)
        except HTGridError as exc:
            _log.error("reconfig: htgrid.conf is refused, the settings in force kept: %s", exc)
        else:
            self.config = dataclasses.replace(
                self.config,
                system_policy=new.system_policy,
                periodic_interval=new.periodic_interval,
            )
            _log.info("reconfig: htgrid.conf read again")
        if self.companion is not None:
            self.companion.reconfig()

    def _lock(self) -> int:
        fd = os.open(self.config.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ScheddError(f"another daemon already runs for {self.config.home}") from None
        return fd

    def _status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "pid": os.getpid(),
            "started": int(self._started),
            "home": str(self.config.home),
            "periodic_interval": self.config.periodic_interval,
            "quarantined": self._quarantined,
        }
        if self._runner is not None:
            status.update(self._runner.status())
        if self._shadows is not None:
            status.update(self._shadows.status())
        if self._reverse is not None:
            status["ccb_return_address"] = self._reverse.address
        if self.companion is not None:
            status.update(self.companion.status())
        return status

    async def run(self) -> None:
        """Serve until asked to stop (SIGTERM, SIGINT or `request_stop`)."""
        cfg = self.config
        cfg.make_dirs()
        closed = closed_to_others(cfg.home) if cfg.shared else None
        if closed is not None:
            _log.warning(
                "%s is closed to other users: they cannot reach this pool's socket, nor "
                "their jobs their spool and execute directories (put HTGRID_HOME where "
                "they pass through, e.g. /var/lib/htgrid)",
                closed,
            )
        lock = self._lock()
        try:
            # Rows it cannot read are set aside as it opens (logged, counted in health).
            queue = JobQueue.open(cfg.spool, clock=self._clock, fsync=cfg.fsync)
            self._quarantined = len(queue.quarantined())
            worker = QueueWorker(
                queue, doorbells=[cfg.gridmanager_doorbell, cfg.jobrouter_doorbell]
            )
            try:
                await self._serve(worker)
            finally:
                await asyncio.to_thread(worker.close)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(cfg.pid_file)
            os.close(lock)
        _log.info("htgrid daemon (pid %d) stopped", os.getpid())

    async def _serve(self, worker: QueueWorker) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        host = f"<{socket.gethostname()}?sock=schedd>"
        runner = LocalRunner(
            worker,
            marker=family_marker(cfg.home),
            max_jobs=cfg.max_local_jobs,
            grace=cfg.kill_grace,
            clock=self._clock,
            policy=self.policy,
        )
        self._runner = runner
        writer = UserLogWriter(worker, cfg.userlog_seq_file, host, self.policy)
        writer.load()
        self._writer = writer
        # Execute nodes behind NAT connect back here, through their broker (CCB).
        # On the port of the last start: the nodes' NAT may let them out to it alone, and
        # the jobs running behind it are reconnected to through it.
        reverse = ReverseConnector(cfg.schedd_address[0], cfg.home)
        try:
            await reverse.start(_last_port(cfg.ccb_port_file))
            _keep_port(cfg.ccb_port_file, reverse.address)
        except OSError as exc:
            raise ScheddError(
                f"SCHEDD_ADDRESS {cfg.schedd_address[0]}: cannot listen for the connections "
                f"of execute nodes behind NAT: {exc.strerror}"
            ) from None
        self._reverse = reverse
        shadows = ShadowManager(
            worker,
            ShadowSettings(
                cfg.schedd_name,
                cfg.spool,
                alive_interval=cfg.alive_interval,
                lease=cfg.claim_lease,
                vacate_grace=cfg.kill_grace,
                policy=self.policy,
                identity=(cfg.ca_dir / f"{SERVER_CERT}.crt", cfg.ca_dir / f"{SERVER_CERT}.key"),
                fsync=cfg.fsync,
                max_input=SizeLimit("MAX_TRANSFER_INPUT_MB", cfg.max_transfer_input_mb),
                max_output=SizeLimit("MAX_TRANSFER_OUTPUT_MB", cfg.max_transfer_output_mb),
                reconnect_factor=cfg.reconnect_factor,
                reconnect_ceiling=cfg.reconnect_ceiling,
            ),
            clock=self._clock,
            reverse=reverse,
            private_network=cfg.private_network_name,
        )
        self._shadows = shadows
        evicted = await runner.recover() + await shadows.recover()
        if evicted:
            _log.warning(
                "%d job(s) were running when the last daemon died: back to idle", len(evicted)
            )
        # SCHEDD_AUDIT_LOG: the API's decisions (both protocols') and the annex tokens granted.
        gate_settings = await asyncio.to_thread(GatekeeperConfig.load, cfg.home, "SCHEDD")
        self._audit = (
            AuditLog(gate_settings.audit_log, rotation=gate_settings.audit_rotation)
            if gate_settings.audit_log is not None
            else None
        )
        # As condor_submit: when a submit returns, its 000 events are in the user logs, so
        # `htgrid wait` (or a DAG) started right after it finds them; as HTCondor's shadow
        # does, a job's last events are in its log once the history shows it.
        service = QueueService(
            worker,
            self._status,
            spool=cfg.job_spool,
            clock=self._clock,
            after_submit=functools.partial(writer.catch_up, client=True),
            before_history=functools.partial(writer.catch_up, client=True),
            proxy_renewed=shadows.proxy_renewed,
            max_input=SizeLimit("MAX_TRANSFER_INPUT_MB", cfg.max_transfer_input_mb),
            max_output=SizeLimit("MAX_TRANSFER_OUTPUT_MB", cfg.max_transfer_output_mb),
            scratch=cfg.spool,
            fsync=cfg.fsync,
            policy=self.policy,
            use_voms=cfg.use_voms_attributes,
            annex_tokens=AnnexTokens(
                cfg.home,
                cfg.spool,
                max_lifetime=cfg.annex_token_max_lifetime,
                clock=self._clock,
                audit=self._audit.record if self._audit is not None else None,
            ),
        )
        companion = self.companion
        # Every TCP port first, the socket `htgrid up` asks last: a port another program
        # holds fails the start before the daemon has answered anyone.
        if companion is not None:
            await companion.listen()
        try:
            api, api_serving, url = await start_tls_api(
                cfg,
                service,
                self._web_sources(service),
                clock=self._clock,
                audit=self._audit,
                reschedule=self._reschedule,
            )
        except BaseException:
            if companion is not None:
                companion.close_listener()
            raise
        try:
            server, serving = await start_socket_api(cfg, service, self._web_sources(service))
        except BaseException:
            api.should_exit = True
            await api_serving
            with contextlib.suppress(FileNotFoundError):
                os.unlink(cfg.url_file)
            if companion is not None:
                companion.close_listener()
            raise
        tasks = [
            self._supervised(runner.run(), "local universe"),
            self._supervised(writer.run(), "event log writer"),
            self._supervised(self._periodic(worker), "periodic policy"),
            self._supervised(shadows.run(), "shadows"),
            self._supervised(shadows.renew_leases(), "job leases"),
        ]
        try:
            if companion is not None:
                await companion.start(Running(worker, shadows, url, self._stop.set))
            cfg.pid_file.write_text(f"{os.getpid()}\n")
            _log.info(
                "htgrid %s daemon (pid %d) serving %s and %s; queue %s; daemons %s; collector %s",
                __version__,
                os.getpid(),
                cfg.socket,
                url,
                cfg.spool / "queue.db",
                ", ".join(sorted(cfg.daemons)),
                companion.pool if companion is not None else cfg.collector_host,
            )
            await self._stop.wait()
        finally:
            _log.info("shutting down")
            server.should_exit = api.should_exit = True
            await noted(asyncio.gather(serving, api_serving), "the API servers", _log)
            if companion is not None:
                await noted(companion.stop_matching(), "the negotiator and ads", _log)
            await noted(shadows.shutdown(), "the shadows", _log)
            await reverse.aclose()
            if companion is not None:
                await noted(companion.stop(), "the pool's daemons", _log)
            for path in (cfg.socket, cfg.url_file):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            await noted(runner.shutdown(), "the local jobs", _log)
            for task in tasks:
                task.cancel()
            await noted(asyncio.gather(*tasks, return_exceptions=True), "the tasks", _log)
            await noted(writer.catch_up(), "the user log writer", _log)

    def _web_sources(self, service: QueueService) -> Sources:
        """What the web view (/web on both listeners) reads: the queue as its caller,
        the pool's collector, the users' files with their rights."""
        cfg, companion = self.config, self.companion

        def collector() -> str | None:
            pool = companion.pool if companion is not None else cfg.collector_host
            return None if not pool or pool.endswith(":0") else pool  # :0: none started

        return Sources(service, cfg.home, collector, self.policy, self._clock)

    def _reschedule(self) -> None:
        if self.companion is not None:
            self.companion.reschedule()

    def _supervised(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        async def guard() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                # A component that died would leave jobs unattended: stop cleanly instead.
                _log.exception("the %s failed; stopping the daemon", name)
                self._stop.set()

        return asyncio.create_task(guard(), name=name)

    async def _periodic(self, worker: QueueWorker) -> None:
        await self._sweep_spool(worker)
        while True:
            await asyncio.sleep(self.config.periodic_interval)
            try:
                applied, failures = await worker.write(
                    lambda q: q.periodic_pass(system=self.config.system_policy)
                )
            except HTGridError as exc:
                _log.error("periodic policy evaluation failed: %s", exc)
                continue
            for jid, decision in applied:
                _log.info("job %s: %s by %s", jid, decision.action.value, decision.attribute)
            self._policy_faults.pass_over(failures)
            await self._trim_feed(worker)
            await self._sweep_spool(worker)

    async def _sweep_spool(self, worker: QueueWorker) -> None:
        """Remove the spool directories of jobs no longer in the queue (_spool_sweep)."""
        spool = self.config.spool
        try:
            found = await asyncio.to_thread(spooled_jobs, spool)
            if not found:
                return
            present = await worker.read(lambda q: q.present(found))
            gone = sorted(found - present)
            removed, failed = await asyncio.to_thread(remove_spools, spool, gone)
        except OSError as exc:  # tried again at the next pass
            _log.warning("cannot clean the spool directory %s: %s", spool, exc)
            return
        self._spool_failures.note(removed, failed, gone)

    def _feed_read_upto(self, grid_manager_listens: bool = False) -> int:
        """The last change every follower of the feed has read (0: keep everything).

        The followers in this process start from the queue's last change when they start;
        the event log writer and the grid manager persist their positions, so what they
        have not read must stay (the grid manager would have to rescan the queue). The
        grid manager counts when this daemon runs it, or when one listened on its doorbell
        at the last ring (one started by hand, `htgrid gridmanager`); the job router when
        this daemon runs it (what it lost, it would find by reading every routed job).
        """
        positions = [f.seq for f in (self._writer, self._runner, self._shadows) if f is not None]
        if self.companion is not None:
            positions += self.companion.feed_positions()
        files = [self.config.jobrouter_feed_file] if "JOB_ROUTER" in self.config.daemons else []
        if grid_manager_listens or "GRIDMANAGER" in self.config.daemons:
            files.append(self.config.gridmanager_feed_file)
        for path in files:
            try:
                positions.append(int(path.read_text().strip()))
            except (OSError, ValueError):
                return 0  # not started yet, or never read the feed: keep everything
        return min(positions, default=0)

    async def _trim_feed(self, worker: QueueWorker) -> None:
        """Forget the changes every follower has read, so the feed does not grow forever."""
        upto = self._feed_read_upto(worker.listened(self.config.gridmanager_doorbell))
        if upto <= self._trimmed:
            return
        try:
            await worker.write(lambda q: q.trim_changes(upto))
        except HTGridError as exc:
            _log.error("trimming the change feed failed: %s", exc)
            return
        self._trimmed = upto


def _last_port(path: Path) -> int:
    """The port an earlier start listened on for nodes behind NAT (0: none known)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else 0


def _keep_port(path: Path, address: str) -> None:
    """Remember the port of `address` (`<host:port>`) for the next start."""
    port = int(address.strip("<>").rpartition(":")[2])
    if _last_port(path) != port:
        write_atomic(path, f"{port}\n".encode(), sync=False, mode=0o644)
