"""What the job commands share: the daemon's client, the user, job arguments, time and
value formats, and output to a terminal (rich) or a pipe (plain text, as HTCondor's).

`-name SCHEDD` and `-pool HOST:PORT` (`add_schedd_options`) send a command to another
schedd, found through a pool's collector (`htgrid.collector.find_schedd`) and reached over
TLS with the user's token of that pool; without them, `client` is the personal pool's
daemon on its Unix socket.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shlex
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from htgrid._args import flag
from htgrid.classad import ClassAd, ExprTree, Value, quote
from htgrid.errors import UsageError
from htgrid.net import Jobs, ScheddClient
from htgrid.schedd import ScheddConfig
from htgrid.submit import split_v2_raw

__all__ = [
    "EXIT_NO",
    "EXIT_OK",
    "EXIT_USAGE",
    "Schedd",
    "Target",
    "add_schedd_options",
    "client",
    "command_line",
    "connect",
    "current_user",
    "format_date",
    "format_duration",
    "format_value",
    "is_terminal",
    "missing",
    "parse_targets",
    "print_ads",
    "report_missing",
]

EXIT_OK: Final = 0
EXIT_NO: Final = 1
EXIT_USAGE: Final = 2

_ID: Final = re.compile(r"\d+\.\d+")
_CLUSTER: Final = re.compile(r"\d+")
_USER: Final = re.compile(r"[A-Za-z_][\w.@-]*")


def add_schedd_options(parser: argparse.ArgumentParser, *, pool_shortest: int = 1) -> None:
    """condor_q's `-name` and `-pool`: which schedd a job command talks to (with the short
    forms HTCondor's tools take: -n, -na..., -p, -po...; condor_submit's -pool from -po)."""
    flag(
        parser,
        "name",
        1,
        dest="schedd_name",
        metavar="SCHEDD",
        help="the schedd of this Name (in -pool's collector, else this pool's)",
    )
    flag(
        parser,
        "pool",
        pool_shortest,
        dest="schedd_pool",
        metavar="HOST:PORT",
        help="the pool whose collector is at HOST:PORT (its only schedd unless -name)",
    )


@dataclass(frozen=True, slots=True)
class Schedd:
    """The schedd a command talks to, as condor_q's header names it."""

    name: str
    address: str  # its socket, or host:port


def connect(args: argparse.Namespace | None = None) -> tuple[ScheddClient, Schedd]:
    """The schedd `-name`/`-pool` in `args` name, over TLS; else this user's personal
    pool ($HTGRID_HOME), on its socket. The client, and which schedd it is."""
    config = ScheddConfig.load()
    name = getattr(args, "schedd_name", None)
    pool = getattr(args, "schedd_pool", None)
    if name is None and pool is None:
        return ScheddClient.local(config.home), Schedd(config.schedd_name, str(config.socket))
    # Imported here for start-up: only -name and -pool need the collector's client.
    from htgrid.collector import find_schedd

    found = find_schedd(name, pool, home=config.home)
    return ScheddClient.remote(found.url, home=config.home), Schedd(found.name, found.address)


def client(args: argparse.Namespace | None = None) -> ScheddClient:
    """The client of the schedd `args` name (see `connect`)."""
    return connect(args)[0]


