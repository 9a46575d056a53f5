"""What the router does to one job: which route takes it, why the others do not, and the
ad it becomes (VanillaToGrid, then the pre-route transforms, the route, the post-route
ones). Pure functions of ads and configuration: the daemon and `htgrid job_router_info`
share them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.analysis import ClauseResult, explain_match
from htgrid.errors import HTGridError
from htgrid.router._routes import GRID_UNIVERSE, Route, RouterConfig, my_scope
from htgrid.submit import SubmitError, TransformMacros

__all__ = [
    "RouteVerdict",
    "build_routed_ad",
    "candidate_constraint",
    "edit_in_place",
    "explain_routes",
]

#: VanillaToGrid's deletions: what must not travel to the routed copy.
_DROP: Final = (
    "ClusterId",
    "ProcId",
    "BufferBlockSize",
    "BufferSize",
    "CondorPlatform",
    "CondorVersion",
    "CoreSize",
    "GlobalJobId",
    "User",
    "OsUser",
    "QDate",
    "RemoteWallClockTime",
    "LastRemoteWallClockTime",
    "ServerTime",
    "AutoClusterId",
    "AutoClusterAttrs",
    "TotalSubmitProcs",
    "StageInFinish",
    "StageInStart",
    "UserLog",
    "UserLogUseXML",
    "DAGManNodesLog",
    "DAGManNodesMask",
    "TimerRemove",
    "SUBMIT_Iwd",
    "CurrentHosts",
    # The source's management by the router, and its grid state, are not the copy's.
    "Managed",
    "ManagedManager",
    "RoutedToJobId",
    "HoldCopiedFromTargetJob",
    "GridJobId",
    "GridJobStatus",
    "Matched",
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "EnteredCurrentStatus",
    "LastJobStatus",
    "ReleaseReason",
    "LastHoldReason",
    "LastHoldReasonCode",
    "LastHoldReasonSubCode",
    "NumJobStarts",
    "JobStartDate",
    "JobCurrentStartDate",
)
_RESET: Final = {
    "JobStatus": 1,
    "RemoteUserCpu": 0.0,
    "RemoteSysCpu": 0.0,
    "ExitStatus": 0,
    "CompletionDate": 0,
    "NumCkpts": 0,
    "NumRestarts": 0,
    "NumSystemHolds": 0,
    "CommittedTime": 0,
    "CommittedSlotTime": 0,
    "CumulativeSlotTime": 0,
    "TotalSuspensions": 0,
    "LastSuspensionTime": 0,
    "CumulativeSuspensionTime": 0,
    "CommittedSuspensionTime": 0,
    "OnExitBySignal": False,
}
#: `_RESET` as an ad: set from it, its expressions are taken as they are (one routed
#: copy at a time, they were made again from the Python values for each).
_RESET_AD: Final = ClassAd(_RESET)
#: Kept until the router has copied its outcome to the source (submit_job.cpp).
_LEAVE_IN_QUEUE: Final = ExprTree("JobStatus == 4")


def candidate_constraint(config: RouterConfig) -> str:
    """The jobs the router may take (JobRouter.cpp's umbrella constraint, less the
    routes' requirements, which `choose_route` tests one by one)."""
    base = (
        "ProcId >= 0 && JobStatus == 1 && (StageInStart is undefined || StageInFinish isnt "
        'undefined) && Managed isnt "ScheddDone" && Managed isnt "External" && Owner isnt '
        f'undefined && RoutedBy isnt "{config.name}"'
    )
    if config.source_constraint:
        # The router reads the job as MY and as TARGET (HTCondor-CE's default writes
        # `target.JobUniverse`); a queue query has no TARGET, so it is written MY.
        return f"({my_scope(config.source_constraint)}) && {base}"
    return base


def vanilla_to_grid(ad: ClassAd, universe: int, grid_resource: str | None) -> None:
    """HTCondor's VanillaToGrid: the copy made fresh, in the route's universe."""
    for name in _DROP:
        if name in ad:
            del ad[name]
    ad.update(_RESET_AD)
    if "JobUniverse" in ad:
        ad["Remote_JobUniverse"] = ad.lookup("JobUniverse")
    ad["JobUniverse"] = universe
    if universe == GRID_UNIVERSE and grid_resource:
        ad["GridResource"] = grid_resource


def _transform(
    ad: ClassAd, route: Route, config: RouterConfig, log: Callable[[str], None] | None
) -> None:
    macros = TransformMacros(config=config.knobs)
    # A route without its own TargetUniverse still has one (grid, by default), which
    # HTCondor-CE's WholeNode transform reads as $(TargetUniverse).
    macros.macros.set("TargetUniverse", str(route.target_universe))
    for xform in config.pre:
        if xform.matches(ad):
            xform.apply(ad, macros, log=log)
    route.transform.apply(ad, macros, log=log)
    for xform in config.post:
        if xform.matches(ad):
            xform.apply(ad, macros, log=log)


def build_routed_ad(
    source: ClassAd,
    route: Route,
    config: RouterConfig,
    source_id: str,
    *,
    log: Callable[[str], None] | None = None,
) -> ClassAd:
    """The routed copy of `source` (SubmitError when a transform fails on it)."""
    ad = copy.deepcopy(source)
    vanilla_to_grid(ad, route.target_universe, route.grid_resource)
    _transform(ad, route, config, log)
    ad["RoutedFromJobId"] = source_id
    ad["RoutedBy"] = config.name
    ad["RouteName"] = route.name
    ad["RoutedJob"] = True
    ad["LeaveJobInQueue"] = _LEAVE_IN_QUEUE
    for name in ("ClusterId", "ProcId", "RoutedToJobId"):
        if name in ad:
            del ad[name]
    if ad.get("JobUniverse") == GRID_UNIVERSE and not ad.get("GridResource"):
        raise SubmitError(f"route {route.name} gives no GridResource for a grid job")
    return ad


def edit_in_place(
    source: ClassAd, route: Route, config: RouterConfig, *, start: ClassAd | None = None
) -> dict[str, ExprTree | None]:
    """EditJobInPlace: the source's own changes, attribute by attribute (None: delete);
    `start`: the job a TRANSLATE_JOB hook made of it, which the route edits instead."""
    ad = copy.deepcopy(start if start is not None else source)
    _transform(ad, route, config, None)
    changes: dict[str, ExprTree | None] = {}
    for name in ad:
        new = ad.lookup(name)
        if name not in source or str(source.lookup(name)) != str(new):
            changes[name] = new
    for name in source:
        if name not in ad:
            changes[name] = None
    changes["RoutedBy"] = ExprTree(f'"{config.name}"')
    changes["RouteName"] = ExprTree(_quoted(route.name))
    return changes


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class RouteVerdict:
    """Whether one route takes a job, and why not when it does not."""

    route: str
    matched: bool
    reason: str
    clauses: tuple[ClauseResult, ...] = ()
    routed_ad: ClassAd | None = None  # the ad it would become (when matched)
    error: str | None = None  # the transform failed on it


def _clauses(expr: str, ad: ClassAd) -> tuple[ClauseResult, ...]:
    probe = copy.deepcopy(ad)
    probe["Requirements"] = ExprTree(expr)
    return explain_match(probe, ad).my_clauses


def explain_routes(
    ad: ClassAd,
    config: RouterConfig,
    *,
    counts: Callable[[Route], tuple[int, int]] | None = None,
    throttled: Callable[[Route], bool] | None = None,
    ignore_prior_routing: bool = False,
    source_id: str = "0.0",
) -> tuple[tuple[RouteVerdict, ...], str | None]:
    """Each route's verdict on the job, in the order they are tried, and why the job is
    not a candidate at all (None when it is). The first matching route that is not full
    takes it. `counts` gives a route's (routed, idle) jobs; `throttled` whether failures
    stopped it."""
    not_candidate = None
    umbrella = candidate_constraint(config)
    if ignore_prior_routing:
        ad = copy.deepcopy(ad)
        for name in ("Managed", "ManagedManager", "RoutedBy", "RoutedToJobId"):
            if name in ad:
                del ad[name]
        ad["JobStatus"] = 1
    if not _holds(umbrella, ad):
        failing = [c for c in _clauses(umbrella, ad) if not c.satisfied]
        not_candidate = "the job is not a candidate for routing: " + "; ".join(
            _describe(c) for c in failing
        )
    verdicts = tuple(
        _verdict(ad, route, config, counts, throttled, source_id) for route in config.routes
    )
    return verdicts, not_candidate


def _verdict(
    ad: ClassAd,
    route: Route,
    config: RouterConfig,
    counts: Callable[[Route], tuple[int, int]] | None,
    throttled: Callable[[Route], bool] | None,
    source_id: str,
) -> RouteVerdict:
    if route.requirements is not None and not route.matches(ad):
        clauses = _clauses(route.requirements, ad)
        failing = [c for c in clauses if not c.satisfied] or list(clauses)
        reason = "REQUIREMENTS false: " + "; ".join(_describe(c) for c in failing)
        return RouteVerdict(route.name, False, reason, clauses)
    if counts is not None:
        routed, idle = counts(route)
        if routed >= route.max_jobs:
            return RouteVerdict(
                route.name, False, f"route full: {routed} jobs of MaxJobs {route.max_jobs}"
            )
        if route.max_idle_jobs >= 0 and idle >= route.max_idle_jobs:
            return RouteVerdict(
                route.name,
                False,
                f"route full: {idle} idle jobs of MaxIdleJobs {route.max_idle_jobs}",
            )
    if throttled is not None and throttled(route):
        return RouteVerdict(
            route.name,
            False,
            f"throttled: its failure rate is over FailureRateThreshold {route.failure_rate_threshold}/s",
        )
    try:
        routed_ad = build_routed_ad(ad, route, config, source_id)
    except SubmitError as err:
        return RouteVerdict(route.name, True, "matches, but its transform fails", error=str(err))
    return RouteVerdict(route.name, True, "matches", routed_ad=routed_ad)


def _holds(expr: str, ad: ClassAd) -> bool:
    try:
        value = ExprTree(expr).eval(ad, ad)
    except HTGridError:
        return False
    return value is True or (type(value) in (int, float) and value != 0)


def _describe(clause: ClauseResult) -> str:
    seen = ", ".join(f"{name} = {value}" for name, value in clause.inputs)
    return f"{clause.text} is {_value_text(clause.value)}" + (f" ({seen})" if seen else "")


def _value_text(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value).lower() if type(value).__name__ == "Value" else repr(value)
