"""The job router (HTCondor's condor_job_router, the engine of HTCondor-CE): routes idle
jobs of a queue to grid resources through transforms, and keeps each source job in step
with its routed copy.

    config = RouterConfig.load(home)          # JOB_ROUTER_* knobs of htgrid.conf
    verdicts, why_not = explain_routes(job_ad, config)   # htgrid job_router_info
    JobRouter(queue, config).cycle()          # one pass of the daemon (`daemon.run_router`)
    RouterHooks(config.knobs)                 # <KEYWORD>_HOOK_TRANSLATE_JOB and the others
"""

from __future__ import annotations

from htgrid.router._ce import (
    CE_DAEMONS,
    CE_DEFAULTS,
    CE_PORT,
    ce_config,
    ce_route,
    route_ads,
)
from htgrid.router._engine import (
    RouteVerdict,
    build_routed_ad,
    candidate_constraint,
    explain_routes,
)
from htgrid.router._hooks import HookFailed, HookKind, HookRunner, RouterHooks
from htgrid.router._router import JOB_ROUTER, JobRouter, RouteStats, routed_pairs
from htgrid.router._routes import (
    GRID_UNIVERSE,
    Route,
    RouterConfig,
    RouterError,
    convert_old_route,
    convert_old_routes,
)

__all__ = [
    "CE_DAEMONS",
    "CE_DEFAULTS",
    "CE_PORT",
    "GRID_UNIVERSE",
    "JOB_ROUTER",
    "HookFailed",
    "HookKind",
    "HookRunner",
    "JobRouter",
    "Route",
    "RouteStats",
    "RouteVerdict",
    "RouterConfig",
    "RouterError",
    "RouterHooks",
    "build_routed_ad",
    "candidate_constraint",
    "ce_config",
    "ce_route",
    "convert_old_route",
    "convert_old_routes",
    "explain_routes",
    "route_ads",
    "routed_pairs",
]
