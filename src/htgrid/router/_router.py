"""The job router over one job queue: routes idle jobs, and keeps each source job and its
routed copy in step (HTCondor's condor_job_router, with the queue as its only state).

Each full pass (`JobRouter.cycle`, every JOB_ROUTER_POLLING_PERIOD; when the schedd rings
in between, `route_new` does step 3 alone):

1. Every routed job (RoutedBy == this router, RoutedFromJobId set) is set beside its
   source job. The source mirrors the copy: Idle, Running, Held (HoldCopiedFromTargetJob),
   and at the end its exit (the copy is kept by LeaveJobInQueue until then, and let go
   after). Removing the source, or holding it, removes the copy; a copy removed from
   below (an administrator, a policy) sends its source back to idle, to be routed again.
   A copy whose source is gone is removed (an orphan). The source takes the copy's run
   attributes (`ATTRS_TO_COPY`, update_job_status's list); a source whose copy's hold
   it mirrors, released by its user, releases the copy.
   Every PERIODIC_EXPR_INTERVAL the sources' periodic policy (their own and the pool's
   SYSTEM_PERIODIC_*), which the schedd leaves to the router, is evaluated: a source it
   holds or removes takes its copy with it in the same pass.
2. A source managed by this router (Managed = "External", ManagedManager) without a copy
   is let go: back to idle, Managed = "Schedd" (a crash between claiming and submitting).
3. Idle candidates (`candidate_constraint`) go to the first route, in
   JOB_ROUTER_ROUTE_NAMES order, whose REQUIREMENTS hold and that is neither full
   (MaxJobs, MaxIdleJobs, JOB_ROUTER_MAX_JOBS) nor throttled (FailureRateThreshold). The
   source is claimed, then its copy submitted (RoutedFromJobId names the source): a
   kill -9 between the two leaves a claimed source without copy, which step 2 lets go,
   and after the submit the copy is found by RoutedFromJobId. Nothing is kept in memory
   but the failure counts, so a restarted router adopts every routed job as it is.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree
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
from htgrid.router._engine import (
    build_routed_ad,
    candidate_constraint,
    edit_in_place,
)
from htgrid.router._hooks import HookFailed, RouterHooks
from htgrid.router._routes import Route, RouterConfig
from htgrid.router._stats import RouteStats
from htgrid.submit import SubmitError

__all__ = ["JOB_ROUTER", "JobRouter", "RouteStats", "routed_pairs"]

log = logging.getLogger("htgrid.router")

#: Who the router acts as on the queue (a queue super user, as the schedd's own router).
JOB_ROUTER: Final = Identity("condor_job_router", admin=True)
_FINISHED: Final = (JobStatus.COMPLETED, JobStatus.REMOVED)
_RUNNING: Final = (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED)
_USAGE: Final = ("RemoteWallClockTime", "RemoteUserCpu", "RemoteSysCpu", "ImageSize", "DiskUsage")
_UNDEFINED: Final = ExprTree("undefined")
#: Jobs claimed, submitted and linked together (a transaction each step): big enough that
#: the commits stop mattering, small enough that the grid manager starts on the first
#: copies while the pass routes the rest, and that the queue's lock is held briefly.
ROUTE_BATCH: Final = 200
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
class _Counts:
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


@dataclass(frozen=True)
class _Routing:
    """A job on its way to a route: its source, owner and routed copy, to be submitted."""

    source_id: JobId
    owner: str
    route: Route
    dest: ClassAd


def _job_id(ad: ClassAd) -> JobId:
    return JobId(int(ad["ClusterId"]), int(ad["ProcId"]))


class JobRouter:
    """The router's passes over one queue (blocking: run them in a thread)."""

    def __init__(
        self,
        queue: JobQueue,
        config: RouterConfig,
        *,
        clock: Callable[[], float] = time.time,
        after_change: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.config = config
        self.clock = clock
        self._after_change = after_change or (lambda: None)
        self.stats: dict[str, RouteStats] = {}
        self.counts = _Counts()
        self._policy_due = 0.0
        self.hooks = RouterHooks(config.knobs, allow_root=_allow_root(config))

    def reconfig(self, config: RouterConfig) -> None:
        """New routes; the failure counts of routes that keep their name are kept."""
        self.config = config
        self.hooks = RouterHooks(config.knobs, allow_root=_allow_root(config))
        names = {route.name.lower() for route in config.routes}
        self.stats = {k: v for k, v in self.stats.items() if k in names}

    def route_stats(self, route: Route) -> RouteStats:
        return self.stats.setdefault(route.name.lower(), RouteStats(began=self.clock()))

    def throttled(self, route: Route) -> bool:
        return not self.route_stats(route).accepting()

    # ---- one pass ----------------------------------------------------------------------

    def cycle(self) -> int:
        """One pass; the number of changes it made."""
        changed = 0
        if self.clock() >= self._policy_due:
            self._policy_due = self.clock() + self.config.periodic_interval
            changed += self._source_policies()
        changed += self._sync()
        for route in self.config.routes:
            self.route_stats(route).adjust(route, self.clock(), self.counts.of(route)[0])
        changed += self._route_candidates()
        if changed:
            self._after_change()
        return changed

    def route_new(self) -> int:
        """Route the idle candidates only, between full passes (the schedd rang: new
        jobs). The routes' counts are the last full pass's and what was routed since,
        so their limits hold; the pairs are kept in step by the next full pass."""
        changed = self._route_candidates()
        if changed:
            self._after_change()
        return changed

    def _source_policies(self) -> int:
        """The periodic policy of the sources this router manages (the schedd leaves them
        to it, as HTCondor's does): a hold or removal it decides is the source's, and the
        next steps of the pass take the copy with it. A release is not: a source held
        with its copy's hold follows the copy."""
        name = _quote(self.config.name)
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
            job_id = _job_id(ad)
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
        name = _quote(self.config.name)
        routed = self.queue.query(f"RoutedBy == {name} && RoutedFromJobId isnt undefined")
        managed = {
            _job_id(ad): ad
            for ad in self.queue.query(f'Managed == "External" && ManagedManager == {name}')
        }
        self.counts = _Counts()
        changed = 0
        current: set[JobId] = set()
        for dest in sorted(routed, key=_job_id):
            try:
                source_id = JobId.parse(str(dest.get("RoutedFromJobId")))
            except (ValueError, QueueError):
                log.warning("routed job %s names no source job: left alone", _job_id(dest))
                continue
            source = managed.get(source_id)
            try:
                done, is_current = self._pair(source, source_id, dest, current)
            except (QueueError, SubmitError) as err:
                log.warning("routed job %s of %s: %s", _job_id(dest), source_id, err)
                continue
            changed += done
            if is_current:
                current.add(source_id)
        for source_id, source in managed.items():
            if source_id not in current:
                changed += self._yield(source_id, source, "it has no routed job")
        return changed

    def _pair(
        self, source: ClassAd | None, source_id: JobId, dest: ClassAd, current: set[JobId]
    ) -> tuple[int, bool]:
        """Keep one routed job and its source in step: (changes made, whether the routed
        job is the source's current one)."""
        dest_id = _job_id(dest)
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
        self.counts.add(str(dest.get("RouteName", "")), status)
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
            self.hooks.cleanup(source, dest)
            return changes + 1, True
        if src_status == JobStatus.HELD and source.get("HoldCopiedFromTargetJob") is not True:
            if status not in _FINISHED:
                self._remove(dest_id, "The source job was put on hold")
            self._yield(source_id, source, "it was put on hold")
            self.hooks.cleanup(source, dest)
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
            self.hooks.cleanup(source, dest)
            return changes + yielded, True
        changes += self._update_job_info(source, dest_id, dest)
        return changes + self._mirror(source_id, source, src_status, dest), True

    def _update_job_info(self, source: ClassAd, dest_id: JobId, dest: ClassAd) -> int:
        """The UPDATE_JOB_INFO hook's attributes, set in the routed job (and in `dest`)."""
        try:
            updates = self.hooks.update_job_info(source, dest)
        except HookFailed as err:
            log.warning("routed job %s: %s: nothing updated", dest_id, err)
            return 0
        if not updates:
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
        dest_id = _job_id(dest)
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
        changes = self._copy_attrs(source_id, source, dest)
        if status == JobStatus.HELD:
            if src_status == JobStatus.HELD:
                return changes
            reason = str(dest.get("HoldReason") or "Unknown reason")
            code = int(dest.get("HoldReasonCode") or 0)
            code = code if code in HoldReasonCode._value2member_map_ else 0
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
        if changes:  # the status change set its own dates and counts: the copy's win
            changes += self._copy_attrs(source_id, q.get(source_id), dest)
        return changes

    def _copy_attrs(self, source_id: JobId, source: ClassAd, dest: ClassAd) -> int:
        """The copy's run attributes the source lacks or has otherwise (ATTRS_TO_COPY)."""
        updates: dict[str, Any] = {}
        for name in (*ATTRS_TO_COPY, *self.hooks.attrs_to_copy(source)):
            if name not in dest:
                continue
            new = dest.lookup(name)
            if name not in source or str(source.lookup(name)) != str(new):
                updates[name] = new
        if not updates:
            return 0
        self.queue.update(source_id, updates)
        return 1

    def _finish(
        self, source_id: JobId, source: ClassAd, dest_id: JobId, dest: ClassAd, route: Route | None
    ) -> int:
        """The routed job completed: its exit is the source's, then it is let go. A
        JOB_FINALIZE hook that fails sends the source back to be routed again."""
        q = self.queue
        try:
            finalized = self.hooks.finalize(source, dest)
        except HookFailed as err:
            log.warning("job %s: %s: routed again", source_id, err)
            self._let_go(dest_id)
            self._yield(source_id, source, "its JOB_FINALIZE hook failed")
            self.hooks.cleanup(source, dest)
            return 1
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
        self.hooks.cleanup(source, dest)
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
                    "RoutedToJobId": _UNDEFINED,
                    "HoldCopiedFromTargetJob": _UNDEFINED,
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

    # ---- routing new jobs ------------------------------------------------------------------

    def choose_route(self, ad: ClassAd) -> tuple[Route | None, bool]:
        """The first route that takes the job, and whether every route is full."""
        all_full = True
        for route in self.config.routes:
            routed, idle = self.counts.of(route)
            if (
                routed >= route.max_jobs
                or 0 <= route.max_idle_jobs <= idle
                or self.throttled(route)
            ):
                continue
            all_full = False
            if route.matches(ad):
                return route, False
        return None, all_full

    def _route_candidates(self) -> int:
        if not self.config.routes:
            return 0
        try:
            candidates = self.queue.query(candidate_constraint(self.config))
        except HTGridError as err:
            log.error("cannot look for jobs to route: %s", err)
            return 0
        changed = 0
        batch: list[_Routing] = []
        for ad in sorted(candidates, key=_job_id):
            if 0 <= self.config.max_jobs <= self.counts.total:
                break
            route, all_full = self.choose_route(ad)
            if route is None:
                if all_full:
                    break
                continue
            try:
                planned = self._plan(ad, route)
            except (QueueError, SubmitError) as err:
                log.warning("job %s: route %s failed: %s", _job_id(ad), route.name, err)
                continue
            if planned is None:
                continue
            if isinstance(planned, int):
                changed += planned
                continue
            batch.append(planned)
            # Counted now, so that the route's limits and throttle hold within the pass
            # (a job whose routing fails after is taken off its route's routed count).
            self.counts.add(route.name, JobStatus.IDLE)
            self.route_stats(route).routed += 1
            if len(batch) >= ROUTE_BATCH:
                changed += self._route_batch(batch)
                batch = []
        if batch:
            changed += self._route_batch(batch)
        return changed

    def _plan(self, ad: ClassAd, route: Route) -> _Routing | int | None:
        """What routing `ad` by `route` takes: its routed copy (a `_Routing`), or, for a
        route that edits jobs in place, the edit made now (1), or None (a hook refused)."""
        source_id = _job_id(ad)
        try:
            translated = self.hooks.translate(route, ad)
        except HookFailed as err:
            log.warning("job %s: route %s: %s: not routed", source_id, route.name, err)
            return None
        if route.test(route.edit_job_in_place, ad):
            changes = edit_in_place(ad, route, self.config, start=translated)
            self.queue.update(
                source_id,
                {
                    k: (v if v is not None else _UNDEFINED)
                    for k, v in changes.items()
                    if k.lower() not in _PROTECTED
                },
            )
            log.info("job %s edited in place by route %s", source_id, route.name)
            return 1
        dest = build_routed_ad(
            translated if translated is not None else ad, route, self.config, str(source_id)
        )
        return _Routing(source_id, str(ad["Owner"]), route, dest)

    def _route_batch(self, batch: list[_Routing]) -> int:
        """Claim, submit and link a batch of jobs in three queue transactions (one per
        step, and per owner for the submits) rather than three per job: the commits
        were most of a pass's time. The order of the steps is the one the module's
        docstring gives for one job, so a crash between two leaves what step 2 of the
        next pass (or the RoutedFromJobId of the copies) puts right."""
        q = self.queue
        errors = q.update_many(
            [
                (
                    r.source_id,
                    {
                        "Managed": "External",
                        "ManagedManager": self.config.name,
                        "RouteName": r.route.name,
                    },
                )
                for r in batch
            ]
        )
        claimed = []
        for routing, error in zip(batch, errors, strict=True):
            if error is None:
                claimed.append(routing)
            else:
                self.route_stats(routing.route).routed -= 1
                log.warning(
                    "job %s: route %s failed: %s", routing.source_id, routing.route.name, error
                )
        owners: dict[str, list[_Routing]] = {}
        for routing in claimed:
            owners.setdefault(routing.owner, []).append(routing)
        submitted: list[tuple[_Routing, JobId]] = []
        for owner, jobs in owners.items():
            submitted.extend(self._submit_copies(owner, jobs))
        done = {routing.source_id for routing, _ in submitted}
        for routing in claimed:
            if routing.source_id not in done:
                self.route_stats(routing.route).routed -= 1
        if not submitted:
            return 0
        self._after_change()  # the grid manager starts on these while the pass goes on
        errors = q.update_many(
            [(r.source_id, {"RoutedToJobId": str(dest_id)}) for r, dest_id in submitted]
        )
        for (routing, dest_id), error in zip(submitted, errors, strict=True):
            if error is not None:  # linked by the next pass, from RoutedFromJobId
                log.warning("job %s: cannot link its routed job: %s", routing.source_id, error)
            log.info(
                "job %s routed by route %s as job %s",
                routing.source_id,
                routing.route.name,
                dest_id,
            )
        return len(submitted)

    def _submit_copies(self, owner: str, jobs: list[_Routing]) -> list[tuple[_Routing, JobId]]:
        """The routed copies of one owner's jobs, in one transaction; if it is refused,
        one by one, so that one bad copy does not keep the others from being routed."""
        identity = Identity(owner, admin=True)
        try:
            clusters = []
            with self.queue.transaction(identity) as tx:
                for routing in jobs:
                    cluster = tx.new_cluster()
                    tx.set_cluster_ad(cluster, routing.dest)
                    tx.new_proc(cluster)
                    clusters.append(cluster)
            return [(r, JobId(c, 0)) for r, c in zip(jobs, clusters, strict=True)]
        except (QueueError, SubmitError) as err:
            if len(jobs) == 1:
                log.warning(
                    "job %s: route %s failed: %s", jobs[0].source_id, jobs[0].route.name, err
                )
                return []
        done: list[tuple[_Routing, JobId]] = []
        for routing in jobs:
            done.extend(self._submit_copies(owner, [routing]))
        return done

    def counts_of(self, route: Route) -> tuple[int, int]:
        return self.counts.of(route)


_POLICY_ACTIONS: Final = {PolicyAction.HOLD: JobAction.Hold, PolicyAction.REMOVE: JobAction.Remove}
_PROTECTED: Final = frozenset(
    {"owner", "user", "osuser", "clusterid", "procid", "mytype", "targettype", "jobstatus"}
)


def _allow_root(config: RouterConfig) -> bool:
    return config.knobs.get("ALLOW_ROOT_JOBS", "").strip().lower() in ("true", "1", "yes")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def routed_pairs(queue: JobQueue, name: str) -> Iterable[tuple[ClassAd, ClassAd | None]]:
    """(routed job, its source or None), for `htgrid router_q`."""
    routed = queue.query(f"RoutedBy == {_quote(name)} && RoutedFromJobId isnt undefined")
    for dest in routed:
        try:
            source: Any = queue.get(str(dest["RoutedFromJobId"]))
        except (JobNotFound, ValueError, QueueError):
            source = None
        yield dest, source
