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
   but the failure counts and caches (`_index`), so a restarted router adopts every
   routed job as it is.

Steps 1 and 2 are `_pairs.PairKeeper`'s, step 3 this module's. Steps 1 and 2 read only
the pairs that changed since the last pass, which the queue's change feed names
(`_index`): their work follows the changes, not the number of routed jobs; every pair
is read at start-up, after a reconfig and every few minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.queue import Identity, JobId, JobQueue, JobStatus, QueueError
from htgrid.router._engine import (
    build_routed_ad,
    candidate_constraint,
    edit_in_place,
)
from htgrid.router._hooks import HookFailed, HookKind, HookRunner, RouterHooks
from htgrid.router._index import Candidates, PairIndex, job_id_of
from htgrid.router._pairs import (
    JOB_ROUTER,
    UNDEFINED,
    PairKeeper,
    Pending,
    RouteCounts,
    routed_pairs,
)
from htgrid.router._routes import Route, RouterConfig
from htgrid.router._stats import RouteStats
from htgrid.submit import SubmitError

__all__ = ["JOB_ROUTER", "JobRouter", "RouteStats", "routed_pairs"]

log = logging.getLogger("htgrid.router")

#: Jobs claimed, submitted and linked together (a transaction each step): big enough that
#: the commits stop mattering, small enough that the grid manager starts on the first
#: copies while the pass routes the rest, and that the queue's lock is held briefly.
ROUTE_BATCH: Final = 200


@dataclass(frozen=True)
class _Routing:
    """A job on its way to a route: its source, owner and routed copy, to be submitted."""

    source_id: JobId
    owner: str
    route: Route
    dest: ClassAd


class JobRouter(PairKeeper):
    """The router's passes over one queue (blocking: run them in a thread)."""

    def __init__(
        self,
        queue: JobQueue,
        config: RouterConfig,
        *,
        clock: Callable[[], float] = time.time,
        after_change: Callable[[], None] | None = None,
        hook_runner: HookRunner | None = None,
    ) -> None:
        self.queue = queue
        self.config = config
        self.clock = clock
        self._after_change = after_change or (lambda: None)
        self.stats: dict[str, RouteStats] = {}
        self.counts = RouteCounts()
        self._index = PairIndex()
        self._candidates = Candidates()
        self._policy_due = 0.0
        self.hooks = RouterHooks(config.knobs, allow_root=_allow_root(config))
        # Inline unless given: a pass waits for its hooks (the daemon runs them beside).
        self.runner = hook_runner or HookRunner()

    def reconfig(self, config: RouterConfig) -> None:
        """New routes; the failure counts of routes that keep their name are kept."""
        self.config = config
        self.hooks = RouterHooks(config.knobs, allow_root=_allow_root(config))
        # New routes: the next pass reads every pair and every candidate.
        self._index = PairIndex()
        self._candidates = Candidates()
        names = {route.name.lower() for route in config.routes}
        self.stats = {k: v for k, v in self.stats.items() if k in names}

    @property
    def feed_position(self) -> int:
        """The last change of the queue's feed the passes have read (0: none yet)."""
        return self._index.seq

    def throttled(self, route: Route) -> bool:
        return not self.route_stats(route).accepting()

    # ---- one pass ----------------------------------------------------------------------

    def cycle(self) -> int:
        """One pass; the number of changes it made."""
        self.runner.next_pass()
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
            candidates = self._candidates.read(
                self.queue, candidate_constraint(self.config), self.clock()
            )
        except HTGridError as err:
            log.error("cannot look for jobs to route: %s", err)
            return 0
        changed = 0
        batch: list[_Routing] = []
        for ad in candidates:
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
                log.warning("job %s: route %s failed: %s", job_id_of(ad), route.name, err)
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
        source_id = job_id_of(ad)
        hooks = self.hooks
        try:
            translated = self.hook_result(
                HookKind.TRANSLATE_JOB,
                (source_id, route.name),
                ad,
                lambda job: hooks.translate(route, job),
            )
        except HookFailed as err:
            log.warning("job %s: route %s: %s: not routed", source_id, route.name, err)
            return None
        if isinstance(translated, Pending):
            return None  # routed by a pass after its hook
        if route.test(route.edit_job_in_place, ad):
            changes = edit_in_place(ad, route, self.config, start=translated)
            self.queue.update(
                source_id,
                {
                    k: (v if v is not None else UNDEFINED)
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
        self._candidates.waiting -= done
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


_PROTECTED: Final = frozenset(
    {"owner", "user", "osuser", "clusterid", "procid", "mytype", "targettype", "jobstatus"}
)


def _allow_root(config: RouterConfig) -> bool:
    return config.knobs.get("ALLOW_ROOT_JOBS", "").strip().lower() in ("true", "1", "yes")
