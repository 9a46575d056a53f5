"""The user job event log writer: the queue's change feed, as HTCondor events.

For each committed change of a job with a `UserLog`, the event HTCondor writes at that
moment: 000 submitted, 001 executing, 004 evicted (or terminated and requeued), 005
terminated, 009 aborted, 012 held, 013 released, 022 disconnected, 023 reconnected and
024 reconnection failed (JobDisconnectedDate set, then cleared). A late materialization
factory's changes write its cluster's events into the log its cluster ad names: 035
cluster submitted (before its first jobs' 000), 037 materialization paused (its cluster
held), 038 resumed (released), 036 cluster removed (after its last job's last event).
The events carry the change's time; `_userlog_events` makes them from the changes.

Each event is written exactly once, also across a kill -9: the writer saves its place
in the feed after a batch's events, and before them the batch and each of its logs' size,
so a restart appends only the batch's events not yet past that size (`_userlog_place`).

A log is the job's owner's file: it is opened (made, if missing) with the owner's
rights, never the daemon's; the event of a job whose owner may not run jobs here is not
written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid._aio import wait_event
from htgrid._privsep import USER_FILE_MODE, Account, OwnerPolicy, OwnerRefused, as_owner
from htgrid.classad import Attribute, ClassAd
from htgrid.eventlog import (
    EventLogError,
    SubmitEvent,
    UserLog,
    UserLogEvent,
)
from htgrid.queue import (
    Change,
    ChangeKind,
    HoldReasonCode,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.queue.faults import FaultLog, JobFailure, daemon_fault, problem
from htgrid.schedd._local import SCHEDD
from htgrid.schedd._userlog_events import events_for, factory_event, is_disconnection
from htgrid.schedd._userlog_place import Batch, Place, event_key, keys_after, size_of
from htgrid.schedd._worker import QueueWorker

__all__ = ["UserLogWriter", "events_for", "factory_event"]

_log = logging.getLogger("htgrid.schedd.userlog")

_BATCH: Final = 500
# The position is saved with each batch of events; after changes that make none (most of
# a busy queue's: jobs without a log, attribute edits) it is saved only every this many,
# as a restart reads them again and they make none again.
_SAVE_EVERY: Final = 10_000
_CACHE_MAX: Final = 100_000
_PAGE: Final = 1000  # the ads of a submitted cluster read at a time
_INFO: Final = (
    "UserLog",
    "Owner",
    "Iwd",
    "RemoteUserCpu",
    "RemoteSysCpu",
    "CumulativeRemoteUserCpu",
    "CumulativeRemoteSysCpu",
    "ExitCode",
    "ExitSignal",
    "ExitBySignal",
    "JobUniverse",
    "LastRemoteHost",
    "StartdIpAddr",
)
_FACTORY: Final = frozenset(
    {
        ChangeKind.FACTORY_SUBMITTED,
        ChangeKind.FACTORY_PAUSED,
        ChangeKind.FACTORY_RESUMED,
        ChangeKind.FACTORY_REMOVED,
    }
)

Log = tuple[str, str]  # the log's path, the job's owner
Pending = list[tuple[Log, UserLogEvent]]


class UserLogWriter:
    """Follows the change feed and appends each job's events to its user log."""

    def __init__(
        self, worker: QueueWorker, seq_file: Path, host: str, policy: OwnerPolicy | None = None
    ) -> None:
        """`policy`: as whom each log is written (None: as the daemon's own user)."""
        self._policy = policy
        self._worker = worker
        self._place = Place(seq_file)
        self._host = host
        self._seq = 0
        self._saved = 0  # the position in the file
        # The batch a kill may have cut short, and per log the events found written
        # past its recorded size (read when first needed).
        self._unfinished: Batch | None = None
        self._found: dict[Log, Counter[str]] = {}
        self._paths: dict[JobId, Log | None] = {}  # UserLog per job; touched on the queue thread
        self._wake = worker.subscribe()
        # catch_up runs from the writer's loop and from submits (see `written`): one at a
        # time, or a batch of events could be written twice.
        self._lock = asyncio.Lock()
        self._clients = 0  # submits waiting for catch_up: its queue calls go first then
        self._faults = FaultLog(_log, "event log writer")

    @property
    def seq(self) -> int:
        """The last change whose events are written."""
        return self._seq

    def load(self) -> None:
        """Read the persisted position (0, from the start, when there is none)."""
        self._seq, self._unfinished = self._place.load()
        self._saved = self._seq
        if self._unfinished is not None:
            _log.info(
                "finishing the events of changes %d to %d, written in part before a stop",
                self._seq + 1,
                self._unfinished.last,
            )

    async def run(self, poll: float = 1.0) -> None:
        """Write events as changes commit, until cancelled.

        Woken by this daemon's own writes, and every `poll` seconds for the commits of
        other processes on the same queue (the grid manager).
        """
        while True:
            # Not asyncio.wait_for: on 3.11 it can swallow the cancellation that stops us.
            await wait_event(self._wake, poll)
            self._wake.clear()
            await self.catch_up()

    async def catch_up(self, *, client: bool = False) -> None:
        """Write the events of every change committed so far.

        `client`: an API client waits for this (a submit's answer waits for its 000
        events); then the queue calls go with the clients', before the daemon's own, also
        those of a catch_up already under way that this one waits for.

        A caller cancelled meanwhile (a stop, a request given up) does not stop it: a
        batch cut off between its write and the place kept in memory would be written
        again by the next.
        """
        await asyncio.shield(self._catch_up(client))

    async def _catch_up(self, client: bool) -> None:
        self._clients += client
        try:
            async with self._lock:
                while True:
                    upto = self._unfinished.last if self._unfinished else None
                    collect = functools.partial(self._collect, after=self._seq, upto=upto)
                    last, pending, failed = await self._worker.read(
                        collect, client=self._clients > 0
                    )
                    if last == self._seq:
                        if self._unfinished is None:
                            return
                        # The unfinished batch's changes are gone from the feed (not
                        # trimmed while unfinished: a queue put back from elsewhere).
                        _log.warning("the changes of an unfinished batch of events are gone")
                        self._unfinished = None
                        continue
                    # An unfinished batch is closed even if its changes now make no event.
                    finishing = self._unfinished is not None
                    if pending or finishing or last - self._saved >= _SAVE_EVERY:
                        write = functools.partial(self._write, pending, after=self._seq, last=last)
                        failed += await asyncio.to_thread(write)
                        self._saved = last
                    self._seq = last
                    if failed:
                        await self._contain(failed)
        finally:
            self._clients -= client

    # -- on the queue thread ----------------------------------------------------------------

    async def _contain(self, failed: list[_Failed]) -> None:
        """Hold the jobs whose events could not be written (UnableToInitUserLog, as the
        shadow holds a job whose log it cannot open), each logged once."""
        first: dict[JobId, _Failed] = {}
        for failure in failed:
            first.setdefault(failure.job_id, failure)

        def hold(q: JobQueue) -> list[bool]:
            done = []
            for failure in first.values():
                try:
                    done.append(
                        bool(
                            q.act(
                                JobAction.Hold,
                                failure.job_id,
                                SCHEDD,
                                failure.reason,
                                code=HoldReasonCode.UnableToInitUserLog,
                            )
                        )
                    )
                except Exception as exc:  # held or gone meanwhile, or not to be held
                    if daemon_fault(exc):
                        raise
                    done.append(False)
            return done

        held = await self._worker.write(hold)
        for failure, was_held in zip(first.values(), held, strict=True):
            self._faults.report(
                JobFailure(failure.job_id, failure.problem, held=was_held, error=failure.error)
            )

    def _collect(
        self, q: JobQueue, *, after: int, upto: int | None
    ) -> tuple[int, Pending, list[_Failed]]:
        changes = q.changes_since(after, limit=_BATCH)
        if upto is not None:  # the batch cut short: the same changes again, no more
            changes = [change for change in changes if change.seq <= upto]
        pending: Pending = []
        failed: list[_Failed] = []
        # The jobs submitted one to a cluster, read together: a query each, with its own
        # constraint to parse and its own read, was most of the writer's time when a
        # CE's router submitted thousands of routed jobs (each a cluster of its own).
        ahead = q.get_many(
            JobId(c.cluster, c.procs.start)
            for c in changes
            if c.kind is ChangeKind.SUBMITTED and len(c.procs) == 1
        )
        for change in changes:
            try:
                pending.extend(self._events(q, change, failed, ahead))
            except Exception as exc:  # one odd change must not stop every later event
                if daemon_fault(exc):
                    raise
                _log.exception("cannot make the event of change %d", change.seq)
        return (changes[-1].seq if changes else after), pending, failed

    def _events(
        self, q: JobQueue, change: Change, failed: list[_Failed], ahead: Mapping[JobId, ClassAd]
    ) -> Pending:
        """The events of `change`; `ahead`: ads of submitted jobs read already."""
        if change.kind is ChangeKind.SUBMITTED:
            return self._submitted(q, change, ahead)
        if change.kind in _FACTORY:
            return self._factory(q, change, failed)
        if change.kind is ChangeKind.LEFT_QUEUE:
            for jid in change.job_ids:
                self._paths.pop(jid, None)
            return []
        if change.kind is ChangeKind.ATTRIBUTES:
            # The stored text first: decoding every edit's attributes to look costs more.
            named = "userlog" in change.stored.lower() and "UserLog" in change.attrs
            if named or "userlog" in {d.lower() for d in change.deleted}:
                for jid in change.job_ids:
                    self._paths.pop(jid, None)
            if not is_disconnection(change):
                return []
        out: Pending = []
        for jid in change.job_ids:
            ad: ClassAd | None = None
            if jid not in self._paths:
                ad = _job_ad(q, jid)
                self._remember(jid, ad)
            path = self._paths.get(jid)
            if not path:
                continue
            wanted = change.kind is ChangeKind.ATTRIBUTES  # the node's name
            if (wanted or change.status in (JobStatus.COMPLETED, JobStatus.IDLE)) and ad is None:
                ad = _job_ad(q, jid)  # for the resource usage
            try:
                event = events_for(change, jid, ad or ClassAd(), self._host)
            except Exception as exc:  # this job's values only: the others' events go on
                if daemon_fault(exc):
                    raise
                failed.append(_Failed.of(jid, path[0], exc))
                continue
            if event is not None:
                out.append((path, event))
        return out

    def _submitted(self, q: JobQueue, change: Change, ahead: Mapping[JobId, ClassAd]) -> Pending:
        out: Pending = []
        first = JobId(change.cluster, change.procs.start)
        ads: Iterable[tuple[JobId, ClassAd | None]] = (
            [(first, ahead[first])]
            if len(change.procs) == 1 and first in ahead
            else _cluster_ads(q, change.cluster, change.procs)
        )
        for jid, ad in ads:
            path = self._remember(jid, ad)
            if path:
                event = SubmitEvent(
                    cluster=jid.cluster,
                    proc=jid.proc,
                    timestamp=change.time,
                    submit_host=self._host,
                )
                out.append((path, event))
        return out

    def _factory(self, q: JobQueue, change: Change, failed: list[_Failed]) -> Pending:
        """The event of a change of a factory, for its cluster ad's log."""
        jid = JobId(change.cluster, -1)  # the cluster's own events have proc -1
        if jid not in self._paths:
            try:
                ad: ClassAd | None = q.cluster_ad(change.cluster)
            except JobNotFound:
                ad = None
            self._remember(jid, ad)
        path = self._paths.get(jid)
        if change.kind is ChangeKind.FACTORY_REMOVED:
            self._paths.pop(jid, None)
        if not path:
            return []
        try:
            event = factory_event(change, self._host)
        except Exception as exc:  # this cluster's values only: the others' events go on
            if daemon_fault(exc):
                raise
            failed.append(_Failed.of(jid, path[0], exc))
            return []
        return [(path, event)]

    def _remember(self, jid: JobId, ad: ClassAd | None) -> Log | None:
        path = _log_path(ad) if ad is not None else None
        if len(self._paths) >= _CACHE_MAX:
            self._paths.clear()
        self._paths[jid] = path
        return path

    def _account(self, owner: str) -> Account | None:
        """The account a log of `owner`'s is written as (None: not written, or, with no
        policy, as the daemon)."""
        if self._policy is None:
            return None
        try:
            return self._policy.account(owner)
        except OwnerRefused as exc:
            _log.warning("user logs of %s are not written: %s", owner, exc)
            return None

    # -- in a helper thread --------------------------------------------------------------

    def _write(self, pending: Pending, *, after: int, last: int) -> list[_Failed]:
        failed: list[_Failed] = []
        accounts: dict[str, Account | None] = {}
        for _path, owner in dict.fromkeys(log for log, _ in pending):
            if owner not in accounts:
                accounts[owner] = self._account(owner)
        unfinished = self._unfinished
        if unfinished is None and pending:
            sizes = {log: size_of(log[0], accounts[log[1]]) for log, _ in pending}
            self._place.begin(Batch(after, last, sizes))
        for log, event in pending:
            path, owner = log
            account = accounts[owner]
            if account is None and self._policy is not None:
                continue  # the owner may not run jobs here (said once, in the log)
            if unfinished is not None and self._written_before(unfinished, log, account, event):
                continue
            try:
                with as_owner(account):
                    UserLog(path, create_mode=USER_FILE_MODE).append(event)
            except Exception as exc:  # this job's log only: the others' events go on
                if daemon_fault(exc):
                    raise
                failed.append(_Failed.of(JobId(event.cluster, event.proc), path, exc))
        finished = unfinished is None or last >= unfinished.last
        self._place.done(last, finished=finished)
        if finished:
            self._unfinished = None
            self._found.clear()
        return failed

    def _written_before(
        self, batch: Batch, log: Log, account: Account | None, event: UserLogEvent
    ) -> bool:
        """Whether `event`, of the batch a stop cut short, is in its log already (each
        event found there stands for one of the batch's)."""
        if log not in batch.sizes:
            return False
        found = self._found.get(log)
        if found is None:
            found = self._found[log] = keys_after(log[0], batch.sizes[log], account)
        key = event_key(event)
        if found[key] <= 0:
            return False
        found[key] -= 1
        return True


