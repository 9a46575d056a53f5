"""`htgrid history`: condor_history, the jobs that left the queue, most recent first.

    $ htgrid history -limit 2
     ID OWNER SUBMITTED   RUN_TIME   ST COMPLETED   CMD
    3.0 alice 11/21 17:01 0+00:00:01 C  11/21 17:01 echo hello
    2.0 alice 11/21 17:00 0+00:00:00 X  11/21 17:00 sleep 600

`-name SCHEDD -pool HOST:PORT` read another schedd's history, as condor_history's do
(see `htgrid q`).

Exit status: 0 (even when nothing matches), 1 when a job or cluster named on the command
line is not in the history, or the daemon is not running (or the named schedd cannot be
found), 2 for a bad constraint.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Final

from htgrid._args import flag
from htgrid.classad import ClassAd
from htgrid.cli._common import (
    EXIT_OK,
    Target,
    add_schedd_options,
    client,
    command_line,
    format_date,
    format_duration,
    is_terminal,
    missing,
    parse_targets,
    plain_projection,
    print_ads,
    report_missing,
)
from htgrid.cli._q import status_letter
from htgrid.cli._table import Column, print_table

__all__ = ["register"]

_COLUMNS: Final = [
    "ClusterId",
    "ProcId",
    "Owner",
    "QDate",
    "RemoteWallClockTime",
    "JobStatus",
    "CompletionDate",
    "EnteredCurrentStatus",
    "Cmd",
    "Arguments",
    "Args",
]


def register(commands: Any) -> None:
    """Add `history` to the top-level parser."""
    hist = commands.add_parser(
        "history",
        help="jobs that left the queue (condor_history)",
        description="Show completed and removed jobs, most recent first.",
    )
    hist.add_argument("restrict", nargs="*", metavar="ID|CLUSTER|USER", help="jobs to show")
    # The short forms are condor_history's own (history.cpp).
    flag(hist, "constraint", 1, metavar="EXPR", help="only jobs where EXPR")
    flag(hist, "limit", 3, type=int, metavar="N", help="at most N jobs")
    flag(hist, "match", 1, type=int, dest="limit", metavar="N", help=argparse.SUPPRESS)
    flag(hist, "long", 1, "-l", action="store_true", help="whole job ads")
    flag(hist, "autoformat", 5, "-af", nargs="+", metavar="ATTR", help="values of ATTRs")
    flag(hist, "json", 4, action="store_true", help="job ads as JSON")
    add_schedd_options(hist)
    hist.set_defaults(handler=_history)


def _history(args: argparse.Namespace) -> int:
    parts = []
    targets = parse_targets(args.restrict)
    if targets:
        parts.append("(" + " || ".join(t.constraint for t in targets) + ")")
    if args.constraint:
        parts.extend(t.constraint for t in parse_targets([], args.constraint))
    constraint = " && ".join(parts) or None
    with client(args) as schedd:
        if args.json or args.long or args.autoformat:
            projection = plain_projection(args.autoformat) if args.autoformat else None
            if projection is not None and targets:  # to tell which named jobs are there
                projection = [*projection, "ClusterId", "ProcId"]
            ads = schedd.history(constraint, projection, limit=args.limit)
            print_ads(ads, long=args.long, as_json=args.json, autoformat=args.autoformat or ())
            return _missing(targets, ads, args.limit)
        ads = schedd.history(constraint, _COLUMNS, limit=args.limit)
    rows = []
    for ad in ads:
        status = ad.get("JobStatus")
        done = ad.get("CompletionDate") if status == 4 else ad.get("EnteredCurrentStatus")
        rows.append(
            [
                f"{ad['ClusterId']}.{ad['ProcId']}",
                str(ad.get("Owner", "?")),
                format_date(ad.get("QDate")),
                format_duration(ad.get("RemoteWallClockTime")),
                status_letter(status),
                format_date(done),
                command_line(ad),
            ]
        )
    columns = [
        Column("ID", right=True),
        Column("OWNER"),
        Column("SUBMITTED"),
        Column("RUN_TIME", right=True),
        Column("ST"),
        Column("COMPLETED"),
        Column("CMD"),
    ]
    print_table(columns, rows, rich=is_terminal())
    return _missing(targets, ads, args.limit)


def _missing(targets: Sequence[Target], ads: Sequence[ClassAd], limit: int | None) -> int:
    if limit is not None and len(ads) >= limit:
        return EXIT_OK  # the limit may have cut the named jobs off: not a "no"
    return report_missing("history", "the history", missing(targets, ads))
