"""`htgrid submit`: condor_submit.

    $ htgrid submit job.sub
    Submitting job(s)...
    3 job(s) submitted to cluster 12.

As condor_submit does, the command reads the submit file itself (relative paths are
relative to the current directory, `getenv` sees this environment), asks the daemon for
a cluster id, and builds the job ads: the cluster ad once, then for each proc what it
has of its own, sent as they are built in one streamed request (neither side holds the
cluster's procs all at once). The cluster is queued whole or not at all: a proc that
fails midway (or an interrupted submit) queues nothing. A submit of 10,000 procs or more
shows a progress bar on stderr when that is a terminal. `max_materialize = N` or
`max_idle = N` makes the cluster a late materialization factory: the daemon keeps at most
N of its procs in the queue (N not running, for max_idle) and makes the next as earlier
ones leave. `NAME=VALUE` arguments and `-append LINE` add statements before the queue
statement; `-queue ARGS` gives the queue statement itself.
`-dry-run DEST` writes the ads (old syntax) to DEST (`-` for stdout) and needs no daemon.
`-name SCHEDD` / `-pool HOST:PORT` queue the jobs in another schedd (condor_submit's).

Exit status: 0 submitted, 2 the submit file or the command line is wrong (the message
names the file and line), 1 the daemon refused or is not running.
"""

from __future__ import annotations

import argparse
import copy
import getpass
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from htgrid._args import flag
from htgrid.classad import ClassAd, quote
from htgrid.cli._common import EXIT_OK, add_schedd_options, client, current_user
from htgrid.errors import UsageError
from htgrid.pool import ConfigFile, htgrid_home
from htgrid.submit import (
    ClusterProcs,
    Job,
    ProcAd,
    SubmitConfig,
    SubmitDescription,
    SubmitError,
    dry_run_chunks,
)

__all__ = ["register", "split_cluster"]

_QUEUE: Final = re.compile(r"^[ \t]*queue\b", re.IGNORECASE | re.MULTILINE)
_ASSIGN: Final = re.compile(r"[A-Za-z_+][\w.+]*\s*=")
# Set by the queue, not by the submitter; Owner comes from the caller's identity.
_QUEUE_SET: Final = frozenset({"owner", "procid", "clusterid"})


def register(commands: Any) -> None:
    """Add `submit` to the top-level parser."""
    sub = commands.add_parser(
        "submit",
        help="submit jobs from a submit description file (condor_submit)",
        description="Queue the jobs a submit description file describes.",
    )
    sub.add_argument("file", nargs="?", metavar="FILE", help="the submit description file")
    sub.add_argument(
        "assignments",
        nargs="*",
        metavar="NAME=VALUE",
        help="submit commands or macros, added before the queue statement",
    )
    # The short forms are condor_submit's own (submit.cpp): -dry, -a, -q, -n, -po...
    flag(
        sub,
        "dry-run",
        3,
        dest="dry_run",
        metavar="DEST",
        help="write the job ads to DEST (- for stdout) instead of submitting; "
        "`-dry-run FILE` alone prints FILE's ads",
    )
    flag(
        sub,
        "append",
        1,
        "-a",
        dest="append",
        action="append",
        default=[],
        metavar="LINE",
        help="a submit statement added before the queue statement",
    )
    flag(
        sub,
        "queue",
        1,
        dest="queue",
        metavar="ARGS",
        help="the queue statement's arguments, for a file without one",
    )
    # condor_submit's -password (before 9.12; -p its shortest form) took the password as
    # its value, where `ps` shows it: here it is asked for, never given on the command line.
    flag(
        sub,
        "password",
        1,
        dest="myproxy_password",
        action="store_true",
        help="ask for the MyProxy password the grid manager renews the jobs' X.509 proxy "
        "with (MyProxyHost): on the terminal without echo, else one line of stdin",
    )
    add_schedd_options(sub, pool_shortest=2)
    # `htcondor job submit --annex-name NAME`: the job is for that annex's slots, whose
    # START takes only jobs aimed at it (htgrid annex).
    flag(
        sub,
        "annex",
        6,
        "-annex-name",
        "--annex-name",
        dest="annex",
        metavar="NAME",
        help='aim the jobs at the annex NAME (MY.TargetAnnexName = "NAME")',
    )
    sub.set_defaults(handler=_submit)


