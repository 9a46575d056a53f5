"""`htgrid q`: condor_q.

    $ htgrid q

    -- Schedd: htgrid@host : <~/.htgrid/run/schedd.sock> @ 11/21/26 17:02:11
    OWNER BATCH_NAME SUBMITTED   DONE RUN IDLE HOLD TOTAL JOB_IDS
    alice ID: 12     11/21 17:01    1   1    1    _     3 12.1-2

    Total for query: 2 jobs; 0 completed, 0 removed, 1 idle, 1 running, 0 held, 0 suspended
    Total for alice: 2 jobs; 0 completed, 0 removed, 1 idle, 1 running, 0 held, 0 suspended
    Total for all users: 2 jobs; 0 completed, 0 removed, 1 idle, 1 running, 0 held, 0 suspended

As condor_q: only your jobs unless `-allusers` or arguments name jobs, clusters or
users; `-nobatch` one line per job, `-hold` why jobs are held, `-factory` the late
materialization factories, `-l` whole ads (old syntax), `-grid` grid jobs' remote state
and id (a VM's instance id), `-af ATTR...` values, `-json` ads as JSON,
`-better-analyze` why jobs do not run (unless job ids are named, one analysis per group of alike
jobs), `-run` running jobs and the slot each runs on (HOST(S): RemoteHost, as condor_q
-run), `-quarantined` the jobs the daemon could not read from its queue database when it
started and set aside (their rows are kept in its `quarantine` table; the SchedLog says
why), of which the usual view gives the number. Plain text in a pipe, a rich table in a
terminal. Exit status: 0, even when no job matches; 1 when a job or cluster named on the
command line is not in the queue, or the daemon is not running; 2 for a bad constraint
(with its column).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from htgrid._args import flag
from htgrid.classad import ClassAd, quote
from htgrid.cli._analyze import analyze
from htgrid.cli._common import (
    EXIT_OK,
    Target,
    add_schedd_options,
    command_line,
    connect,
    current_user,
    format_date,
    format_duration,
    is_terminal,
    missing,
    parse_targets,
    plain_projection,
    print_ads,
    report_missing,
)
from htgrid.cli._table import Column, print_table
from htgrid.net import ScheddClient
from htgrid.queue import BatchCounts, FactoryInfo, JobStatus

__all__ = ["register", "status_letter", "totals_line"]

_LETTERS: Final = {1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 6: ">", 7: "S"}
_NOBATCH: Final = [
    "ClusterId",
    "ProcId",
    "Owner",
    "JobStatus",
    "QDate",
    "Cmd",
    "Arguments",
    "Args",
    "RemoteWallClockTime",
    "JobCurrentStartDate",
    "JobPrio",
    "ImageSize",
    "HoldReason",
    "EnteredCurrentStatus",
]


# condor_q -run: where each running job runs (RemoteHost; a grid job's GridResource).
_RUN: Final = [*_NOBATCH, "RemoteHost", "GridResource"]

_GRID: Final = [
    "ClusterId",
    "ProcId",
    "Owner",
    "JobStatus",
    "GridJobStatus",
    "GridResource",
    "GridJobId",
]


def register(commands: Any) -> None:
    """Add `q` to the top-level parser."""
    q = commands.add_parser(
        "q",
        help="show the job queue (condor_q)",
        description="Show jobs in the queue: yours, unless -allusers or arguments say whose.",
    )
    q.add_argument("restrict", nargs="*", metavar="ID|CLUSTER|USER", help="jobs to show")
    # The short forms are condor_q's own (queue.cpp): -const, -nob, -tot...
    flag(q, "constraint", 1, metavar="EXPR", help="only jobs where EXPR")
    flag(q, "allusers", 2, action="store_true", help="everyone's jobs")
    flag(q, "all-users", 2, action="store_true", dest="allusers", help=argparse.SUPPRESS)
    flag(q, "nobatch", 3, action="store_true", help="one line per job")
    flag(q, "batch", 2, action="store_true", help="one line per batch (default)")
    # condor_q reads -h, -he and -hel as -help: -hold from -ho, -held whole.
    flag(q, "hold", 2, "-held", action="store_true", help="held jobs and why")
    # ... and -gr as -group-by: -grid from -gri.
    flag(q, "grid", 3, action="store_true", help="grid jobs: remote state and remote id")
    flag(q, "run", 1, action="store_true", help="running jobs")
    flag(q, "long", 1, "-l", action="store_true", help="whole job ads")
    flag(q, "autoformat", 5, "-af", nargs="+", metavar="ATTR", help="values of ATTRs")
    flag(q, "json", 2, action="store_true", help="job ads as JSON")
    analysis = {"dest": "analyze", "action": "store_true"}
    flag(q, "better-analyze", 2, help="why jobs are not running (also -analyze)", **analysis)
    for spelling in ("better-analyse", "analyze", "analyse"):
        flag(q, spelling, 2, help=argparse.SUPPRESS, **analysis)
    flag(q, "totals", 3, action="store_true", help="only the totals")
    flag(q, "factory", 3, action="store_true", help="late materialization factories")
    flag(
        q,
        "quarantined",
        len("quarantined"),
        action="store_true",
        help="jobs the daemon could not read from its queue and set aside",
    )
    add_schedd_options(q)
    q.set_defaults(handler=_q)


def status_letter(status: object) -> str:
    """The ST column: I R X C H > S."""
    return _LETTERS.get(status, "?") if isinstance(status, int) else "?"


def _constraint(args: argparse.Namespace, me: str, targets: Sequence[Target]) -> str | None:
    parts = []
    if targets:
        parts.append("(" + " || ".join(t.constraint for t in targets) + ")")
    elif not args.allusers:
        parts.append(f"Owner == {quote(me)}")
    if args.constraint:
        parts.extend(t.constraint for t in parse_targets([], args.constraint))
    if args.hold:
        parts.append("JobStatus == 5")
    if args.run:
        parts.append("JobStatus == 2")
    if args.grid:
        parts.append("JobUniverse == 9")
    return " && ".join(parts) or None


def _q(args: argparse.Namespace) -> int:
    me = current_user()
    targets = parse_targets(args.restrict)
    constraint = _constraint(args, me, targets)
    schedd, which = connect(args)
    with schedd:
        if args.quarantined:
            _quarantine_view(schedd.quarantined(), is_terminal())
            return EXIT_OK
        if args.analyze:
            # Imported here for start-up: only -analyze talks to the collector.
            from htgrid.cli import _pool_analysis

            _pool_analysis.install()
            ads = schedd.query(constraint)
            # Named jobs each get their own analysis; a cluster, a user or the whole
            # queue one per group of alike jobs (thousands of jobs are a few groups).
            each = any(target.kind == "job" for target in targets)
            analyze(ads, schedd.health(), sys.stdout, each=each)
            return report_missing("q", "the queue", missing(targets, ads))
        if args.factory and (args.json or args.long or args.autoformat):
            # condor_q -factory -l: the factories' cluster ads (what they are, not jobs).
            batches, _, factories = schedd.summary(constraint)
            named = {t.jobs.cluster for t in targets if t.kind == "cluster"}
            ads = [
                _factory_ad(f, batches)
                for f in factories
                if (f.cluster in named if targets else args.allusers or f.owner == me)
            ]
            print_ads(ads, long=args.long, as_json=args.json, autoformat=args.autoformat or ())
            return EXIT_OK
        if args.json or args.long or args.autoformat:
            projection = plain_projection(args.autoformat) if args.autoformat else None
            if projection is not None and targets:  # to tell which named jobs are there
                projection = [*projection, "ClusterId", "ProcId"]
            seen: list[ClassAd] = []  # the ids, to tell which named jobs are there
            listed = schedd.query_iter(constraint, projection)
            if targets:
                listed = _noting(listed, seen)
            print_ads(listed, long=args.long, as_json=args.json, autoformat=args.autoformat or ())
            return report_missing("q", "the queue", missing(targets, seen))
        # The totals and the batch view are counts the daemon takes (from SQL, for the
        # constraints condor_q makes); a listing streams the jobs' ads. Totals of one's
        # own or everyone's jobs (of one status for -hold, -run) are the owners' counts.
        by_owner = args.totals and not targets and not args.constraint and not args.grid
        batches, owners, factories = schedd.summary(constraint, batches=not by_owner)
        if by_owner:
            counted = [c for o, c in owners.items() if args.allusers or o == me]
            batches = [_status_only(counted, _SHOWN.get((args.hold, args.run)))]
        gone = _missing(schedd, targets, batches)
        unreadable = schedd.health().get("quarantined")
        rich = is_terminal()
        print(
            f"\n-- Schedd: {which.name} : <{_home(which.address)}> @ {format_date(time.time(), with_year=True)}"
        )
        if args.totals:
            pass
        elif args.factory:
            named = {t.jobs.cluster for t in targets if t.kind == "cluster"}

            def shown(factory: FactoryInfo) -> bool:
                # One with jobs is shown when they match; one without (paused, or
                # between procs) when it is named or whose the query is.
                if any(b.cluster == factory.cluster for b in batches):
                    return True
                if targets:
                    return factory.cluster in named
                return args.allusers or factory.owner == me

            _factory_view(batches, [f for f in factories if shown(f)], rich)
        elif args.grid:
            _grid_view(schedd.query_iter(constraint, _GRID), rich)
        elif args.hold:
            _hold_view(schedd.query_iter(constraint, _NOBATCH), rich)
        elif args.run:
            _run_view(schedd.query_iter(constraint, _RUN), rich)
        elif args.nobatch:
            _job_view(schedd.query_iter(constraint, _NOBATCH), rich)
        else:
            _batch_view(batches, {f.cluster: f for f in factories}, rich)
    print()
    print(totals_line("query", [b.counts for b in batches]))
    print(totals_line(me, [owners.get(me, {})]))
    print(totals_line("all users", list(owners.values())))
    if isinstance(unreadable, int) and unreadable > 0:
        print(
            f"\n{unreadable} row(s) of the queue could not be read when the daemon started "
            "and are set aside: `htgrid q -quarantined` lists them"
        )
    return report_missing("q", "the queue", gone)


#: The status -hold and -run show (None: every status).
_SHOWN: Final = {(True, False): 5, (False, True): 2}


def _status_only(counted: Sequence[Mapping[int, int]], status: int | None) -> BatchCounts:
    """The owners' counts `counted` as one batch's, of `status` alone if not None."""
    merged: dict[int, int] = {}
    for counts in counted:
        for each, n in counts.items():
            if status is None or each == status:
                merged[each] = merged.get(each, 0) + n
    return BatchCounts(0, "", None, None, 0, 0, 0, merged)


def _noting(ads: Iterable[ClassAd], seen: list[ClassAd]) -> Iterator[ClassAd]:
    """`ads`, the id of each kept in `seen`."""
    for ad in ads:
        seen.append(ClassAd({"ClusterId": ad.get("ClusterId"), "ProcId": ad.get("ProcId")}))
        yield ad


def _missing(
    schedd: ScheddClient, targets: Sequence[Target], batches: Sequence[BatchCounts]
) -> list[str]:
    """The named jobs and clusters not in the queue (the named jobs asked after: a batch
    says which procs it spans, not which of them are there)."""
    named = [t for t in targets if t.kind == "job"]
    ads = schedd.query(" || ".join(t.constraint for t in named), ["ProcId"]) if named else []
    present = [*ads, *(ClassAd({"ClusterId": b.cluster, "ProcId": -1}) for b in batches)]
    return missing(targets, present)


def _home(path: os.PathLike[str] | str) -> str:
    text = str(path)
    home = os.path.expanduser("~")
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def totals_line(who: str, counted: Sequence[Mapping[int, int]]) -> str:
    """`Total for X: N jobs; C completed, R removed, I idle, R running, H held, S
    suspended` of jobs counted by JobStatus."""
    counts = dict.fromkeys(JobStatus, 0)
    for each in counted:
        for status, n in each.items():
            if status in _LETTERS:
                counts[JobStatus(status)] += n
    jobs = sum(n for each in counted for n in each.values())
    running = counts[JobStatus.RUNNING] + counts[JobStatus.TRANSFERRING_OUTPUT]
    return (
        f"Total for {who}: {jobs} jobs; {counts[JobStatus.COMPLETED]} completed, "
        f"{counts[JobStatus.REMOVED]} removed, {counts[JobStatus.IDLE]} idle, "
        f"{running} running, {counts[JobStatus.HELD]} held, "
        f"{counts[JobStatus.SUSPENDED]} suspended"
    )


@dataclass
class _Batch:
    owner: str
    name: str
    submitted: int
    clusters: dict[int, int]  # cluster -> TotalSubmitProcs
    present: dict[int, int]  # cluster -> its jobs in the queue
    first: tuple[int, int]
    last: tuple[int, int]
    counts: dict[int, int]


def _batch_view(
    counted: Sequence[BatchCounts], factories: Mapping[int, FactoryInfo], rich: bool
) -> None:
    batches: dict[tuple[str, str], _Batch] = {}
    for each in counted:
        cluster = each.cluster
        label = each.batch_name if each.batch_name else f"ID: {cluster}"
        first, last = (cluster, each.first_proc), (cluster, each.last_proc)
        batch = batches.get((each.owner, label))
        if batch is None:
            batch = batches[each.owner, label] = _Batch(
                each.owner, label, 0, {}, {}, first, last, dict.fromkeys(range(1, 8), 0)
            )
        qdate = each.qdate
        if isinstance(qdate, int) and (not batch.submitted or qdate < batch.submitted):
            batch.submitted = qdate
        batch.clusters[cluster] = max(batch.clusters.get(cluster, 0), each.total_submit_procs)
        batch.present[cluster] = batch.present.get(cluster, 0) + each.jobs
        batch.first, batch.last = min(batch.first, first), max(batch.last, last)
        for status, n in each.counts.items():
            if status in batch.counts:
                batch.counts[status] += n
    rows = []
    for batch in batches.values():
        total = sum(max(batch.clusters[c], n) for c, n in batch.present.items())
        # A factory's procs not yet made are not done: those made and gone are.
        unmade = sum(
            f.total - f.next_proc for c in batch.present if (f := factories.get(c)) is not None
        )
        done = total - unmade - sum(batch.present.values()) + batch.counts[4]
        run = batch.counts[2] + batch.counts[6]
        rows.append(
            [
                batch.owner,
                batch.name,
                format_date(batch.submitted),
                _count(done),
                _count(run),
                _count(batch.counts[1]),
                _count(batch.counts[5]),
                str(total),
                _id_range(batch.first, batch.last),
            ]
        )
    columns = [
        Column("OWNER"),
        Column("BATCH_NAME"),
        Column("SUBMITTED"),
        Column("DONE", right=True),
        Column("RUN", right=True),
        Column("IDLE", right=True),
        Column("HOLD", right=True),
        Column("TOTAL", right=True),
        Column("JOB_IDS"),
    ]
    print_table(columns, rows, rich=rich)


def _factory_view(
    counted: Sequence[BatchCounts], factories: Sequence[FactoryInfo], rich: bool
) -> None:
    """condor_q -factory: each late materialization factory, its limit, the jobs it has
    in the queue (PRESNT, and how they run) and the next proc it makes (NEXTID)."""
    jobs: dict[int, dict[int, int]] = {}
    submitted: dict[int, int | None] = {}
    for each in counted:
        counts = jobs.setdefault(each.cluster, {})
        for status, n in each.counts.items():
            counts[status] = counts.get(status, 0) + n
        submitted[each.cluster] = each.qdate
    rows = []
    for factory in factories:
        counts = jobs.get(factory.cluster, {})
        limit = factory.limit if factory.limit is not None else factory.total
        rows.append(
            [
                f"{factory.cluster}.",
                factory.owner,
                format_date(submitted.get(factory.cluster) or factory.qdate),
                str(limit),
                str(sum(counts.values())),
                str(counts.get(2, 0) + counts.get(6, 0)),
                str(counts.get(1, 0)),
                str(counts.get(5, 0)),
                str(factory.next_proc),
                _MODES.get(factory.paused, "Unk"),
                "",
            ]
        )
    columns = [
        Column("ID", right=True),
        Column("OWNER"),
        Column("SUBMITTED"),
        Column("LIMIT", right=True),
        Column("PRESNT", right=True),
        Column("RUN", right=True),
        Column("IDLE", right=True),
        Column("HOLD", right=True),
        Column("NEXTID", right=True),
        Column("MODE"),
        Column("DIGEST"),
    ]
    print_table(columns, rows, rich=rich)


#: condor_q -factory's MODE: JobMaterializePaused as print_format_tables' JOB_FACTORY_MODE.
_MODES: Final = {-1: "Errs", 0: "Norm", 1: "Held", 2: "Done", 3: "Gone"}


def _factory_ad(factory: FactoryInfo, counted: Sequence[BatchCounts]) -> ClassAd:
    """A factory's cluster ad as condor_q -factory -l shows it (ProcId undefined)."""
    counts: dict[int, int] = {}
    for each in counted:
        if each.cluster == factory.cluster:
            for status, n in each.counts.items():
                counts[status] = counts.get(status, 0) + n
    ad = ClassAd(
        {
            "ClusterId": factory.cluster,
            "Owner": factory.owner,
            "TotalSubmitProcs": factory.total,
            "JobMaterializeNextProcId": factory.next_proc,
            "JobMaterializePaused": factory.paused,
            "JobsPresent": sum(counts.values()),
            "JobsRunning": counts.get(2, 0) + counts.get(6, 0),
            "JobsIdle": counts.get(1, 0),
            "JobsHeld": counts.get(5, 0),
        }
    )
    if factory.qdate is not None:
        ad["QDate"] = factory.qdate
    if factory.limit is not None:
        ad["JobMaterializeLimit"] = factory.limit
    if factory.max_idle is not None:
        ad["JobMaterializeMaxIdle"] = factory.max_idle
    if factory.pause_reason:
        ad["JobMaterializePauseReason"] = factory.pause_reason
    return ad