@dataclass(frozen=True, slots=True)
class _Failed:
    """A job whose event could not be made or written, and the HoldReason it gets."""

    job_id: JobId
    problem: str
    reason: str
    error: BaseException

    @classmethod
    def of(cls, job_id: JobId, path: str, exc: BaseException) -> _Failed:
        cause = exc.__cause__ if isinstance(exc, EventLogError) else exc
        if isinstance(cause, OSError):
            # HTCondor's words when the shadow cannot open a job's log.
            what = cause.strerror or problem(cause)
            return cls(job_id, what, f"Failed to initialize user log to {path}: {what}", exc)
        what = problem(exc)
        return cls(job_id, what, f"The event log writer failed on this job's event: {what}", exc)


def _log_path(ad: ClassAd) -> Log | None:
    log = ad.get("UserLog")
    if not isinstance(log, str) or not log:
        return None
    iwd = ad.get("Iwd")
    owner = ad.get("Owner")
    return (os.path.join(iwd, log) if isinstance(iwd, str) else log), str(owner)


def _cluster_ads(q: JobQueue, cluster: int, procs: range) -> Iterator[tuple[JobId, ClassAd | None]]:
    """Each proc's ad (what the events need), read a page at a time: a cluster of a
    million procs in the memory of a page. A proc no longer queued is looked for in the
    history."""
    after = JobId(cluster, procs.start - 1) if procs.start else None
    expected = procs.start
    while expected < procs.stop:
        count = min(_PAGE, procs.stop - expected)
        page = _after(q, cluster, after, count)
        for ad in page:
            proc = ad["ProcId"]
            if proc >= procs.stop:
                break
            for gone in range(expected, proc):
                yield JobId(cluster, gone), _job_ad(q, JobId(cluster, gone))
            yield JobId(cluster, proc), ad
            expected = proc + 1
        if len(page) < count or expected >= procs.stop or page[-1]["ProcId"] >= procs.stop:
            break
        after = JobId(cluster, expected - 1)
    for gone in range(expected, procs.stop):
        yield JobId(cluster, gone), _job_ad(q, JobId(cluster, gone))


def _after(q: JobQueue, cluster: int, after: JobId | None, count: int) -> list[ClassAd]:
    """The cluster's next `count` jobs after `after`. The constraint is the same text for
    every page and job of a cluster: the parser keeps each text it is given, and a text
    of its own per job (a million procs materialized one by one) would fill its cache
    with ones never asked again."""
    return q.query_page(f"ClusterId == {cluster}", _INFO, after=after, count=count)


def _job_ad(q: JobQueue, jid: JobId) -> ClassAd | None:
    ads = _after(q, jid.cluster, JobId(jid.cluster, jid.proc - 1) if jid.proc else None, 1)
    if ads and ads[0]["ProcId"] == jid.proc:
        return ads[0]
    # A job gone before its event (a short one, or one the writer is behind on): asked
    # with a tree built here, not a text of its own per job for the parser to keep.
    constraint = (Attribute("ClusterId") == jid.cluster).and_(Attribute("ProcId") == jid.proc)
    ads = q.history(constraint, _INFO, limit=1)
    return ads[0] if ads else None