def _text(args: argparse.Namespace) -> str:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SubmitError(f"cannot read submit file: {exc.strerror}", path=str(path)) from None
    for item in args.assignments:
        if not _ASSIGN.match(item):
            raise UsageError(f"{item!r} is not NAME=VALUE")
    extra = [*args.assignments, *args.append]
    if args.annex:
        extra.append(f"MY.TargetAnnexName = {quote(args.annex)}")
    match = _QUEUE.search(text)
    if args.queue is not None:
        if match:
            raise SubmitError(
                "-queue was given but the file has a queue statement",
                path=str(path),
                line=text.count("\n", 0, match.start()) + 1,
            )
        return (
            text.rstrip("\n")
            + "\n"
            + "".join(f"{line}\n" for line in extra)
            + f"queue {args.queue}\n"
        )
    if not extra:
        return text
    if not match:
        return text.rstrip("\n") + "\n" + "".join(f"{line}\n" for line in extra)
    return text[: match.start()] + "".join(f"{line}\n" for line in extra) + text[match.start() :]


def _description(args: argparse.Namespace) -> SubmitDescription:
    return SubmitDescription.from_text(
        _text(args), args.file, cwd=os.getcwd(), env=dict(os.environ)
    )


def _procs(desc: SubmitDescription, cluster: int) -> ClusterProcs:
    cwd = os.getcwd()
    # As condor_submit, the pool's configuration gives the job lease of jobs naming none.
    lease = ConfigFile.read(htgrid_home()).text("JOB_DEFAULT_LEASE_DURATION")
    return desc.procs(
        cluster,
        owner=current_user(),
        qdate=int(time.time()),
        submit_dir=cwd,
        config=SubmitConfig(job_default_lease_duration=lease),
    )


def split_cluster(jobs: Sequence[Job]) -> tuple[ClassAd, list[ClassAd]]:
    """The cluster ad (what all procs share) and each proc's own attributes.

    As condor_submit sends them: proc 0's ad is the cluster's; later procs send only
    the attributes whose values differ.
    """
    first: ClassAd = jobs[0].ad
    cluster = ClassAd()
    shared: dict[str, Any] = {}
    for name in first:
        if name.lower() not in _QUEUE_SET:
            cluster[name] = shared[name] = first[name]
    procs = [ClassAd()]
    for job in jobs[1:]:
        own = ClassAd()
        for name in job.ad:
            value = job.ad[name]
            if name.lower() not in _QUEUE_SET and not _same(shared.get(name, _MISSING), value):
                own[name] = value
        procs.append(own)
    return cluster, procs


_MISSING: Final = object()


def _same(a: Any, b: Any) -> bool:
    # Literals compare with their type (1, 1.0 and true are different values); expressions
    # compare as syntax trees.
    return type(a) is type(b) and a == b


def _submit(args: argparse.Namespace) -> int:
    password = _myproxy_password(args) if args.myproxy_password else None
    if args.file is None:
        if args.dry_run is None:
            raise UsageError("submit: which submit file?")
        args.file, args.dry_run = args.dry_run, "-"  # `-dry-run FILE`: print FILE's ads
    desc = _description(args)  # the file's errors before anything is asked of the daemon
    if args.dry_run is not None:
        _dry_run(_procs(desc, 1), args.dry_run)
        return EXIT_OK
    with client(args) as schedd:
        cluster = _procs(desc, schedd.reserve_cluster())  # proc 0 built: its errors now
        if cluster.count == 0:
            print(
                f'WARNING: "{args.file}" has only empty "queue" commands -- no jobs queued',
                file=sys.stderr,
            )
            return EXIT_OK
        warnings = _Warnings()
        progress = _Progress(cluster.count)
        with progress:
            ad = _cluster_ad(cluster, args.file)
            if password is not None:  # the schedd keeps it out of the queue
                ad["MyProxyPassword"] = password
            count = schedd.submit_stream(
                cluster.cluster_id,
                ad,
                (warnings.own(proc) for proc in cluster),
                sent=progress.sent,
            )
    print(f"{count} job(s) submitted to cluster {cluster.cluster_id}.")
    return EXIT_OK


