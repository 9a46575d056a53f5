"""`htgrid rm|hold|release` (condor_rm, condor_hold, condor_release) and `htgrid qedit`.

    $ htgrid rm 12.0 13
    Job 12.0 marked for removal
    All jobs in cluster 13 have been marked for removal

Each argument (a job id, a cluster, a user name), `-constraint EXPR` and `-all` (all your
jobs) is acted on separately (on another schedd with `-name SCHEDD` / `-pool HOST:PORT`), and each gets its line: success on stdout, failure on
stderr with the reason (not found, not yours, not in a status the action applies to).
Exit status: 0 when every target was acted on, 1 when any was not, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Final

from htgrid._args import flag
from htgrid.cli._common import (
    EXIT_NO,
    EXIT_OK,
    Target,
    add_schedd_options,
    client,
    parse_targets,
)
from htgrid.errors import UsageError
from htgrid.net import ScheddClient
from htgrid.queue import InvalidTransition, JobAction, JobNotFound, NotAuthorized

__all__ = ["register"]

# action: (verb, past participle, what a job not in the right status says)
_WORDS: Final = {
    JobAction.Remove: ("remove", "marked for removal", "already marked for removal"),
    JobAction.Hold: ("hold", "held", "already held"),
    JobAction.Release: ("release", "released", "not held to be released"),
}
_NAME: Final = re.compile(r"[A-Za-z_]\w*")


def register(commands: Any) -> None:
    """Add rm, hold, release and qedit to the top-level parser."""
    for name, action, tool in (
        ("rm", JobAction.Remove, "condor_rm"),
        ("hold", JobAction.Hold, "condor_hold"),
        ("release", JobAction.Release, "condor_release"),
    ):
        verb = _WORDS[action][0]
        cmd = commands.add_parser(
            name, help=f"{verb} jobs ({tool})", description=f"{verb.capitalize()} jobs."
        )
        cmd.add_argument("targets", nargs="*", metavar="ID|CLUSTER|USER")
        # The short forms are condor_rm's own (rm.cpp): -const, -a, -r...
        flag(cmd, "constraint", 1, metavar="EXPR", help="jobs where EXPR")
        flag(cmd, "all", 1, dest="all_jobs", action="store_true", help="all your jobs")
        flag(cmd, "reason", 1, metavar="TEXT", help="why (kept in the job ad)")
        add_schedd_options(cmd)
        cmd.set_defaults(handler=_act, action=action)
    qedit = commands.add_parser(
        "qedit",
        help="change job attributes (condor_qedit)",
        description=(
            "Set attributes of jobs: qedit ID|CLUSTER|USER ATTR VALUE [ATTR VALUE...], or "
            "qedit -constraint EXPR ATTR VALUE.... VALUE is a ClassAd expression: quote "
            "strings, as in '\"text\"'."
        ),
    )
    flag(qedit, "constraint", 1, metavar="EXPR", help="jobs where EXPR")  # as qedit.cpp
    qedit.add_argument("words", nargs="+", metavar="ARG")
    add_schedd_options(qedit)
    qedit.set_defaults(handler=_qedit)


def _act(args: argparse.Namespace) -> int:
    targets = parse_targets(args.targets, args.constraint, args.all_jobs)
    if not targets:
        raise UsageError("say which jobs: ID, CLUSTER, USER, -constraint EXPR or -all")
    failed = 0
    with client(args) as schedd:
        for target in targets:
            failed += not _one(schedd, args.action, target, args.reason)
    return EXIT_NO if failed else EXIT_OK


def _one(schedd: ScheddClient, action: JobAction, target: Target, reason: str | None) -> bool:
    verb, done, bad_status = _WORDS[action]
    # A late materialization factory is acted on with its cluster, even with no job of
    # it in the queue (a paused one whose jobs have all left).
    factory = target.kind == "cluster" and any(
        f.cluster == target.jobs.cluster
        for f in schedd.summary(f"ClusterId == {target.jobs.cluster}")[2]
    )
    try:
        ids = schedd.act(action, target.jobs, reason)
    except JobNotFound:
        if target.kind == "job":
            print(f"Job {target.text} not found", file=sys.stderr)
        else:
            print(f"Couldn't find/{verb} all jobs in cluster {target.text}", file=sys.stderr)
        return False
    except NotAuthorized as exc:
        print(f"Permission denied to {verb} job(s) {target.text}: {exc}", file=sys.stderr)
        return False
    except InvalidTransition as exc:
        reason = str(exc).split(": ", 1)[-1]
        if action is JobAction.Release or "already" in reason:
            text = bad_status  # HTCondor's words for the usual case
        else:
            text = f"not {done}: {reason}"
        print(f"Job {target.text} {text}", file=sys.stderr)
        return False
    if target.kind == "job":
        print(f"Job {target.text} {done}")
        return True
    scope = {
        "cluster": f"in cluster {target.text}",
        "user": f'of user "{target.text}"',
        "constraint": f"matching constraint ({target.text})",
        "all": "",
    }[target.kind]
    if not ids and not factory:
        print(f"Couldn't find/{verb} all jobs {scope}".rstrip(), file=sys.stderr)
        return False
    print(f"All jobs {scope} have been {done}".replace("  ", " "))
    return True


def _qedit(args: argparse.Namespace) -> int:
    words = list(args.words)
    if args.constraint is None:
        if not words:
            raise UsageError("qedit: say which jobs: ID, CLUSTER, USER or -constraint EXPR")
        targets = parse_targets(words[:1])
        words = words[1:]
    else:
        targets = parse_targets([], args.constraint)
    if not words or len(words) % 2:
        raise UsageError("qedit: expected ATTR VALUE pairs after the jobs")
    attrs = dict(zip(words[::2], words[1::2], strict=True))
    for name in attrs:
        if not _NAME.fullmatch(name):
            raise UsageError(f"qedit: {name!r} is not an attribute name")
    target = targets[0]
    with client(args) as schedd:
        try:
            ids = schedd.edit(target.jobs, attrs)
        except JobNotFound:
            what = "Job" if target.kind == "job" else "Cluster"
            print(f"{what} {target.text} not found", file=sys.stderr)
            return EXIT_NO
    if not ids:
        print("No jobs matched: nothing changed", file=sys.stderr)
        return EXIT_NO
    for name in attrs:
        print(f'Set attribute "{name}" for {len(ids)} matching jobs.')
    return EXIT_OK
