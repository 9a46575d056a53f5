"""`htgrid ce trace HOST[:PORT]` (condor_ce_trace): a test job sent to a CE, followed
step by step, saying which step failed and what to do.

    reach         the CE's collector answers and names its schedd
    authenticate  the schedd accepts this user's token
    map           the local account the CE maps this user to (the job's Owner there)
    submit        a job is queued and its (empty) input spooled
    route         the CE's job router takes it (or: why it would not, route by route)
    run           its routed job runs
    output        it completes and its output comes back

The job runs /usr/bin/env (not transferred); `-a NAME=VALUE` adds attributes, as
condor_ce_trace's `--attribute` does (`-a maxWallTime=10`). The port is 9619 unless
given. Exit 0 when every step passed, 1 when one failed.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError

if TYPE_CHECKING:
    from htgrid.net import ScheddClient

__all__ = ["register_trace"]

T = TypeVar("T")
_STATES: Final = {
    1: "Idle",
    2: "Running",
    3: "Removed",
    4: "Completed",
    5: "Held",
    6: "Transferring Output",
}
_SPOOLING: Final = 16  # HoldReasonCode SpoolingInput


def register_trace(actions: Any) -> None:
    trace = actions.add_parser(
        "trace",
        help="send a test job to a CE and follow it (condor_ce_trace)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    trace.add_argument("host", metavar="HOST[:PORT]", help="the CE's collector (port 9619)")
    trace.add_argument("-s", "--schedd-name", dest="schedd", default=None)
    trace.add_argument("-a", "--attribute", dest="attributes", action="append", default=[])
    trace.add_argument(
        "--timeout", type=float, default=600.0, help="seconds each step may take (600)"
    )
    trace.add_argument("-d", "--debug", action="store_true", help="print the job's ads")
    trace.set_defaults(handler=_trace)


class _Failed(Exception):
    """A step failed: what happened and what to do."""

    def __init__(self, step: str, what: str, todo: str) -> None:
        super().__init__(what)
        self.step, self.what, self.todo = step, what, todo


@dataclass
class _Trace:
    schedd: ScheddClient
    job: str
    timeout: float
    debug: bool
    status: int = 0

    def ad(self) -> ClassAd:
        return self.schedd.get(self.job)

    def until(self, step: str, done: Callable[[ClassAd], T | None], what: str, todo: str) -> T:
        deadline = time.monotonic() + self.timeout
        while True:
            ad = self.ad()
            status = ad.get("JobStatus")
            if status != self.status and isinstance(status, int):
                before = _STATES.get(self.status, str(self.status))
                now = _STATES.get(status, str(status))
                print(
                    f"  Job status: {now}"
                    if not self.status
                    else f"  Job went from {before} to {now}"
                )
                self.status = status
            value = done(ad)
            if value:
                return value
            if status in (3, 5) and not (status == 5 and ad.get("HoldReasonCode") == _SPOOLING):
                why = ad.get("HoldReason" if status == 5 else "RemoveReason") or "no reason given"
                raise _Failed(step, f"the job was {_STATES[status].lower()} on the CE: {why}", todo)
            if time.monotonic() > deadline:
                raise _Failed(step, f"{what} within {self.timeout:g} s", todo)
            time.sleep(1.0)


def _trace(args: argparse.Namespace) -> int:
    try:
        _run(args)
    except _Failed as failed:
        print(f"{failed.step}: FAILED: {failed.what}")
        print(f"  What to do: {failed.todo}")
        return 1
    print("All steps passed: the CE takes, routes and runs jobs, and returns their output.")
    return 0


def _run(args: argparse.Namespace) -> None:
    from htgrid.cli._analyze import explain
    from htgrid.collector import find_schedd
    from htgrid.net import ScheddClient
    from htgrid.pool import htgrid_home

    pool = args.host if ":" in args.host else f"{args.host}:9619"
    home = htgrid_home()
    print(f"reach: the CE's collector at {pool}...")
    try:
        where = find_schedd(args.schedd, pool, home=home)
    except HTGridError as err:
        raise _Failed(
            "reach",
            str(err),
            "check that the CE runs (`htgrid ce up` there), that HOST:PORT is its collector "
            "(9619 unless it says otherwise) and that this host may reach it; a certificate "
            "error means its CA is not in $HTGRID_HOME/etc/ca/trusted.d",
        ) from None
    print(f"  found schedd {where.name} at {where.url}")
    schedd = ScheddClient.remote(where.url, home=home)
    with schedd:
        print("authenticate: a token the CE accepts...")
        try:
            schedd.query("false")
        except HTGridError as err:
            raise _Failed(
                "authenticate",
                f"the CE's schedd refused this user: {err}",
                "ask the CE's administrator for a token (`htgrid token create` there) and "
                "put it in ~/.htgrid/tokens.d, or have the CE accept your issuer's tokens",
            ) from None
        print("  accepted")
        print("submit: a test job (/usr/bin/env)...")
        job = _submit(schedd, args.attributes)
        trace = _Trace(schedd, job, args.timeout, args.debug)
        ad = trace.ad()
        print(f"  submitted as job {job}; input spooled")
        print(f"map: the CE maps you to the local account {ad.get('Owner')!r}")
        if args.debug:
            print(ad)
        try:
            _follow(trace, lambda a: explain(a, schedd.health()))
        finally:
            _clean_up(schedd, job, trace.status)


def _clean_up(schedd: ScheddClient, job: str, status: int) -> None:
    """The test job out of the CE's queue (its output fetched, or the trace given up)."""
    from htgrid.net import Jobs
    from htgrid.queue import JobAction

    try:
        if status == 4:
            schedd.edit(Jobs.of([job]), {"LeaveJobInQueue": "false"})
        else:
            schedd.act(JobAction.Remove, Jobs.of([job]), "htgrid ce trace is done with it")
    except HTGridError as err:
        print(f"  (the test job {job} could not be taken out of the CE's queue: {err})")


