"""The local universe: the daemon runs `universe = local` jobs on this host itself.

`universe = scheduler` jobs run here too, as HTCondor's schedd runs them on its own host
(without a starter); they share START_LOCAL_UNIVERSE_LIMIT's slots with local jobs.

It follows the change feed: a submitted cluster or a job back to Idle may be a job to
start; a running job that became Held or Removed (by a user, or by a periodic policy) is
killed. The end of each run is recorded so the queue's policies apply: an exit goes to
`job_exited` (on_exit_hold, on_exit_remove, max_retries), a removal to `destroy`, and a
daemon shutdown to `job_evicted` (back to Idle, to run again after the next start).

Each run moves through one state machine:

    from \\ to    Running  Stopping  Ended
    Starting       yes       yes      yes     (Ended: the process could not be created)
    Running         .        yes      yes
    Stopping        .         .       yes
    Ended           .         .        .

After a crash, `recover` kills what earlier runs left behind (found by their marker)
and evicts the jobs the queue still calls Running: a job is never lost, never reported
done when it was not, and never runs twice at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import itertools
import logging
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid._privsep import OwnerPolicy, OwnerRefused
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.pool import (
    Exit,
    LaunchError,
    LaunchSpec,
    kill_group,
    kill_leftovers,
    spawn,
    wait_exit,
)
from htgrid.queue import (
    Change,
    ChangeKind,
    ExitOutcome,
    HoldReasonCode,
    Identity,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem
from htgrid.schedd._worker import QueueWorker

__all__ = ["SCHEDD", "LocalRunner", "RunState", "StopReason"]

_log = logging.getLogger("htgrid.schedd.local")

LOCAL: Final = 12  # JobUniverse
SCHEDULER: Final = 7  # JobUniverse: run on the schedd's host like local, as HTCondor does
_MINE: Final = f"(JobUniverse == {LOCAL} || JobUniverse == {SCHEDULER})"
SCHEDD: Final = Identity("htgrid", admin=True)  # the daemon acting on its own account
_FEED_BATCH: Final = 2000
#: Jobs read by id in one read (`_find_idle`).
_READ_PAGE: Final = 1000
_IDLE_LOCAL: Final = f"JobStatus == 1 && {_MINE}"


class RunState(enum.Enum):
    """Where one run of a job is."""

    STARTING = "starting"  # job_started committed; the process is being created
    RUNNING = "running"
    STOPPING = "stopping"  # asked to stop: KillSig sent, SIGKILL after the vacate time
    ENDED = "ended"  # the process is gone and its end recorded


TRANSITIONS: Final[Mapping[RunState, frozenset[RunState]]] = {
    RunState.STARTING: frozenset({RunState.RUNNING, RunState.STOPPING, RunState.ENDED}),
    RunState.RUNNING: frozenset({RunState.STOPPING, RunState.ENDED}),
    RunState.STOPPING: frozenset({RunState.ENDED}),
    RunState.ENDED: frozenset(),
}


class StopReason(enum.Enum):
    """Why a run is stopped before its process ends by itself."""

    HELD = "held"
    REMOVED = "removed"
    SHUTDOWN = "shutdown"


@dataclass(eq=False)
class _Run:
    """One run of a job: the only mutable record here, owned by the runner's loop."""

    job_id: JobId
    started: float
    state: RunState = RunState.STARTING
    stop_reason: StopReason | None = None
    start_seq: int = 0  # the change that started it: older changes are not about this run
    spec: LaunchSpec | None = None
    proc: subprocess.Popen[bytes] | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    def move(self, new: RunState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"run of job {self.job_id}: {self.state.value} -> {new.value}")
        self.state = new


