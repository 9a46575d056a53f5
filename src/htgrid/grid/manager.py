"""The grid manager process: adopts grid jobs from the queue and runs them (HTCondor's
condor_gridmanager, one per queue rather than one per user).

    htgrid gridmanager --home $HTGRID_HOME            # or: run_gridmanager(home)

The contract with the queue daemon that spawns and supervises it:

* Arguments: `home` (HTGRID_HOME); the queue database is `JobQueue.open(queue_dir)`,
  `queue_dir` defaulting to `<home>/spool` as the daemon lays it out (HTGRID_QUEUE_DIR,
  `--queue-dir`). Its own files are under `<queue_dir>/gridmanager/`: `lock` (one grid
  manager per queue: a second exits at once with status 3), `gahp.pids`, `feed.seq`,
  `wake` (the doorbell the daemon rings after it changes the queue), the batch GAHP's
  scratch (`gahp/`, which must survive restarts: it holds the GAHP's job records), and
  `leftovers/` (removals of finished jobs' remote copies that failed, tried again).
  `htgrid gridmanager` logs to `<home>/log/GridmanagerLog`.
* Signals and exit: SIGHUP (condor_reconfig) makes it read htgrid.conf again
  (`GridManager.reconfig`); SIGTERM or SIGINT stop it cleanly (exit 0); it exits 1 if it cannot
  start (the queue cannot be opened) and 3 if another one runs. kill -9 is safe at any
  moment. Restart it whenever it exits (HTCondor's schedd does); a restarted grid manager
  recovers every job from the queue alone.
* Jobs: it adopts `JobUniverse == 9 && Managed =!= "ScheddDone" && (JobStatus != 5 ||
  Managed =?= "External")`, at start-up by a full scan and afterwards from the change feed
  (a submit, a job back to idle, and a grid match: the attribute change that sets
  `Matched = true` and fills GridResource in).
  A job it works on has `Managed = "External"`: a removed one stays in the queue (as
  Removed) until the batch job is cancelled and the grid manager calls `destroy`. A job
  it put on hold is handed back with `Managed = "Schedd"`; a job it finished has left
  the queue through `job_exited`.
* The feed: it reads `changes_since` when the daemon rings `wake` (queue/doorbell.py),
  and every `feed_interval` in any case; `feed.seq` holds the last sequence number it has
  read, so the daemon's `trim_changes` can keep what it has not. Should changes it never
  read be trimmed anyway, it notices the gap and rescans the queue.
* Policy: the queue's periodic pass skips `Managed == "External"` jobs; the grid manager
  evaluates their PeriodicHold and PeriodicRemove itself (`periodic_interval`), and the
  queue's `job_exited` applies the OnExit policy.
* Failures: a job the grid manager fails on (an attribute it cannot use, a bug that job
  alone meets) is held with a reason saying so, logged once; the other jobs go on. Only
  the queue's own failures (its database) and the process's (memory) stop it.
* User log events: it writes 027 (grid submit), 025 and 026 (resource up and down). The
  daemon writes 001, 004, 005, 009 and 012 from the status changes it makes through
  JobQueue: job_started, job_evicted, job_exited, act(Hold), destroy of a Removed job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from htgrid._files import single_instance
from htgrid._privsep import (
    Account,
    OwnerPolicy,
    OwnerRefused,
    spawn_identity,
)
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.gahp import Clock, SystemClock
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import AlreadyRunning, GridError, UnsupportedGridJob
from htgrid.grid._feed import ChangeFeed
from htgrid.grid._gahps import GahpHandle, GahpPids
from htgrid.grid._gridtype import GahpCredential, GridType
from htgrid.grid._job import GridJob
from htgrid.grid._leftovers import Leftovers, LeftoverSweep
from htgrid.grid._myproxy import MyProxyRenewer
from htgrid.grid._policy import periodic_policy
from htgrid.grid._queueio import QueueIO
from htgrid.grid._registry import GRID_TYPES, grid_type_of
from htgrid.grid._resource import Resource
from htgrid.grid._servers import GahpServers
from htgrid.grid._task import Services
from htgrid.grid._userlog import EventLogs
from htgrid.grid._values import as_int
from htgrid.pool import HomeLayout
from htgrid.queue import (
    Change,
    ChangeKind,
    HoldReasonCode,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem

__all__ = ["ADOPTABLE", "GRID_TYPES", "GridManager", "Publish"]

log = logging.getLogger("htgrid.grid")

#: Sends ads to the pool's collector (the caller's: the grid layer knows no collector).
Publish = Callable[[Sequence[ClassAd]], Awaitable[None]]

#: Which queued jobs are the grid manager's (gridmanager.cpp's first-contact query). A job
#: whose GridResource waits for grid matchmaking ($$(...)) has Matched = false until the
#: negotiator fills it in.
ADOPTABLE = (
    'JobUniverse == 9 && Managed =!= "ScheddDone" && Matched =!= false'
    ' && (JobStatus != 5 || Managed =?= "External")'
)


#: Jobs read in one go when the feed names jobs that may have become ours.
_RECHECK_BATCH: Final = 1000


class GridManager:
    """One grid manager over one job queue."""

    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        queue_dir: str | os.PathLike[str] | None = None,
        config: GridManagerConfig | None = None,
        clock: Clock | None = None,
        grid_types: Mapping[str, GridType[Any]] | None = None,
        policy: OwnerPolicy | None = None,
        publish: Publish | None = None,
    ) -> None:
        """`policy`: whose jobs it runs, and as whom (None: all, as its own user);
        `publish`: sends the resources' Grid ads to the pool's collector, every
        GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL (None: they are not published)."""
        self.policy = policy
        self.publish = publish
        self._owners: dict[JobId, Account] = {}  # the jobs run as another user than ours
        self.home = Path(home)
        self.queue_dir = Path(queue_dir) if queue_dir is not None else HomeLayout(self.home).spool
        self.dir = self.queue_dir / "gridmanager"
        self.config = config or GridManagerConfig()
        self.clock: Clock = clock or SystemClock()
        self.grid_types = dict(grid_types or GRID_TYPES)
        self.jobs: dict[JobId, GridJob[Any, Any]] = {}
        self.resources: dict[str, Resource[Any, Any]] = {}
        self.ready = asyncio.Event()  # set once the start-up scan is done
        self._tasks: dict[JobId, asyncio.Task[None]] = {}
        self._io: QueueIO | None = None
        self._services: Services | None = None
        self._pids = GahpPids(self.dir / "gahp.pids")
        self._servers = GahpServers(
            self.dir / "gahp",
            self.queue_dir / "gahp",
            clock=self.clock,
            config=self.config,
            pids=self._pids,
        )
        self.gahps: dict[str, GahpHandle] = self._servers.handles
        self._feed = ChangeFeed(self.dir, self.clock, lambda: self.config.feed_interval)
        self._faults = FaultLog(log, "grid manager")
        self._policy: asyncio.Task[None] | None = None  # the periodic policy's loop
        #: The removals of finished jobs' remote copies that failed, tried again.
        self.leftovers = LeftoverSweep(
            Leftovers(self.dir / "leftovers"),
            self.clock,
            lambda: self.config,
            self._leftover_resource,
            self._still_queued,
        )

    def _start_policy(self) -> None:
        """The periodic policy's loop, (re)started with the settings in force (it reads
        SYSTEM_PERIODIC_* as it starts)."""
        if self._policy is not None:
            self._policy.cancel()
        self._policy = asyncio.create_task(
            periodic_policy(
                self.services.io,
                self.home,
                self.clock,
                self.config.periodic_interval,
                self._contain,
            ),
            name="periodic policy",
        )

    def reconfig(self, new: GridManagerConfig) -> None:
        """condor_reconfig: take the settings `new` (htgrid.conf read again) that can change
        while it runs. Resources poll at the new interval from now and admit the jobs a
        higher submit limit lets through; a GAHP server started from now on (a new
        resource's, or one restarted) gets the new timeouts; the periodic policy reads
        SYSTEM_PERIODIC_* and PERIODIC_EXPR_INTERVAL again. A knob that needs a restart
        is logged so, and kept."""
        config, lines = self.config.reconfigured(new)
        old, self.config = self.config, config
        for line in lines:
            log.info("reconfig: %s", line)
        if not lines:
            log.info("reconfig: htgrid.conf read again; no grid manager knob changed")
        self._servers.retune(config)
        if self._services is None:
            return  # not running yet: it starts with these
        self._services.config = config
        for resource in self.resources.values():
            resource.reconfig(old)
        self._start_policy()

    # ---- life ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set (forever without one); AlreadyRunning if another runs."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with single_instance(  # two managers would submit twice
            self.dir / "lock",
            lambda: AlreadyRunning(f"another grid manager runs on {self.queue_dir}"),
        ):
            await self._pids.reap_predecessors(self.clock)
            self._io = await asyncio.to_thread(self._open_queue)
            logs = EventLogs(lambda cluster, proc: self._owners.get(JobId(cluster, proc)))
            renewer = MyProxyRenewer(self.queue_dir, self._owners.get)
            self._services = Services(
                self.config,
                self.clock,
                self._io,
                logs,
                self.home,
                myproxy=renewer,
                leftovers=self.leftovers,
            )
            feed: asyncio.Future[Any] | None = None
            try:
                self._feed.open()
                self._feed.seq = await self._io.last_seq()
                await self._scan()
                self.ready.set()
                loops = [
                    asyncio.create_task(
                        self._feed.follow(self._io, self._apply, self._scan), name="change feed"
                    ),
                    asyncio.create_task(self.leftovers.run(), name="leftovers"),
                ]
                self._start_policy()
                if self.publish is not None:
                    loops.append(asyncio.create_task(self._advertise(self.publish), name="ads"))
                feed = asyncio.gather(*loops)
                if stop is None:
                    await asyncio.Future()
                else:
                    await stop.wait()
            finally:
                await self._shutdown(feed)

    def _open_queue(self) -> QueueIO:
        """Two connections: tags are synced to disk one batch at a time (see QueueIO)."""
        # The daemon set aside the rows it could not read when it opened the queue.
        queue = JobQueue.open(self.queue_dir, clock=self.clock.time, fsync=False, check=False)
        if not self.config.fsync:
            return QueueIO(queue)
        try:
            durable = JobQueue.open(self.queue_dir, clock=self.clock.time, fsync=True, check=False)
        except BaseException:
            queue.close()
            raise
        return QueueIO(queue, durable)

    async def _shutdown(self, feed: asyncio.Future[Any] | None) -> None:
        tasks: list[asyncio.Future[Any]] = [*self._tasks.values()]
        if feed is not None:
            tasks.append(feed)
        if self._policy is not None:
            tasks.append(self._policy)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for resource in self.resources.values():
            await resource.stop()
        await self._servers.close()
        self._feed.close()
        if self._io is not None:
            await self._io.close()

    @property
    def services(self) -> Services:
        if self._services is None:
            raise GridError("the grid manager is not running")
        return self._services

    def stats(self) -> dict[str, Any]:
        """Counters: jobs, queue writes, user-log events, and per resource."""
        services = self.services
        return {
            "jobs": len(self.jobs),
            "queue_writes": services.io.writes,
            "events": services.logs.written,
            "gahp_starts": {key: gahp.starts for key, gahp in self.gahps.items()},
            "resources": {name: res.stats for name, res in self.resources.items()},
        }

    def resource_ads(self) -> list[ClassAd]:
        """A Grid ad for each resource that has jobs (HTCondor's gridmanager drops the
        others), for the collector."""
        ads = []
        for where, res in self.resources.items():
            if not res.jobs:
                continue
            ad = res.ad()
            if where != res.name:
                # One ad per owner and credential, as HTCondor's HashName makes them; the
                # credential's path is a digest: the collector shows ads to anyone.
                ad["HashName"] = f"{res.name}#{hashlib.sha256(where.encode()).hexdigest()[:16]}"
            owner = self._owners.get(next(iter(res.jobs)))
            if owner is not None:
                ad["Owner"] = owner.name
            ads.append(ad)
        return ads

    async def _advertise(self, publish: Publish) -> None:
        while True:
            interval = self.config.collector_update_interval  # a reconfig may change it
            ads = self.resource_ads()
            if ads:
                for ad in ads:
                    ad["UpdateInterval"] = int(interval)  # the collector keeps it 3 times that
                try:
                    await publish(ads)
                except Exception as err:  # the collector is down: try again next time
                    log.warning("grid manager: cannot publish the resources' ads: %s", err)
            await self.clock.sleep(interval)

    # ---- adopting jobs --------------------------------------------------------------------

    async def _scan(self) -> None:
        """Adopt every job that is ours (start-up, and after a gap in the change feed)."""
        for ad in await self.services.io.query(ADOPTABLE):
            await self._adopt(ad)
        log.info("grid manager: %d grid jobs after the scan", len(self.jobs))

    async def _adopt(self, ad: ClassAd) -> None:
        job_id = JobId(as_int(ad.get("ClusterId")) or 0, as_int(ad.get("ProcId")) or 0)
        if job_id in self.jobs:
            return
        try:
            job = await self._new_job(job_id, ad)
        except Exception as exc:
            if daemon_fault(exc):
                raise
            await self._contain(job_id, exc, "adopting it")
            return
        if job is None:
            return
        self.jobs[job_id] = job
        self._tasks[job_id] = asyncio.create_task(self._run_job(job), name=f"job {job_id}")

    async def _new_job(self, job_id: JobId, ad: ClassAd) -> GridJob[Any, Any] | None:
        """The job of its type at its resource; None when no type can run it (held)."""
        grid_resource = ad.get("GridResource")
        text = grid_resource if isinstance(grid_resource, str) else ""
        gtype = self.grid_types.get(grid_type_of(text))
        try:
            if gtype is None:
                raise UnsupportedGridJob(
                    f"the gridmanager can't handle this job type (GridResource {text!r})"
                )
            key = gtype.resource_key(text)
        except UnsupportedGridJob as err:
            await self._refuse(job_id, ad, str(err))
            return None
        try:
            owner = self._owner(ad)
        except OwnerRefused as err:
            await self._refuse(job_id, ad, str(err), HoldReasonCode.FailedToAccessUserAccount)
            return None
        credential = gtype.credential(ad)
        if credential is not None:
            # As HTCondor's grid manager holds a job whose proxy it cannot acquire: else
            # the job would wait on a resource that answers "no token" forever.
            problem = await asyncio.to_thread(credential.unreadable, owner)
            if problem is not None:
                await self._refuse(job_id, ad, problem, HoldReasonCode.CorruptedCredential)
                return None
        resource = self._resource_at(gtype, key, owner, credential)
        job = gtype.new_job(job_id, ad, resource, self.services)
        resource.register(job)
        if owner is not None:
            self._owners[job_id] = owner
        return job

    def _resource_at(
        self,
        gtype: GridType[Any],
        key: str,
        owner: Account | None,
        credential: GahpCredential | None,
    ) -> Resource[Any, Any]:
        """The resource `key` of `owner`'s jobs that present `credential`, made and
        started on first use."""
        # HTCondor runs a grid manager per user, so each user has resources and GAHP
        # servers of their own: here those of a job run as another user are keyed by it,
        # and, as in HTCondor, by the credential the job names for its server to present.
        where = key if owner is None else f"{key}#{owner.name}"
        if credential is not None:
            where = f"{where}#{credential.path}"
        resource = self.resources.get(where)
        if resource is None:
            resource = gtype.new_resource(
                key, self._servers.factory(owner), self.services, credential
            )
            self.resources[where] = resource
            resource.start()
        return resource

    async def _still_queued(self, job_id: JobId) -> bool:
        try:
            await self.services.io.get(job_id)
        except JobNotFound:
            return False
        return True

    async def _leftover_resource(self, attrs: Mapping[str, str]) -> Resource[Any, Any]:
        """The resource a finished job's remote copy is let go through, from the job
        attributes its record kept (GridError, OwnerRefused: none to be had now)."""
        text = attrs.get("GridResource", "")
        gtype = self.grid_types.get(grid_type_of(text))
        if gtype is None:
            raise UnsupportedGridJob(f"no grid type runs GridResource {text!r}")
        ad = ClassAd(dict(attrs))
        return self._resource_at(
            gtype, gtype.resource_key(text), self._owner(ad), gtype.credential(ad)
        )

    async def _contain(
        self,
        job_id: JobId,
        exc: Exception,
        doing: str,
        code: HoldReasonCode = HoldReasonCode.Unspecified,
    ) -> None:
        """Hold a job the grid manager failed on while `doing` something for it (it would
        fail again at every try), and log it once; the other jobs go on."""
        what = problem(exc)
        held = False
        try:
            reason = f"The grid manager failed on this job ({doing}): {what}"
            held = await self.services.io.hold(job_id, reason, code, 0)
        except JobNotFound:
            pass
        except Exception as again:
            if daemon_fault(again) and not isinstance(again, HTGridError):
                raise
        self._faults.report(JobFailure(job_id, what, held=held, error=exc))

    def _owner(self, ad: ClassAd) -> Account | None:
        """The account the job's GAHP servers run as, when not this process's own user
        (OwnerRefused when its owner may not run jobs here)."""
        if self.policy is None:
            return None
        account = self.policy.account(ad.get("Owner"))
        return account if spawn_identity(account) else None

    async def _refuse(
        self,
        job_id: JobId,
        ad: ClassAd,
        reason: str,
        code: HoldReasonCode = HoldReasonCode.Unspecified,
    ) -> None:
        """Hold a job no grid type can run (HTCondor's BaseJob does the same), whose owner
        may not run jobs here, or whose credential its owner cannot read."""
        log.warning("job %s: %s", job_id, reason)
        io = self.services.io
        with contextlib.suppress(JobNotFound):
            status = JobStatus(as_int(ad.get("JobStatus")) or 1)
            if status is JobStatus.REMOVED:
                await io.destroy(job_id)
                return
            if status is not JobStatus.HELD:
                await io.hold(job_id, reason, code, 0)
            await io.update(job_id, {"Managed": "Schedd"})

    async def _run_job(self, job: GridJob[Any, Any]) -> None:
        try:
            await job.run()
        except Exception as exc:
            if not daemon_fault(exc):
                # Held, so that it is not run again as it is: a release, or the user's
                # fix, brings it back; its remote part is cancelled when it is picked up
                # again (held).
                await self._contain(job.job_id, exc, f"in state {job.state.name}")
            elif isinstance(exc, HTGridError):  # the queue failed: picked up again later
                log.error(
                    "job %s: the grid manager failed in %s: %s", job.job_id, job.state.name, exc
                )
            else:
                raise
            await self.clock.sleep(self.config.retry_max)
        finally:
            self.jobs.pop(job.job_id, None)
            self._tasks.pop(job.job_id, None)
            self._owners.pop(job.job_id, None)
            job.resource.unregister(job)
        if job.gone:
            await job.abandon()
            return
        # The job may have changed again after its last look (released right after it
        # was handed back): adopt it anew if it is ours again.
        await self._recheck(job.job_id)

    async def _recheck(self, job_id: JobId) -> None:
        try:
            ad = await self.services.io.get(job_id)
        except JobNotFound:
            return
        if _adoptable(ad):
            await self._adopt(ad)

    # ---- following the queue --------------------------------------------------------------

    async def _apply(self, changes: Sequence[Change]) -> None:
        submitted: list[int] = []
        recheck: dict[JobId, None] = {}  # jobs that may be ours now, in order
        for change in changes:
            if change.kind is ChangeKind.SUBMITTED:
                submitted.append(change.cluster)
                continue
            for job_id in change.job_ids:
                try:
                    if self._note(change, job_id):
                        recheck[job_id] = None
                except Exception as exc:
                    if daemon_fault(exc):
                        raise
                    await self._contain(job_id, exc, "following its changes")
        if submitted:
            # One query for the new clusters: their ids only grow, so a range holds them.
            constraint = f"ClusterId >= {min(submitted)} && ClusterId <= {max(submitted)}"
            for ad in await self.services.io.query(f"{constraint} && {ADOPTABLE}"):
                await self._adopt(ad)
        # Read together, not one by one: a CE's HTCondor-C side releases thousands of
        # jobs at once, nearly none of them grid jobs (the router's sources).
        wanted = list(recheck)
        for at in range(0, len(wanted), _RECHECK_BATCH):
            found = await self.services.io.get_many(wanted[at : at + _RECHECK_BATCH])
            for ad in found.values():
                if _adoptable(ad):
                    await self._adopt(ad)

    def _note(self, change: Change, job_id: JobId) -> bool:
        """What one change of one job means to the grid manager; True when the job, not
        ours, may be now (its ad is to be read again)."""
        job = self.jobs.get(job_id)
        if change.kind is ChangeKind.LEFT_QUEUE:
            if job is not None:
                job.left_queue()
        elif change.kind is ChangeKind.STATUS:
            if job is not None:
                job.local_change(change.status, change.attrs)
            elif change.status is JobStatus.IDLE:
                return True  # released, or requeued
        elif job is None and _matched(change):
            # Grid matchmaking filled GridResource in (the status stays Idle): ours now.
            return True
        return False


def _matched(change: Change) -> bool:
    """Whether an attribute change set Matched = true (grid matchmaking's, or a user's)."""
    return '"matched"' in change.stored.lower() and change.attrs.get("Matched") is True


def _adoptable(ad: ClassAd) -> bool:
    """ADOPTABLE, evaluated in Python for one ad."""
    if ad.get("JobUniverse") != 9:
        return False
    managed = ad.get("Managed")
    if managed == "ScheddDone" or ad.get("Matched") is False:
        return False
    return ad.get("JobStatus") != JobStatus.HELD or managed == "External"