def _count(n: int) -> str:
    return str(n) if n else "_"  # condor_q's batch view shows no zeros


def _id_range(first: tuple[int, int], last: tuple[int, int]) -> str:
    if first == last:
        return f"{first[0]}.{first[1]}"
    if first[0] == last[0]:
        return f"{first[0]}.{first[1]}-{last[1]}"
    return f"{first[0]}.{first[1]} ... {last[0]}.{last[1]}"


def _run_time(ad: ClassAd, now: float) -> str:
    wall = ad.get("RemoteWallClockTime")
    total = float(wall) if isinstance(wall, (int, float)) else 0.0
    start = ad.get("JobCurrentStartDate")
    if ad.get("JobStatus") == JobStatus.RUNNING and isinstance(start, int):
        total += max(0.0, now - start)
    return format_duration(total)


#: The columns condor_q's -nobatch and -run views begin with, and their cells.
_JOB_COLUMNS: Final = (
    Column("ID", right=True),
    Column("OWNER"),
    Column("SUBMITTED"),
    Column("RUN_TIME", right=True),
)


def _job_cells(ad: ClassAd, now: float) -> list[str]:
    return [
        f"{ad['ClusterId']}.{ad['ProcId']}",
        str(ad.get("Owner", "?")),
        format_date(ad.get("QDate")),
        _run_time(ad, now),
    ]


