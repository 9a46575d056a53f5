"""`htgrid job_router` (the daemon), `htgrid job_router_info` (condor_job_router_info:
which route takes a job, and why the others do not), `htgrid transform_ads` and
`htgrid router_q` (condor_router_q: the routed jobs, or -S their count per route and
state)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from htgrid.errors import UsageError
from htgrid.pool import HomeLayout, htgrid_home

if TYPE_CHECKING:
    from htgrid.classad import ClassAd
    from htgrid.router import RouterConfig

__all__ = ["register"]


def _home_arg(cmd: Any) -> None:
    cmd.add_argument(
        "--home",
        type=Path,
        default=None,
        help="the pool's state directory (default: $HTGRID_HOME, else ~/.htgrid)",
    )


def register(commands: Any) -> None:
    """Add `job_router`, `job_router_info` and `transform_ads`."""
    cmd = commands.add_parser(
        "job_router",
        help="run the job router (JOB_ROUTER in DAEMON_LIST starts it)",
        description="Route the queue's idle jobs to grid resources until SIGTERM.",
    )
    _home_arg(cmd)
    cmd.add_argument("--log", type=Path, default=None, help="log file ('-': stderr)")
    cmd.add_argument("--parent-fd", type=int, help=argparse.SUPPRESS)
    cmd.add_argument("-v", "--verbose", action="store_true", help="log more")
    cmd.set_defaults(handler=_run)

    info = commands.add_parser(
        "job_router_info",
        help="the job router's routes, and which of them takes given jobs and why not",
        description=(
            "condor_job_router_info: -config prints the routes as the router reads them; "
            "-match-jobs -jobads FILE says, for each job and route, whether the route "
            "takes the job and, when not, which clause fails with the values it saw; "
            "-route-jobs FILE writes the ads the jobs would become."
        ),
    )
    _home_arg(info)
    info.add_argument("-config", action="store_true", help="print the routes")
    info.add_argument("-match-jobs", dest="match_jobs", action="store_true")
    info.add_argument("-route-jobs", dest="route_jobs", metavar="FILE", default=None)
    info.add_argument("-jobads", metavar="FILE", default=None, help="job ads ('-': stdin)")
    info.add_argument("-ignore-prior-routing", dest="ignore_prior", action="store_true")
    info.set_defaults(handler=_info)

    rq = commands.add_parser(
        "router_q",
        help="the routed jobs in the queue, or their count per route and state (condor_router_q)",
        description=(
            "condor_router_q: the jobs the job router routed, one line each as `htgrid q "
            "-nobatch` shows them, or with -S, -R, -I, -H a count per route and state. "
            "(`htgrid q -constraint 'RouteName =!= undefined' ...` takes q's other options.)"
        ),
    )
    rq.add_argument("-S", dest="summary", action="store_const", const="all", default=None)
    rq.add_argument("-R", dest="summary", action="store_const", const="running")
    rq.add_argument("-I", dest="summary", action="store_const", const="idle")
    rq.add_argument("-H", dest="summary", action="store_const", const="held")
    rq.add_argument("-route", "-site", dest="route", metavar="NAME", default=None)
    rq.add_argument("-idle", dest="only_idle", action="store_true")
    rq.add_argument("-held", dest="only_held", action="store_true")
    rq.add_argument("-constraint", metavar="EXPR", default=None)
    rq.set_defaults(handler=_router_q)

    xform = commands.add_parser(
        "transform_ads",
        help="apply transform rules to ads (condor_transform_ads)",
        description="Apply the transform in -rules FILE to each ad of -jobads FILE.",
    )
    xform.add_argument("-rules", metavar="FILE", required=True)
    xform.add_argument("-jobads", metavar="FILE", required=True, help="ads ('-': stdin)")
    xform.set_defaults(handler=_transform_ads)


def _run(args: argparse.Namespace) -> int:
    from htgrid.router.daemon import run_router

    home = args.home.absolute() if args.home else htgrid_home()
    log_path = args.log or HomeLayout(home).jobrouter_log
    if str(log_path) == "-":
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("htgrid")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    return run_router(home, parent_fd=args.parent_fd)


def _read_ads(path: str) -> list[ClassAd]:
    from htgrid.classad import parseAds

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(parseAds(text))
    from htgrid.classad import parseOldAds

    return list(parseOldAds(text))


def _print_config(config: RouterConfig, out: TextIO) -> None:
    for problem in config.problems:
        print(f"ERROR: {problem}", file=out)
    print(f"Job router {config.name}: {len(config.routes)} routes", file=out)
    if config.source_constraint:
        print(f"JOB_ROUTER_SOURCE_JOB_CONSTRAINT = {config.source_constraint}", file=out)
    for xform in config.pre:
        print(f"\nPre-route transform {xform.name}:\n{xform.text.rstrip()}", file=out)
    for route in config.routes:
        limits = (
            f"MaxJobs {route.max_jobs}, MaxIdleJobs {route.max_idle_jobs}, "
            f"FailureRateThreshold {route.failure_rate_threshold:g}/s"
        )
        print(f"\nRoute {route.name} (universe {route.target_universe}", end="", file=out)
        print(f", GridResource {route.grid_resource})" if route.grid_resource else ")", file=out)
        print(f"  {limits}", file=out)
        print("  " + route.transform.text.strip().replace("\n", "\n  "), file=out)
    for xform in config.post:
        print(f"\nPost-route transform {xform.name}:\n{xform.text.rstrip()}", file=out)


def _info(args: argparse.Namespace) -> int:
    from htgrid.router import RouterConfig, explain_routes

    home = args.home.absolute() if args.home else htgrid_home()
    config = RouterConfig.load(home)
    out = sys.stdout
    if args.config or not (args.match_jobs or args.route_jobs):
        _print_config(config, out)
        if not args.jobads:
            return 0
    if not args.jobads:
        raise UsageError("-match-jobs and -route-jobs need -jobads FILE")
    ads = _read_ads(args.jobads)
    routed_out: list[str] = []
    unrouted = 0
    for ad in ads:
        job = f"{ad.get('ClusterId', '?')}.{ad.get('ProcId', '?')}"
        verdicts, why_not = explain_routes(
            ad, config, ignore_prior_routing=args.ignore_prior, source_id=job
        )
        print(f"Job {job}:", file=out)
        if why_not:
            print(f"  {why_not}", file=out)
        taken = None
        for verdict in verdicts:
            if taken is None and verdict.matched and verdict.error is None:
                taken = verdict
                print(f"  route {verdict.route}: MATCHES (the router would choose it)", file=out)
            elif verdict.matched:
                extra = f": {verdict.error}" if verdict.error else " (an earlier route wins)"
                print(f"  route {verdict.route}: matches{extra}", file=out)
            else:
                print(f"  route {verdict.route}: no: {verdict.reason}", file=out)
        if not config.routes:
            print("  no routes are configured", file=out)
        if taken is None or why_not:
            unrouted += 1
            print("  => not routed", file=out)
        elif taken.routed_ad is not None:
            routed_out.append(str(taken.routed_ad))
            if args.match_jobs and not args.route_jobs:
                continue
    if args.route_jobs:
        text = "\n".join(routed_out) + ("\n" if routed_out else "")
        if args.route_jobs == "-":
            out.write(text)
        else:
            Path(args.route_jobs).write_text(text, encoding="utf-8")
    return 1 if unrouted and unrouted == len(ads) else 0


def _transform_ads(args: argparse.Namespace) -> int:
    from htgrid.submit import Transform, TransformMacros

    try:
        rules = Path(args.rules).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{args.rules}: cannot read: {exc.strerror}") from None
    xform = Transform.parse(rules, args.rules)
    for ad in _read_ads(args.jobads):
        if xform.matches(ad):
            xform.apply(ad, TransformMacros())
        print(ad)
    return 0


#: condor_router_q's -R, -I and -H: the states each summary counts.
_SUMMARIES: Final = {
    "all": None,
    "running": "JobStatus == 2",
    "idle": "JobStatus != 2",
    "held": "JobStatus == 5",
}
_STATE_LETTERS: Final = {0: "U", 1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 6: "E", 7: "S"}


def router_q_constraint(args: argparse.Namespace) -> str:
    """condor_router_q's constraint: routed jobs (a route's name, a routed-from id), less
    what the options leave out."""
    parts = ["RouteName =!= undefined && RoutedFromJobId =!= undefined"]
    state = _SUMMARIES.get(args.summary or "all")
    if state:
        parts.append(state)
    if args.only_idle:
        parts.append("JobStatus == 1")
    if args.only_held:
        parts.append("JobStatus == 5")
    if args.constraint:
        parts.append(f"({args.constraint})")
    if args.route:
        parts.append(f'RouteName =?= "{_escape(args.route)}"')
    return " && ".join(parts)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _router_q(args: argparse.Namespace) -> int:
    from htgrid.cli import main
    from htgrid.cli._common import client

    constraint = router_q_constraint(args)
    if args.summary is None:
        return main(["q", "-allusers", "-nobatch", "-constraint", constraint])
    counts: dict[tuple[str, str, str], int] = {}
    with client(args) as schedd:
        for ad in schedd.query_iter(constraint, ["JobStatus", "RouteName", "GridResource"]):
            status = ad.get("JobStatus")
            key = (
                _STATE_LETTERS.get(status, "?") if isinstance(status, int) else "?",
                str(ad.get("RouteName", "")),
                str(ad.get("GridResource", "")),
            )
            counts[key] = counts.get(key, 0) + 1
    print(f"{'JOBS':>7} {'ST':>2} {'Route':<20} GridResource")
    for (state, route, grid), count in sorted(counts.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{count:7d} {state:>2} {route:<20} {grid}")
    return 0
