"""The router's steps 1 and 2 (see `htgrid.router._router`): each routed job kept in step
with its source, the sources' periodic policy, and sources without a copy let go.

The source mirrors the copy: Idle, Running, Held (HoldCopiedFromTargetJob), and at the end
its exit (the copy is kept by LeaveJobInQueue until then, and let go after). Removing the
source, or holding it, removes the copy; a copy removed from below sends its source back
to idle, to be routed again; a copy whose source is gone is removed (an orphan).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.errors import HTGridError
from htgrid.queue import (
    HoldReasonCode,
    Identity,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
    PolicyAction,
    QueueError,
    periodic_decision,
)
from htgrid.router._hooks import HookFailed, HookKind, HookRunner, RouterHooks
from htgrid.router._index import (
    PairIndex,
    job_id_of,
    read_pairs,
    source_of,
)
from htgrid.router._routes import Route, RouterConfig
from htgrid.router._stats import RouteStats
from htgrid.submit import SubmitError

log = logging.getLogger("htgrid.router")
#: The most deferred attribute copies a full pass writes in one transaction.
COPY_BATCH: Final = 200

#: Who the router acts as on the queue (a queue super user, as the schedd's own router).
JOB_ROUTER: Final = Identity("condor_job_router", admin=True)
_FINISHED: Final = (JobStatus.COMPLETED, JobStatus.REMOVED)
_RUNNING: Final = (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED)
_USAGE: Final = ("RemoteWallClockTime", "RemoteUserCpu", "RemoteSysCpu", "ImageSize", "DiskUsage")
_HOLD_CODES: Final = frozenset(HoldReasonCode)  # the codes HTCondor defines
UNDEFINED: Final = ExprTree("undefined")
#: What a source takes from its routed copy at each pass, besides its status and exit
#: (VanillaToGrid.cpp's update_job_status, after the grid manager's own list).
ATTRS_TO_COPY: Final = (
    "BytesSent",
    "BytesRecvd",
    "CompletionDate",
    "JobRunCount",
    "JobStartDate",
    "ExitReason",
    "JobCurrentStartDate",
    "JobCurrentStartExecutingDate",
    "JobLastStartDate",
    "ShadowBday",
    "RemoteSysCpu",
    "RemoteUserCpu",
    "NumCkpts",
    "NumJobStarts",
    "NumJobReconnects",
    "NumShadowExceptions",
    "NumShadowStarts",
    "NumJobMatches",
    "NumRestarts",
    "RemoteWallClockTime",
    "LastRemoteWallClockTime",
    "JobCoreDumped",
    "ImageSize",
    "MemoryUsage",
    "ResidentSetSize",
    "ProportionalSetSize",
    "DiskUsage",
    "ScratchDirFileCount",
    "SpooledOutputFiles",
    "CpusUsage",
    "CpusProvisioned",
    "DiskProvisioned",
    "MemoryProvisioned",
)


@dataclass
class RouteCounts:
    jobs: dict[str, int] = field(default_factory=dict)
    idle: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def add(self, route: str, status: object) -> None:
        key = route.lower()
        self.jobs[key] = self.jobs.get(key, 0) + 1
        if status == JobStatus.IDLE:
            self.idle[key] = self.idle.get(key, 0) + 1
        self.total += 1

    def of(self, route: Route) -> tuple[int, int]:
        key = route.name.lower()
        return self.jobs.get(key, 0), self.idle.get(key, 0)


T = TypeVar("T")


class Pending:
    """A hook's result not there yet (`PairKeeper.hook_result`)."""


PENDING: Final = Pending()