def _job_view(ads: Iterable[ClassAd], rich: bool) -> None:
    now = time.time()
    rows = []
    for ad in ads:
        size = ad.get("ImageSize")
        rows.append(
            [
                *_job_cells(ad, now),
                status_letter(ad.get("JobStatus")),
                str(ad.get("JobPrio", 0)),
                f"{size / 1024:.1f}" if isinstance(size, (int, float)) else "0.0",
                command_line(ad),
            ]
        )
    columns = [
        *_JOB_COLUMNS,
        Column("ST"),
        Column("PRI", right=True),
        Column("SIZE", right=True),
        Column("CMD"),
    ]
    print_table(columns, rows, rich=rich)


def _run_view(ads: Iterable[ClassAd], rich: bool) -> None:
    """condor_q -run: ID, OWNER, SUBMITTED, RUN_TIME and HOST(S), the slot each runs on."""
    now = time.time()
    rows = []
    for ad in ads:
        host = ad.get("RemoteHost")
        if not isinstance(host, str):
            grid = ad.get("GridResource")
            host = grid if isinstance(grid, str) else ""
        rows.append([*_job_cells(ad, now), host])
    print_table([*_JOB_COLUMNS, Column("HOST(S)")], rows, rich=rich)


def _hold_view(ads: Iterable[ClassAd], rich: bool) -> None:
    rows = [
        [
            f"{ad['ClusterId']}.{ad['ProcId']}",
            str(ad.get("Owner", "?")),
            format_date(ad.get("EnteredCurrentStatus")),
            str(ad.get("HoldReason", "")),
        ]
        for ad in ads
    ]
    columns = [
        Column("ID", right=True),
        Column("OWNER"),
        Column("HELD_SINCE"),
        Column("HOLD_REASON"),
    ]
    print_table(columns, rows, rich=rich)