def current_user() -> str:
    """The user name of this process (the name the daemon will see over the socket)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def is_terminal() -> bool:
    """Whether stdout is a terminal (rich output) rather than a pipe or file (plain)."""
    return sys.stdout.isatty()


@dataclass(frozen=True, slots=True)
class Target:
    """One job argument of condor_rm and friends: `12.0`, `12` or a user name."""

    text: str
    jobs: Jobs
    kind: str  # "job", "cluster", "user", "constraint", "all"

    @property
    def constraint(self) -> str:
        """The target as a constraint (for condor_q's restrictions)."""
        if self.jobs.ids:
            job = self.jobs.ids[0]
            return f"(ClusterId == {job.cluster} && ProcId == {job.proc})"
        if self.jobs.cluster is not None:
            return f"(ClusterId == {self.jobs.cluster})"
        if self.jobs.constraint is not None:
            return f"({self.jobs.constraint})"
        return "true"


def parse_targets(
    args: Sequence[str], constraint: str | None = None, all_jobs: bool = False
) -> list[Target]:
    """The targets of a command line (UsageError for an argument that names none)."""
    targets: list[Target] = []
    for arg in args:
        if _ID.fullmatch(arg):
            targets.append(Target(arg, Jobs.of([arg]), "job"))
        elif _CLUSTER.fullmatch(arg):
            targets.append(Target(arg, Jobs.in_cluster(int(arg)), "cluster"))
        elif _USER.fullmatch(arg):
            targets.append(Target(arg, Jobs.matching(f"Owner == {quote(arg)}"), "user"))
        else:
            raise UsageError(f"{arg!r} is not a job id (12.0), a cluster (12) or a user name")
    if constraint is not None:
        ExprTree(constraint)  # ClassAdSyntaxError, with the column, before asking anyone
        targets.append(Target(constraint, Jobs.matching(constraint), "constraint"))
    if all_jobs:
        targets.append(Target("-all", Jobs.mine(), "all"))
    return targets


def missing(targets: Sequence[Target], ads: Sequence[ClassAd]) -> list[str]:
    """The job ids and clusters among `targets` that no ad of `ads` is (a user with no
    jobs is not missing: users come and go)."""
    ids = {(ad.get("ClusterId"), ad.get("ProcId")) for ad in ads}
    clusters = {cluster for cluster, _ in ids}
    gone = []
    for target in targets:
        if target.kind == "job":
            job = target.jobs.ids[0]
            if (job.cluster, job.proc) not in ids:
                gone.append(target.text)
        elif target.kind == "cluster" and target.jobs.cluster not in clusters:
            gone.append(target.text)
    return gone


def report_missing(command: str, where: str, gone: Sequence[str]) -> int:
    """Say which named jobs are not in `where`; the exit status (1 when any is not)."""
    for text in gone:
        what = "job" if "." in text else "cluster"
        print(f"htgrid {command}: no {what} {text} in {where}", file=sys.stderr)
    return EXIT_NO if gone else EXIT_OK


def command_line(ad: ClassAd) -> str:
    """The CMD column: the executable's name and its arguments, quoted as a shell would."""
    cmd = ad.get("Cmd")
    name = os.path.basename(cmd) if isinstance(cmd, str) else "?"
    v2, v1 = ad.get("Arguments"), ad.get("Args")
    if isinstance(v2, str):
        words = split_v2_raw(v2)
    else:
        words = v1.split() if isinstance(v1, str) else []
    return " ".join([name, *(shlex.quote(w) for w in words)])


def format_date(epoch: object, *, with_year: bool = False) -> str:
    """`MM/DD HH:MM` in local time, as condor_q prints dates (`?` when unknown)."""
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool) or epoch <= 0:
        return "?"
    return time.strftime("%m/%d/%y %H:%M:%S" if with_year else "%m/%d %H:%M", time.localtime(epoch))


def format_duration(seconds: object) -> str:
    """`D+HH:MM:SS`, as condor_q prints RUN_TIME."""
    total = int(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else 0
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}+{hours:02d}:{minutes:02d}:{secs:02d}"


def format_value(value: Any) -> str:
    """A value as `-af` prints it: strings bare, undefined as `undefined`."""
    if isinstance(value, Value):
        return "undefined" if value == Value.Undefined else "error"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, ExprTree):
        return str(value)
    if isinstance(value, (ClassAd, list)):
        holder = ClassAd()
        holder["v"] = value
        return repr(holder.lookup("v"))
    return str(value)


def print_ads(
    ads: Iterable[ClassAd], *, long: bool, as_json: bool, autoformat: Sequence[str]
) -> None:
    """The -l, -json and -af forms of condor_q and condor_history, written as the ads
    come."""
    out = sys.stdout
    if as_json:
        out.write("[\n")
        sep = ""
        for ad in ads:
            out.write(sep + ad.printJson())
            sep = ",\n"
        out.write("\n]\n" if sep else "]\n")
    elif long:
        for ad in ads:
            out.write(ad.printOld().rstrip("\n") + "\n\n")
    else:
        exprs = [ExprTree(text) for text in autoformat]
        for ad in ads:
            out.write(" ".join(format_value(expr.eval(ad)) for expr in exprs) + "\n")


def plain_projection(autoformat: Sequence[str]) -> list[str] | None:
    """The attributes -af needs when every argument is a plain name (else the whole ad)."""
    names = [text.strip() for text in autoformat]
    if all(re.fullmatch(r"[A-Za-z_]\w*", name) for name in names):
        return names
    return None