class PairKeeper:
    """Steps 1 and 2 of a pass, for `JobRouter` (blocking: run them in a thread)."""

    queue: JobQueue
    config: RouterConfig
    clock: Callable[[], float]
    hooks: RouterHooks
    runner: HookRunner
    stats: dict[str, RouteStats]
    counts: RouteCounts
    #: A full pass's attribute copies not yet written (`_copy_attrs`, `_flush_copies`).
    _copies: list[tuple[JobId, dict[str, Any]]]
    _index: PairIndex

    def hook_result(
        self, kind: HookKind, key: Hashable, job: ClassAd, work: Callable[[ClassAd], T]
    ) -> T | Pending | None:
        """`work`'s result (its HookFailed raised) once the hook of `kind` for `key` ran;
        PENDING while it runs (a later pass takes it); None when `job` has no such hook.
        `work` gets a copy of `job`: the pass goes on with the ad meanwhile."""
        if self.hooks.path(kind, job) is None:
            return None
        seen = copy.copy(job)
        future = self.runner.poll((kind, key), lambda: work(seen))
        if not future.done():
            return PENDING
        self.runner.take((kind, key))
        return future.result()

    def _cleanup(self, source: ClassAd, dest: ClassAd) -> None:
        """The JOB_CLEANUP hook, waited for by no one (its failure is logged)."""
        if self.hooks.path(HookKind.JOB_CLEANUP, source) is not None:
            hooks, mine, theirs = self.hooks, copy.copy(source), copy.copy(dest)
            self.runner.fire(lambda: hooks.cleanup(mine, theirs))

    def route_stats(self, route: Route) -> RouteStats:
        return self.stats.setdefault(route.name.lower(), RouteStats(began=self.clock()))

    def _source_policies(self) -> int:
        """The periodic policy of the sources this router manages (the schedd leaves them
        to it, as HTCondor's does): a hold or removal it decides is the source's, and the
        next steps of the pass take the copy with it. A release is not: a source held
        with its copy's hold follows the copy."""
        name = quote(self.config.name)
        try:
            sources = self.queue.query(
                f'Managed == "External" && ManagedManager == {name} && JobStatus != 3'
            )
        except HTGridError as err:
            log.error("cannot read the managed jobs' policies: %s", err)
            return 0
        now = int(self.clock())
        changed = 0
        for ad in sources:
            job_id = job_id_of(ad)
            try:
                decision = periodic_decision(ad, now, self.config.system_policy)
            except HTGridError as err:
                log.warning("job %s: its periodic policy cannot be evaluated: %s", job_id, err)
                continue
            if decision is None or decision.action not in _POLICY_ACTIONS:
                continue
            action = _POLICY_ACTIONS[decision.action]
            try:
                self.queue.act(
                    action,
                    str(job_id),
                    JOB_ROUTER,
                    decision.reason,
                    code=decision.code,
                    subcode=decision.subcode,
                )
            except (JobNotFound, InvalidTransition) as err:
                log.warning(
                    "job %s: %s by %s failed: %s", job_id, action.name, decision.attribute, err
                )
                continue
            log.info(
                "job %s: %s by %s: %s",
                job_id,
                decision.action.value,
                decision.attribute,
                decision.reason,
            )
            changed += 1
        return changed

    def _sync(self) -> int:
        """Steps 1 and 2 for the pairs that changed since the last pass, or for every
        pair when that is due (`_index`)."""
        try:
            return self._sync_changed()
        except BaseException:
            self._index.seq = 0  # left half done: the next pass reads every pair
            raise

    def _sync_changed(self) -> int:
        routed, managed, top = read_pairs(
            self.queue, self._index, self.config.name, self.clock(), self.config.knobs
        )
        changed = 0
        current: set[JobId] = set()
        self._copies = []
        try:
            changed += self._sync_pairs(routed, managed, current)
        finally:
            self._flush_copies()
        for source_id, source in managed.items():
            if source_id not in current:
                changed += self._yield(source_id, source, "it has no routed job")
        self.counts = RouteCounts()
        for route, status in self._index.counted.values():
            self.counts.add(route, status)
        self._index.seq = top
        return changed

    def _sync_pairs(
        self, routed: list[ClassAd], managed: dict[JobId, ClassAd], current: set[JobId]
    ) -> int:
        idx = self._index
        idx.managed.update(managed)
        changed = 0
        for dest in sorted(routed, key=job_id_of):
            source_id = source_of(dest)
            if source_id is None:
                log.warning("routed job %s names no source job: left alone", job_id_of(dest))
                continue
            idx.link(job_id_of(dest), source_id)
            source = managed.get(source_id)
            try:
                done, is_current = self._pair(source, source_id, dest, current)
            except (QueueError, SubmitError) as err:
                log.warning("routed job %s of %s: %s", job_id_of(dest), source_id, err)
                idx.retry.add(source_id)
                continue
            changed += done
            if is_current:
                current.add(source_id)
            if len(self._copies) >= COPY_BATCH:
                self._flush_copies()
        return changed

    def _pair(
        self, source: ClassAd | None, source_id: JobId, dest: ClassAd, current: set[JobId]
    ) -> tuple[int, bool]:
        """Keep one routed job and its source in step: (changes made, whether the routed
        job is the source's current one)."""
        dest_id = job_id_of(dest)
        status = JobStatus(dest["JobStatus"])
        linked = source is not None and (
            source.get("RoutedToJobId") in (str(dest_id), None) and source_id not in current
        )
        if source is None or not linked:
            # An orphan: its source is gone, or no longer this router's, or routed again.
            if status == JobStatus.COMPLETED:
                return self._let_go(dest_id), False
            if status != JobStatus.REMOVED:
                self._remove(dest_id, "JobRouter orphan: its source job is gone")
                return 1, False
            return 0, False
        route = self.config.route(str(dest.get("RouteName", "")))
        self._index.counted[dest_id] = (str(dest.get("RouteName", "")), status)
        src_status = JobStatus(source["JobStatus"])
        changes = 0
        if source.get("RoutedToJobId") is None:
            self.queue.update(source_id, {"RoutedToJobId": str(dest_id)})
            changes += 1
        if src_status == JobStatus.REMOVED:
            if status not in _FINISHED:
                self._remove(dest_id, "The source job was removed")
            elif status == JobStatus.COMPLETED:
                self._let_go(dest_id)
            self.queue.update(source_id, {"Managed": "ScheddDone"})
            self.queue.destroy(source_id)
            self._cleanup(source, dest)
            return changes + 1, True
        if src_status == JobStatus.HELD and source.get("HoldCopiedFromTargetJob") is not True:
            if status not in _FINISHED:
                self._remove(dest_id, "The source job was put on hold")
            self._yield(source_id, source, "it was put on hold")
            self._cleanup(source, dest)
            return changes + 1, True
        if src_status == JobStatus.COMPLETED:
            # Its exit is recorded already (a pass stopped after it): finish the pair.
            self.queue.update(source_id, {"Managed": "ScheddDone"})
            if status == JobStatus.COMPLETED:
                self._let_go(dest_id)
            return changes + 1, True
        if status == JobStatus.COMPLETED:
            return changes + self._finish(source_id, source, dest_id, dest, route), True
        if status == JobStatus.REMOVED:
            log.info(
                "routed job %s was removed: its source %s goes back to idle", dest_id, source_id
            )
            yielded = self._yield(source_id, source, "its routed job was removed")
            self._cleanup(source, dest)
            return changes + yielded, True
        changes += self._update_job_info(source, dest_id, dest)
        return changes + self._mirror(source_id, source, src_status, dest), True

    def _update_job_info(self, source: ClassAd, dest_id: JobId, dest: ClassAd) -> int:
        """The UPDATE_JOB_INFO hook's attributes, set in the routed job (and in `dest`)."""
        hooks, routed = self.hooks, copy.copy(dest)
        try:
            updates = self.hook_result(
                HookKind.UPDATE_JOB_INFO,
                dest_id,
                source,
                lambda src: hooks.update_job_info(src, routed),
            )
        except HookFailed as err:
            log.warning("routed job %s: %s: nothing updated", dest_id, err)
            return 0
        if not updates or isinstance(updates, Pending):
            return 0
        self.queue.update(dest_id, updates)
        for name, value in updates.items():
            dest[name] = value
        return 1

    def _mirror(
        self, source_id: JobId, source: ClassAd, src_status: JobStatus, dest: ClassAd
    ) -> int:
        status = JobStatus(dest["JobStatus"])
        q = self.queue
        dest_id = job_id_of(dest)
        if (
            status == JobStatus.HELD
            and src_status != JobStatus.HELD
            and source.get("HoldCopiedFromTargetJob") is True
        ):
            # The source held with its copy's hold was released (by its user, a policy):
            # the copy is released too, and runs again.
            with contextlib.suppress(JobNotFound, InvalidTransition):
                q.act(
                    JobAction.Release,
                    str(dest_id),
                    JOB_ROUTER,
                    str(source.get("ReleaseReason") or "The source job was released"),
                )
            q.update(source_id, {"HoldCopiedFromTargetJob": False})
            log.info("job %s released: its routed job %s is released", source_id, dest_id)
            return 1
        # A pair that only needs its run attributes copied (most pairs, most passes) has
        # them written with others' in one transaction; one with a status change to make
        # writes them first, as before.
        acts = (
            JobStatus.HELD in (status, src_status)
            or (status in _RUNNING and src_status == JobStatus.IDLE)
            or (status == JobStatus.IDLE and src_status in _RUNNING)
        )
        changes = self._copy_attrs(source_id, source, dest, defer=not acts)
        if status == JobStatus.HELD:
            if src_status == JobStatus.HELD:
                return changes
            reason = str(dest.get("HoldReason") or "Unknown reason")
            code = int(dest.get("HoldReasonCode") or 0)
            code = code if code in _HOLD_CODES else 0
            q.act(
                JobAction.Hold,
                str(source_id),
                JOB_ROUTER,
                reason,
                code=code,
                subcode=int(dest.get("HoldReasonSubCode") or 0),
            )
            q.update(source_id, {"HoldCopiedFromTargetJob": True})
            return changes + 1
        if src_status == JobStatus.HELD:  # the routed job's hold, now over
            q.act(JobAction.Release, str(source_id), JOB_ROUTER, "The routed job was released")
            q.update(source_id, {"HoldCopiedFromTargetJob": False})
            src_status = JobStatus.IDLE
            changes += 1
        if status in _RUNNING and src_status == JobStatus.IDLE:
            q.job_started(source_id)
            changes += 1
        elif status == JobStatus.IDLE and src_status in _RUNNING:
            q.job_evicted(source_id)
            changes += 1
        if acts and changes:  # the status change set its own dates and counts: the copy's win
            changes += self._copy_attrs(source_id, q.get(source_id), dest)
        return changes

    def _copy_attrs(
        self, source_id: JobId, source: ClassAd, dest: ClassAd, *, defer: bool = False
    ) -> int:
        """The copy's run attributes the source lacks or has otherwise (ATTRS_TO_COPY);
        `defer`: written by the pass's next `_flush_copies`."""
        updates: dict[str, Any] = {}
        for name in (*ATTRS_TO_COPY, *self.hooks.attrs_to_copy(source)):
            if name not in dest:
                continue
            new = dest.lookup(name)
            if name not in source or str(source.lookup(name)) != str(new):
                updates[name] = new
        if not updates:
            return 0
        if defer:
            self._copies.append((source_id, updates))
        else:
            self.queue.update(source_id, updates)
        return 1

    def _flush_copies(self) -> None:
        """The deferred copies, in one transaction (a crash before it loses only what the
        next pass copies again); a source gone meanwhile is its own warning."""
        copies, self._copies = self._copies, []
        if not copies:
            return
        for (source_id, _), err in zip(copies, self.queue.update_many(copies), strict=True):
            if err is not None:
                log.warning("job %s: its routed job's attributes not copied: %s", source_id, err)

    def _finish(
        self, source_id: JobId, source: ClassAd, dest_id: JobId, dest: ClassAd, route: Route | None
    ) -> int:
        """The routed job completed: its exit is the source's, then it is let go. A
        JOB_FINALIZE hook that fails sends the source back to be routed again."""
        q = self.queue
        hooks, routed = self.hooks, copy.copy(dest)
        try:
            finalized = self.hook_result(
                HookKind.JOB_FINALIZE, source_id, source, lambda src: hooks.finalize(src, routed)
            )
        except HookFailed as err:
            log.warning("job %s: %s: routed again", source_id, err)
            self._let_go(dest_id)
            self._yield(source_id, source, "its JOB_FINALIZE hook failed")
            self._cleanup(source, dest)
            return 1
        if isinstance(finalized, Pending):
            return 0  # finished once its hook has
        if finalized:
            q.update(source_id, finalized)
        src_status = JobStatus(source["JobStatus"])
        if src_status == JobStatus.HELD:
            q.act(JobAction.Release, str(source_id), JOB_ROUTER, "The routed job completed")
            src_status = JobStatus.IDLE
        if src_status == JobStatus.IDLE:
            q.job_started(source_id)
        by_signal = dest.get("ExitBySignal") is True
        code = dest.get("ExitSignal" if by_signal else "ExitCode")
        usage = {k: dest[k] for k in _USAGE if isinstance(dest.get(k), (int, float))}
        q.job_exited(
            source_id, int(code) if isinstance(code, int) else 0, by_signal=by_signal, usage=usage
        )
        if route is not None:
            stats = self.route_stats(route)
            after = copy.copy(source)  # the source as its exit left it
            for name in (*_USAGE, "ExitCode", "ExitSignal", "ExitBySignal", "JobStatus"):
                if name in dest:
                    after[name] = dest.lookup(name)
            if route.test(route.job_failure_test, after):
                stats.failed += 1
                log.warning(
                    "job %s (route %s): JobFailureTest is true: a failure", source_id, route.name
                )
            else:
                stats.succeeded += 1
        with contextlib.suppress(JobNotFound):  # it left the queue at its exit
            q.update(source_id, {"Managed": "ScheddDone"})
        self._let_go(dest_id)
        self._cleanup(source, dest)
        log.info("job %s finished as routed job %s", source_id, dest_id)
        return 1

    def _yield(self, source_id: JobId, source: ClassAd, why: str) -> int:
        """Hand the source back to the schedd (yield_job), idle unless held by a user."""
        q = self.queue
        status = JobStatus(source["JobStatus"])
        try:
            if status == JobStatus.REMOVED:
                # Removed with its copy (rm -all), whose end came first: it leaves, as a
                # removed source with a copy does; handed back it would stay Removed.
                q.update(source_id, {"Managed": "ScheddDone"})
                q.destroy(source_id)
                log.info("job %s removed, and its routed job gone: it leaves", source_id)
                return 1
            if status in _RUNNING:
                q.job_evicted(source_id)
            elif status == JobStatus.HELD and source.get("HoldCopiedFromTargetJob") is True:
                q.act(JobAction.Release, str(source_id), JOB_ROUTER, "JobRouter: routing again")
            q.update(
                source_id,
                {
                    "Managed": "Schedd",
                    "ManagedManager": "",
                    "RoutedToJobId": UNDEFINED,
                    "HoldCopiedFromTargetJob": UNDEFINED,
                },
            )
        except (JobNotFound, InvalidTransition) as err:
            log.warning("job %s: cannot hand it back: %s", source_id, err)
            return 0
        log.info("job %s handed back to the schedd: %s", source_id, why)
        return 1

    def _remove(self, dest_id: JobId, reason: str) -> None:
        with contextlib.suppress(JobNotFound, InvalidTransition):
            self.queue.act(JobAction.Remove, str(dest_id), JOB_ROUTER, reason)

    def _let_go(self, dest_id: JobId) -> int:
        """A finished routed job leaves the queue (LeaveJobInQueue false)."""
        try:
            self.queue.edit(str(dest_id), {"LeaveJobInQueue": False}, JOB_ROUTER)
        except JobNotFound:
            return 0
        return 1


_POLICY_ACTIONS: Final = {PolicyAction.HOLD: JobAction.Hold, PolicyAction.REMOVE: JobAction.Remove}


def routed_pairs(queue: JobQueue, name: str) -> Iterable[tuple[ClassAd, ClassAd | None]]:
    """(routed job, its source or None), for `htgrid router_q`."""
    routed = queue.query(f"RoutedBy == {quote(name)} && RoutedFromJobId isnt undefined")
    for dest in routed:
        try:
            source: Any = queue.get(str(dest["RoutedFromJobId"]))
        except (JobNotFound, ValueError, QueueError):
            source = None
        yield dest, source
