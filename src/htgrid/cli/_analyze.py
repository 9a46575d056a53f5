"""`htgrid q -better-analyze`: why a job is not running, in words.

What a job waits for depends on its universe: a local universe job on the daemon (which
runs it itself), a vanilla job on a match with an execute node's slot (`_pool_analysis`
explains it against the pool's ads), a grid job on the grid manager. With no slot ads to
compare with, the analysis lists each `&&` clause of Requirements with the job's own
values, so the user sees what a machine must offer. Other components add analyzers for
their universes with `register_analyzer`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from htgrid.classad import ClassAd
from htgrid.classad.analysis import explain_match
from htgrid.cli._common import format_date
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["Analyzer", "analyze", "autoclusters", "explain", "register_analyzer"]

Analyzer = Callable[[ClassAd, Mapping[str, Any]], list[str]]
"""Lines saying why an idle job of one universe waits (given the daemon's health answer)."""

UNIVERSES: Final = {
    1: "standard",
    5: "vanilla",
    7: "scheduler",
    8: "MPI",
    9: "grid",
    10: "java",
    11: "parallel",
    12: "local",
    13: "vm",
}


def _local(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
    if not health.get("accepting_jobs", True):
        return ["The daemon is shutting down; the job starts after the next `htgrid up`."]
    running = health.get("local_jobs_running", "?")
    limit = health.get("local_jobs_limit", "?")
    waiting = health.get("local_jobs_waiting", "?")
    lines = _wrap(
        "The htgrid daemon runs local and scheduler universe jobs on this host itself: "
        f"{running} of at most {limit} are running, {waiting} waiting."
    )
    if running == limit:
        lines.append(
            "Every local slot is busy (START_LOCAL_UNIVERSE_LIMIT): the job starts when one "
            "frees up."
        )
    else:
        lines.append("It is waiting for the daemon to start it, which should happen at once.")
    return lines


def _vanilla(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
    lines = _wrap(
        "No execute node has joined this pool yet: the collector has no slot ads. "
        "`htgrid up` runs one on this host unless told not to (`-no-execute`, or "
        "DAEMON_LIST without STARTD); `htgrid startd` runs one on its own. Until one "
        "joins, the job waits (nothing is wrong with it)."
    )
    report = explain_match(ad, ClassAd())
    if not report.my_clauses:
        return [*lines, "The job has no Requirements: any machine would do."]
    lines.append("Its Requirements need a machine where:")
    column = min(42, max(len(clause.text) for clause in report.my_clauses) + 10)
    for number, clause in enumerate(report.my_clauses, 1):
        notes = []
        for name, value in clause.inputs:
            if name.upper().startswith("TARGET."):
                continue
            if value == "undefined":  # not the job's: HTCondor looks it up in the machine
                notes.append(f"{name}: a machine attribute")
            else:
                notes.append(f"{name} = {value}")
        head = f"  [{number}] {clause.text}"
        note = "; ".join(notes)
        if not note:
            lines.append(head)
        elif len(head) < column:
            lines.append(f"{head:<{column}}{note}")
        else:  # a long clause: its values on the next line
            lines.extend([head, " " * column + note])
    return lines


def _routing(ad: ClassAd, health: Mapping[str, Any]) -> list[str] | None:
    """What the pool's job router does with the idle job (job_router_info's verdicts);
    None when the pool runs no router, or its configuration is not readable here."""
    if "job_router" not in (health.get("children") or {}):
        return None
    # Imported here for start-up: only -analyze of a routing pool needs the router.
    from htgrid.errors import HTGridError
    from htgrid.router import RouterConfig, explain_routes

    try:
        config = RouterConfig.load(Path(str(health.get("home"))))
    except (HTGridError, OSError):
        return None
    jid = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
    if ad.get("Managed") == "External":
        return [
            f"It is the job router {ad.get('ManagedManager', '?')}'s: routed by route "
            f"{ad.get('RouteName', '?')} as job {ad.get('RoutedToJobId', '?')}, which is idle "
            "too (`htgrid q -better-analyze` of that job says why)."
        ]
    verdicts, why_not = explain_routes(ad, config, source_id=jid)
    lines = [f"The job router {config.name} routes idle jobs here; it would not route this one:"]
    if why_not is not None:
        lines.append(f"  {why_not}")
    taken = next((v for v in verdicts if v.matched and v.error is None), None)
    for verdict in verdicts:
        if verdict is taken:
            lines.append(f"  route {verdict.route}: MATCHES")
        elif verdict.matched:
            lines.append(
                f"  route {verdict.route}: matches, but {verdict.error or 'an earlier route wins'}"
            )
        else:
            lines.append(f"  route {verdict.route}: no: {verdict.reason}")
    if not verdicts:
        lines.append("  no routes are configured (JOB_ROUTER_ROUTE_NAMES)")
    if taken is not None and why_not is None:
        lines[0] = f"The job router {config.name} routes idle jobs here:"
        lines.append(
            f"  Route {taken.route} takes it at the router's next pass, unless the route is "
            "full (MaxJobs, MaxIdleJobs) or throttled by its failures: `htgrid router_q -S` "
            "counts its jobs."
        )
    return lines


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, 86)


def _grid(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
    # Imported here for start-up: `htgrid q` without -analyze needs no grid manager.
    from htgrid.grid import explain_grid_job

    return explain_grid_job(ad)


_ANALYZERS: dict[int, Analyzer] = {12: _local, 7: _local, 5: _vanilla, 9: _grid}


def register_analyzer(universe: int, analyzer: Analyzer) -> None:
    """Explain idle jobs of `universe` with `analyzer` (the grid manager will use this)."""
    _ANALYZERS[universe] = analyzer


def explain(ad: ClassAd, health: Mapping[str, Any]) -> list[str]:
    """The analysis of one job, as lines."""
    jid = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
    universe = ad.get("JobUniverse", 5)
    kind = UNIVERSES.get(universe, f"universe {universe}") if isinstance(universe, int) else "?"
    status = ad.get("JobStatus")
    head = f"Job {jid} (owner {ad.get('Owner', '?')}, {kind} universe)"
    if status == JobStatus.RUNNING:
        since = format_date(ad.get("JobCurrentStartDate"))
        expires, lost = ad.get("JobLeaseExpiration"), ad.get("JobDisconnectedDate")
        if isinstance(expires, int | float) and isinstance(lost, int):
            node = ad.get("StartdIpAddr", "?")
            return [
                f"{head} is running, since {since}, as far as the schedd knows:",
                f"  its execute node {node} could not be reached since "
                f"{format_date(lost, with_year=True)},",
                "  so the job may still run there: the schedd reconnects to it when the node",
                "  answers again. It is not matched again until the lease (JobLeaseDuration)",
                f"  of that run has run out, at {format_date(expires, with_year=True)} (the "
                "node then kills it);",
                "  it goes back to idle then, or as soon as the node says the run is over.",
            ]
        return [f"{head} is running, since {since}."]
    if status == JobStatus.HELD:
        code = ad.get("HoldReasonCode", 0)
        try:
            label = HoldReasonCode(code).name
        except ValueError:
            label = "unknown"
        return [
            f"{head} is held: {ad.get('HoldReason', 'no reason given')}",
            f"  (HoldReasonCode {code} {label}, HoldReasonSubCode "
            f"{ad.get('HoldReasonSubCode', 0)}, since {format_date(ad.get('EnteredCurrentStatus'))})",
            f"  It runs again once released: `htgrid release {jid}` after fixing the cause.",
        ]
    if status == JobStatus.IDLE:
        routing = _routing(ad, health)
        analyzer = _ANALYZERS.get(universe if isinstance(universe, int) else 5)
        if routing is not None and (universe == 5 or ad.get("Managed") == "External"):
            why = routing  # a CE's job: the router, not an execute node, takes it
        else:
            why = analyzer(ad, health) if analyzer else ["htgrid does not run this universe."]
            why += routing or []
        return [f"{head} is idle.", *(f"  {line}" for line in why)]
    label = JobStatus(status).label if isinstance(status, int) and 1 <= status <= 7 else "?"
    return [f"{head} is {label}."]


def analyze(
    ads: Sequence[ClassAd], health: Mapping[str, Any], out: TextIO, *, each: bool = True
) -> None:
    """Write the analysis of each job; with `each` False (no job named), one analysis per
    group of alike jobs (`autoclusters`), which stands for all of them."""
    if not ads:
        out.write("No job matches.\n")
        return
    if each:
        for ad in ads:
            out.write("\n".join(explain(ad, health)) + "\n\n")
        return
    groups = autoclusters(ads)
    out.write(
        f"{len(ads)} job(s) in {len(groups)} group(s) of alike jobs: the same owner, universe "
        "and status, and alike in everything their Requirements, Rank and requests reach (HTCondor's "
        "autoclusters). One job of each group is analysed for all; name a job for its "
        "own analysis.\n\n"
    )
    for group in groups:
        if len(group) > 1:
            out.write(_group_head(group) + "\n")
        out.write("\n".join(explain(group[0], health)) + "\n\n")


#: What decides where an idle job can run: each group is matched alike (the negotiator's
#: job roots, and the grid resource of a grid job).
_ROOTS: Final = ("Requirements", "Rank", "RequestCpus", "RequestMemory", "RequestDisk")


def autoclusters(ads: Sequence[ClassAd]) -> list[list[ClassAd]]:
    """The jobs grouped as HTCondor's autoclusters group them, for the analysis: the same
    owner, universe and status; idle jobs alike in everything their Requirements, Rank and
    requests reach (and their GridResource); held jobs by their hold codes. In the order of
    each group's first job."""
    # Imported here for start-up: `htgrid q` without -analyze needs no negotiator.
    from htgrid.negotiator import RefCache, group_signatures

    signatures = group_signatures(ads, (), (*_ROOTS, "GridResource"), (), (), RefCache()).jobs
    groups: dict[object, list[ClassAd]] = {}
    for ad, signature in zip(ads, signatures, strict=True):
        status = ad.get("JobStatus")
        key: tuple[object, ...] = (ad.get("Owner"), ad.get("JobUniverse"), status)
        if status == JobStatus.IDLE:
            key += (signature,)
        elif status == JobStatus.HELD:
            key += (ad.get("HoldReasonCode"), ad.get("HoldReasonSubCode"))
        groups.setdefault(key, []).append(ad)
    return list(groups.values())


def _group_head(group: Sequence[ClassAd]) -> str:
    """`Jobs 12.0-999, 13.0-4 (1005 jobs) are alike: job 12.0 stands for them.`"""
    procs: dict[object, list[int]] = {}
    for ad in group:
        proc = ad.get("ProcId")
        procs.setdefault(ad.get("ClusterId"), []).append(proc if isinstance(proc, int) else 0)
    spans = []
    for cluster, numbers in procs.items():
        low, high = min(numbers), max(numbers)
        dense = high - low + 1 == len(numbers)
        span = f"{cluster}.{low}" if low == high else f"{cluster}.{low}-{high}"
        spans.append(span if dense else f"{span} ({len(numbers)} of them)")
    shown = ", ".join(spans[:5]) + (
        f" and {len(spans) - 5} more clusters" if len(spans) > 5 else ""
    )
    first = group[0]
    return (
        f"Jobs {shown} ({len(group)} jobs) are alike: job "
        f"{first.get('ClusterId')}.{first.get('ProcId')} stands for them."
    )