class LocalRunner:
    """Starts local universe jobs, stops them when asked, and records how they ended."""

    def __init__(
        self,
        worker: QueueWorker,
        *,
        marker: str,
        max_jobs: int,
        grace: float,
        clock: Callable[[], float],
        policy: OwnerPolicy | None = None,
    ) -> None:
        """`policy`: whose jobs run, as whom (None: all, as the daemon's own user)."""
        self._policy = policy
        self._worker = worker
        self._marker = marker
        self._max_jobs = max_jobs
        self._grace = grace
        self._clock = clock
        self._runs: dict[JobId, _Run] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[JobId, None] = {}  # idle local jobs, oldest first
        self._recheck: set[JobId] = set()  # jobs whose run ended: idle again?
        self._seq = 0
        self._accepting = True
        self._wake = worker.subscribe()
        self._faults = FaultLog(_log, "local universe runner")

    # -- start-up -----------------------------------------------------------------------

    async def recover(self) -> list[JobId]:
        """After a crash: kill what earlier runs left, evict jobs still called Running."""
        leftovers = await asyncio.to_thread(kill_leftovers, self._marker)
        if leftovers:
            _log.warning("killed %d process(es) left by the previous daemon", len(leftovers))

        def evict(q: JobQueue) -> list[JobId]:
            evicted = []
            for ad in q.query(f"{_MINE} && JobStatus != 1 && JobStatus != 5"):
                jid = JobId(ad["ClusterId"], ad["ProcId"])
                if ad["JobStatus"] == JobStatus.REMOVED:
                    q.destroy(jid)
                elif ad["JobStatus"] != JobStatus.COMPLETED:
                    q.job_evicted(jid)
                    evicted.append(jid)
            return evicted

        evicted = await self._worker.write(evict)
        for jid in evicted:
            _log.info("job %s had no process after the restart: back to idle", jid)

        def idle(q: JobQueue) -> tuple[int, list[ClassAd]]:
            seq = q.last_seq  # first: a change after this is read from the feed
            return seq, q.query(f"JobStatus == 1 && {_MINE}", ["JobStatus"])

        self._seq, ads = await self._worker.read(idle)
        self._pending.update((JobId(ad["ClusterId"], ad["ProcId"]), None) for ad in ads)
        return evicted

    # -- the loop -----------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """The last change of the queue's feed this follower has read."""
        return self._seq

    async def run(self) -> None:
        """Follow the change feed and start jobs, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._follow()
                self._schedule()
            except HTGridError as exc:
                _log.error("local universe: %s", exc)

    def status(self) -> dict[str, Any]:
        """Counts for the health route and `htgrid q -better-analyze`."""
        return {
            "local_jobs_running": len(self._runs),
            "local_jobs_limit": self._max_jobs,
            "local_jobs_waiting": len(self._pending),
            "accepting_jobs": self._accepting,
        }

    async def _follow(self) -> None:
        while True:
            changes = await self._worker.read(
                functools.partial(_changes_since, seq=self._seq, limit=_FEED_BATCH)
            )
            # A job whose run just ended may be idle again (requeued by its policy, or
            # released while it was being killed): look at it once more.
            jobs, self._recheck = self._recheck, set()
            submitted: list[tuple[int, range]] = []
            for change in changes:
                self._note(change, submitted, jobs)
            if changes:
                self._seq = changes[-1].seq
            if submitted or jobs:
                await self._find_idle(submitted, jobs)
            if not changes:
                return

    def _note(self, change: Change, submitted: list[tuple[int, range]], jobs: set[JobId]) -> None:
        """What `change` asks of the runner: procs or jobs to look at, a run to stop."""
        if change.kind is ChangeKind.SUBMITTED:
            submitted.append((change.cluster, change.procs))
        elif change.kind is ChangeKind.STATUS:
            for jid in change.job_ids:
                run = self._runs.get(jid)
                if run is None:
                    if change.status == JobStatus.IDLE:
                        jobs.add(jid)  # released or requeued: that job, not its cluster
                elif run.start_seq and change.seq <= run.start_seq:
                    continue  # about an earlier run, or about this job before it started
                elif change.status == JobStatus.HELD:
                    self._stop(run, StopReason.HELD)
                elif change.status == JobStatus.REMOVED:
                    self._stop(run, StopReason.REMOVED)

    async def _find_idle(self, submitted: list[tuple[int, range]], jobs: set[JobId]) -> None:
        """Add the idle local jobs of these submitted procs, and these jobs if idle, to
        pending. Read by id, together, a page at a time: a query per cluster parsed a
        constraint of its own and read in a transaction of its own, and a CE's router
        submits each routed job as a cluster of its own (10,000 queries for 10,000)."""
        ids = itertools.chain(
            (JobId(cluster, proc) for cluster, procs in submitted for proc in procs),
            sorted(jobs),
        )
        while page := list(itertools.islice(ids, _READ_PAGE)):
            found = await self._worker.read(functools.partial(_idle_local, page=page))
            for jid in found:
                if jid not in self._runs:
                    self._pending[jid] = None

    def _schedule(self) -> None:
        while self._accepting and self._pending and len(self._runs) < self._max_jobs:
            jid = next(iter(self._pending))
            del self._pending[jid]
            if jid in self._runs:
                continue
            run = _Run(jid, self._clock())
            self._runs[jid] = run
            task = asyncio.create_task(self._run_job(run), name=f"local job {jid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- one run ------------------------------------------------------------------------

    async def _run_job(self, run: _Run) -> None:
        try:
            await self._run_steps(run)
        except Exception as exc:
            if not daemon_fault(exc):
                await self._contain(run, exc)
            elif isinstance(exc, HTGridError):  # the queue failed: the job stays as it is
                _log.error("job %s: %s", run.job_id, exc)
            else:
                raise
        finally:
            self._runs.pop(run.job_id, None)
            if run.proc is not None and run.proc.returncode is None:
                kill_group(run.proc.pid, signal.SIGKILL)  # never leave a process behind
            self._recheck.add(run.job_id)
            self._wake.set()  # a slot is free

    async def _run_steps(self, run: _Run) -> None:
        jid = run.job_id

        def start(q: JobQueue) -> tuple[int, ClassAd] | None:
            try:
                q.job_started(jid)
            except (InvalidTransition, JobNotFound):
                return None  # no longer idle: held or removed meanwhile
            return q.last_seq, q.get(jid)  # one writer: last_seq is job_started's change

        started = await self._worker.write(start)
        if started is None:
            run.move(RunState.ENDED)
            return
        run.start_seq, ad = started
        run.started = self._clock()
        run.usage = {
            name: ad.get(name, 0)
            for name in ("RemoteWallClockTime", "CumulativeRemoteUserCpu", "CumulativeRemoteSysCpu")
        }
        if run.stop_reason is not None:  # held, removed or shut down before it began
            run.move(RunState.ENDED)
            await self._record(run, None)
            return
        try:
            account = None
            if self._policy is not None:
                try:
                    account = self._policy.account(ad.get("Owner"))
                except OwnerRefused as exc:
                    raise LaunchError(str(exc), HoldReasonCode.FailedToAccessUserAccount) from None
            run.spec = LaunchSpec.from_ad(jid, ad, self._marker, self._grace, account)
            run.proc = await asyncio.to_thread(spawn, run.spec)
        except LaunchError as exc:
            run.move(RunState.ENDED)
            await self._hold(jid, exc)
            return
        _log.info("job %s started: pid %d, %s", jid, run.proc.pid, run.spec.argv[0])
        if run.state is RunState.STARTING:
            run.move(RunState.RUNNING)
        else:  # stopped while it was being created
            self._signal(run)
        ended = await wait_exit(run.proc)
        kill_group(run.proc.pid, signal.SIGKILL)  # what the job left running dies with it
        run.move(RunState.ENDED)
        await self._record(run, ended)

    async def _contain(self, run: _Run, exc: Exception) -> None:
        """Hold a job whose run failed for a reason of its own (a value of the wrong type,
        a bug it alone meets): it would fail again at every start."""
        jid = run.job_id
        if run.proc is not None and run.proc.returncode is None:
            kill_group(run.proc.pid, signal.SIGKILL)
        what = problem(exc)
        code = (
            HoldReasonCode.FailedToCreateProcess if run.proc is None else HoldReasonCode.Unspecified
        )
        reason = f"The local universe runner failed on this job: {what}"

        def hold(q: JobQueue) -> bool:
            try:
                return bool(q.act(JobAction.Hold, jid, SCHEDD, reason, code=code))
            except (InvalidTransition, JobNotFound):
                return False  # held or removed meanwhile

        held = False
        try:
            held = await self._worker.write(hold)
        except Exception as again:
            if daemon_fault(again) and not isinstance(again, HTGridError):
                raise
        self._faults.report(JobFailure(jid, what, held=held, error=exc))

    async def _hold(self, jid: JobId, exc: LaunchError) -> None:
        _log.warning("job %s cannot start: %s", jid, exc.reason)

        def hold(q: JobQueue) -> None:
            with contextlib.suppress(InvalidTransition, JobNotFound):  # held or removed meanwhile
                q.act(JobAction.Hold, jid, SCHEDD, exc.reason, code=exc.code, subcode=exc.subcode)

        await self._worker.write(hold)

    async def _record(self, run: _Run, ended: Exit | None) -> None:
        """Record how the run ended; `ended` is None when no process was created."""
        jid = run.job_id
        wall = max(0.0, self._clock() - run.started)
        user, system = (ended.user_cpu, ended.sys_cpu) if ended else (0.0, 0.0)
        usage = {
            "RemoteUserCpu": user,
            "RemoteSysCpu": system,
            "CumulativeRemoteUserCpu": _num(run.usage["CumulativeRemoteUserCpu"]) + user,
            "CumulativeRemoteSysCpu": _num(run.usage["CumulativeRemoteSysCpu"]) + system,
            "RemoteWallClockTime": _num(run.usage["RemoteWallClockTime"]) + wall,
        }
        reason = run.stop_reason

        def record(q: JobQueue) -> str:
            try:
                if reason is None and ended is not None:
                    # The usage with the exit, in its transaction: one commit, one change.
                    by_signal = ended.signal is not None
                    code = ended.signal if by_signal else ended.code
                    with contextlib.suppress(InvalidTransition):  # held or removed as it ended
                        outcome = q.job_exited(jid, code or 0, by_signal=by_signal, usage=usage)
                        return _OUTCOMES[outcome]
                q.update(jid, usage)
                if reason is StopReason.SHUTDOWN:
                    q.job_evicted(jid)
                    return "evicted (daemon shutdown): back to idle"
            except InvalidTransition:
                pass  # held or removed while it ended: that decision stands
            except JobNotFound:
                return "gone from the queue"
            if q.get(jid)["JobStatus"] == JobStatus.REMOVED:
                q.destroy(jid)
                return "removed"
            return "stopped"

        if ended is None:
            how = "never started"
        elif ended.signal is not None:
            how = f"signal {ended.signal}"
        else:
            how = f"exit code {ended.code}"
        result = await self._worker.write(record)
        _log.info("job %s ended (%s): %s", jid, how, result)

    # -- stopping -----------------------------------------------------------------------

    def _stop(self, run: _Run, reason: StopReason) -> None:
        if run.state in (RunState.STOPPING, RunState.ENDED):
            return
        run.stop_reason = reason
        running = run.state is RunState.RUNNING
        run.move(RunState.STOPPING)
        if running:
            self._signal(run)

    def _signal(self, run: _Run) -> None:
        """Send the job its kill signal, and SIGKILL after its vacate time."""
        if run.proc is None or run.spec is None:
            return
        spec = run.spec
        sig = {
            StopReason.HELD: spec.hold_signal,
            StopReason.REMOVED: spec.remove_signal,
        }.get(run.stop_reason or StopReason.SHUTDOWN, spec.kill_signal)
        why = run.stop_reason.value if run.stop_reason else "stopped"
        _log.info("job %s %s: sending %s", run.job_id, why, sig.name)
        kill_group(run.proc.pid, sig)
        asyncio.get_running_loop().call_later(spec.vacate_time, _kill_if_running, run.proc)

    async def shutdown(self) -> None:
        """Stop every run (they go back to idle) and wait until they are recorded."""
        self._accepting = False
        for run in list(self._runs.values()):
            self._stop(run, StopReason.SHUTDOWN)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


_OUTCOMES: Final = {
    ExitOutcome.COMPLETED: "completed",
    ExitOutcome.LEFT_IN_QUEUE: "completed, kept in the queue (LeaveJobInQueue)",
    ExitOutcome.REQUEUED: "requeued to run again",
    ExitOutcome.HELD: "held by its policy",
}


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _changes_since(q: JobQueue, *, seq: int, limit: int) -> list[Change]:
    return q.changes_since(seq, limit=limit)


def _idle_local(q: JobQueue, *, page: list[JobId]) -> list[JobId]:
    """Those of `page` that are idle local or scheduler universe jobs, in its order."""
    return list(q.get_many(page, _IDLE_LOCAL))


def _kill_if_running(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is None:  # not reaped yet: the vacate time is over
        kill_group(proc.pid, signal.SIGKILL)