def _submit(schedd: ScheddClient, attributes: list[str]) -> str:
    cluster = ClassAd()
    ad = ClassAd(
        {
            "JobUniverse": 5,
            "Cmd": "/usr/bin/env",
            "TransferExecutable": False,
            "Arguments": "",
            "Out": "_ce_trace.out",
            "Err": "_ce_trace.err",
            "ShouldTransferFiles": "YES",
            "WhenToTransferOutput": "ON_EXIT",
            "JobStatus": 5,
            "HoldReason": "Spooling input data files",
            "HoldReasonCode": _SPOOLING,
            "HoldReasonSubCode": 0,
        }
    )
    # Kept in the queue once done until its output is fetched (condor_ce_trace's own).
    ad["LeaveJobInQueue"] = ExprTree("JobStatus == 4")
    for text in attributes:
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise _Failed("submit", f"-a {text!r} is not NAME=VALUE", "write -a NAME=VALUE")
        ad[name.strip()] = value.strip()  # a string, as condor_ce_trace quotes it
    try:
        (job,) = schedd.submit_new(cluster, [ad])
        schedd.put_input(job, _empty_tar())
    except HTGridError as err:
        raise _Failed(
            "submit",
            f"the CE refused the job: {err}",
            "the CE's administrator can read why in its SchedLog; a refusal to a mapped user "
            "is the map file's (its unified map file, its ban list)",
        ) from None
    return str(job)


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:"):
        pass
    return buffer.getvalue()


def _follow(trace: _Trace, analysis: Callable[[ClassAd], list[str]]) -> None:
    print("route: the CE's job router takes the job...")

    def routed(ad: ClassAd) -> str | None:
        if ad.get("JobStatus") in (2, 4):
            return str(ad.get("RoutedToJobId") or "?")
        return str(ad["RoutedToJobId"]) if ad.get("RoutedToJobId") else None

    try:
        dest = trace.until(
            "route",
            routed,
            "the CE's job router did not route the job",
            "read why above: add a route that takes such jobs, or send what a route asks "
            "for (`-a queue=...`, `-a xcount=...`); the CE's `htgrid job_router_info` and "
            "`htgrid router_q -S` say more",
        )
    except _Failed as failed:
        ad = trace.ad()
        for line in analysis(ad):
            print(f"  {line}")
        raise failed from None
    print(f"  routed as job {dest} on the CE")
    print("run: the routed job runs...")
    trace.until(
        "run",
        lambda ad: ad.get("JobStatus") in (2, 4) or None,
        "the routed job did not run",
        "the site's batch system did not start it: the CE's `htgrid q -better-analyze "
        f"{dest}` says what its grid manager knows",
    )
    print("output: the job completes and its output comes back...")
    trace.until(
        "output",
        lambda ad: ad.get("JobStatus") == 4 or None,
        "the job did not complete",
        "it may wait in the batch system's queue: raise --timeout, or look at the routed "
        f"job {dest} on the CE",
    )
    try:
        tar = trace.schedd.get_output(trace.job)
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
            member = archive.extractfile("_ce_trace.out")
            text = member.read().decode(errors="replace") if member is not None else ""
    except (HTGridError, KeyError, tarfile.TarError) as err:
        raise _Failed(
            "output",
            f"its output could not be fetched: {err}",
            "the CE's SchedLog says why its sandbox is not there",
        ) from None
    if not text.strip():
        raise _Failed("output", "the job's output is empty", "look at the routed job's stderr")
    if trace.debug:
        sys.stdout.write(text)
    print(f"  the job ran and printed {len(text.splitlines())} lines")