def _quarantine_view(entries: Sequence[dict[str, Any]], rich: bool) -> None:
    """The rows set aside: the job (or the table a row came from), whose, when, why."""
    rows = [
        [
            str(e.get("id", "")),
            str(e.get("job") or f"({e.get('source', '?')})"),
            str(e.get("owner") or "?"),
            format_date(e.get("time")),
            str(e.get("reason", "")),
        ]
        for e in entries
    ]
    columns = [
        Column("N", right=True),
        Column("ID", right=True),
        Column("OWNER"),
        Column("SET_ASIDE"),
        Column("WHY"),
    ]
    print_table(columns, rows, rich=rich)


def _grid_view(ads: Iterable[ClassAd], rich: bool) -> None:
    """condor_q -grid: the remote state (a VM's `running`) and the remote id (instance id)."""
    rows = []
    for ad in ads:
        grid_id = ad.get("GridJobId")
        words = grid_id.split() if isinstance(grid_id, str) else []
        status = ad.get("GridJobStatus")
        rows.append(
            [
                f"{ad['ClusterId']}.{ad['ProcId']}",
                str(ad.get("Owner", "?")),
                status if isinstance(status, str) else "",
                str(ad.get("GridResource", "")),
                words[-1] if words else "",
            ]
        )
    columns = [
        Column("ID", right=True),
        Column("OWNER"),
        Column("STATUS"),
        Column("GRID->MANAGER HOST"),
        Column("GRID_JOB_ID"),
    ]
    print_table(columns, rows, rich=rich)