def _myproxy_password(args: argparse.Namespace) -> str:
    """The MyProxy password, asked on the terminal (not echoed) or read as a line of
    stdin. Never part of a message: a password given after -password as condor_submit
    took it would be taken for the submit file, so the form is refused without naming it."""
    words = [args.file, *args.assignments] if args.file is not None else []
    if words and (not Path(words[0]).is_file() or not all(map(_ASSIGN.match, words[1:]))):
        raise UsageError(
            "submit: -password takes no value: the MyProxy password is asked for on the "
            "terminal, or read from standard input; nothing was submitted"
        )
    if sys.stdin.isatty():
        password = getpass.getpass("Enter MyProxy password: ")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise UsageError("submit: -password: no MyProxy password was given")
    return password


def _cluster_ad(cluster: ClusterProcs, path: str) -> ClassAd:
    """The cluster ad as the queue takes it: ClusterId, ProcId and Owner are its to set.
    `max_materialize` makes the cluster a late materialization factory, as `max_idle`
    (JobMaterializeMaxIdle, in every job ad) does."""
    ad: ClassAd = copy.copy(cluster.cluster_ad)
    for name in _QUEUE_SET:
        ad.pop(name, None)
    limit = cluster.param("max_materialize")
    if limit is not None:
        if not limit.strip().isdigit() or int(limit) < 1:
            raise SubmitError(
                f"{path}: max_materialize must be a whole number of at least 1, not {limit!r}"
            )
        ad["JobMaterializeLimit"] = int(limit)
    idle = ad.get("JobMaterializeMaxIdle")
    if idle is not None and (type(idle) is not int or idle < 1):
        raise SubmitError(f"{path}: max_idle must be a whole number of at least 1, not {idle!r}")
    step = cluster.item_step
    if (limit is not None or idle is not None) and step is not None:
        # A factory of items: its 036 event says at which item row it stopped.
        ad["JobMaterializeStepSize"] = step
    return ad


def _dry_run(cluster: ClusterProcs, dest: str) -> None:
    """The ads, written as they are built."""
    warnings = _Warnings()
    chunks = dry_run_chunks(cluster, warnings.own)
    if dest == "-":
        sys.stdout.writelines(chunks)
        return
    with Path(dest).open("w", encoding="utf-8") as out:
        out.writelines(chunks)


class _Warnings:
    """Each warning the builds give, said once, when it first comes."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def own(self, proc: ProcAd) -> ClassAd:
        """What `proc` has of its own, its warnings said."""
        for warning in proc.warnings:
            if warning not in self._said:
                self._said.add(warning)
                print(f"WARNING: {warning}", file=sys.stderr)
        own: ClassAd = proc.own
        return own


#: A submit of this many procs shows its progress, when stderr is a terminal.
_PROGRESS_FROM: Final = 10_000


class _Progress:
    """condor_submit's `Submitting job(s)....` (a dot a proc, as they go), and, for a
    long submit with stderr on a terminal, a progress bar there (the dots then come
    with the last proc)."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._dots = 0
        self._bar: Any = None
        if count >= _PROGRESS_FROM and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._bar = Progress(
                "Submitting",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task("submit", total=count)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        else:
            print("Submitting job(s)", end="", flush=True)
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            if kind is None:
                print("Submitting job(s)" + "." * self._dots)
        else:
            print()  # the line of dots ends, an error or not

    def sent(self, count: int) -> None:
        """`count` procs have gone so far."""
        if self._bar is not None:
            self._bar.update(self._task, completed=count)
        else:
            print("." * (count - self._dots), end="", flush=True)
        self._dots = count
