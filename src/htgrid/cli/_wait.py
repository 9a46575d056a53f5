"""`htgrid wait`: condor_wait, with a progress display.

    $ htgrid wait job.log            # every job in the log
    $ htgrid wait job.log 12         # the jobs of cluster 12 in that log
    $ htgrid wait 12.0 -wait 60      # the job's own log (asked of the daemon)

It reads the user event log: a job is done once its log has a 005 (terminated) or 009
(aborted) event, and a late materialization cluster (035, cluster submitted) once it
also has its 036 (cluster removed), as its jobs are made over time. In a terminal it shows a live count of done, running, idle and held
jobs; in a pipe it prints only the outcome, as condor_wait does ("All jobs done." or
"Time expired."). A job without a log is followed through the daemon instead.

Exit status: 0 all done, 1 time expired (or no such job, or the daemon is not running),
2 bad usage (no such log, a log that is not an event log).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from htgrid.cli._common import EXIT_NO, EXIT_OK, client, is_terminal
from htgrid.errors import UsageError
from htgrid.eventlog import EventLogReader, LoggedEvent
from htgrid.queue import JobId, JobNotFound

__all__ = ["JobTally", "register"]

_ID: Final = re.compile(r"\d+(\.\d+)?")
_POLL: Final = 0.1
_CLUSTER_SUBMIT: Final = 35  # a factory's cluster: its jobs come over time...
_CLUSTER_REMOVE: Final = 36  # ...until this one


def register(commands: Any) -> None:
    """Add `wait` to the top-level parser."""
    wait = commands.add_parser(
        "wait",
        help="wait for jobs to finish (condor_wait)",
        description="Wait until the jobs in a user event log, or the given jobs, are done.",
    )
    wait.add_argument("what", metavar="LOGFILE|ID", help="an event log, a job id or a cluster")
    wait.add_argument("job", nargs="?", metavar="ID|CLUSTER", help="only this job or cluster")
    wait.add_argument(
        "-wait", "--wait", type=float, metavar="SECONDS", help="give up after this long"
    )
    wait.add_argument("-num", "--num", type=int, metavar="N", help="return once N jobs are done")
    wait.set_defaults(handler=_wait)


@dataclass
class JobTally:
    """What the log said of each job so far."""

    job_filter: Callable[[JobId], bool]
    states: dict[JobId, str] = field(default_factory=dict)  # idle running held done
    factories: set[int] = field(default_factory=set)  # clusters with jobs still to come

    def feed(self, event: LoggedEvent) -> None:
        if not self.job_filter(event.job_id):
            return
        if event.number == _CLUSTER_SUBMIT:
            self.factories.add(event.job_id.cluster)
        elif event.number == _CLUSTER_REMOVE:
            self.factories.discard(event.job_id.cluster)
        state = {0: "idle", 1: "running", 4: "idle", 5: "done", 9: "done", 12: "held", 13: "idle"}
        new = state.get(event.number)
        if new is not None and self.states.get(event.job_id) != "done":
            self.states[event.job_id] = new

    def count(self, state: str) -> int:
        return sum(1 for s in self.states.values() if s == state)

    def finished(self, num: int | None) -> bool:
        done = self.count("done")
        if num is not None:
            return done >= num
        return bool(self.states) and done == len(self.states) and not self.factories

    def summary(self) -> str:
        return (
            f"{self.count('done')} of {len(self.states)} done: {self.count('running')} running, "
            f"{self.count('idle')} idle, {self.count('held')} held"
        )


def _filter(text: str | None) -> Callable[[JobId], bool]:
    if text is None:
        return lambda jid: True
    if not _ID.fullmatch(text):
        raise UsageError(f"{text!r} is not a job id (12.0) or a cluster (12)")
    if "." in text:
        wanted = JobId.parse(text)
        return lambda jid: jid == wanted
    cluster = int(text)
    return lambda jid: jid.cluster == cluster


def _log_of(text: str) -> str | None:
    """The event log of the job or cluster `text` (None when the jobs have no log)."""
    spec = (
        f"ClusterId == {text}"
        if "." not in text
        else "ClusterId == {} && ProcId == {}".format(*text.split("."))
    )
    with client() as schedd:
        ads = schedd.query(spec, ["UserLog", "Iwd"]) + schedd.history(spec, ["UserLog", "Iwd"])
    if not ads:
        raise JobNotFound(f"no job {text} in the queue or its history")
    logs = set()
    for ad in ads:
        log, iwd = ad.get("UserLog"), ad.get("Iwd")
        if isinstance(log, str) and log:
            logs.add(os.path.join(iwd, log) if isinstance(iwd, str) else log)
    if len(logs) > 1:
        raise UsageError(
            f"the jobs of {text} write to {len(logs)} logs; wait for one log at a time"
        )
    return logs.pop() if logs else None


def _wait(args: argparse.Namespace) -> int:
    what = args.what
    if _ID.fullmatch(what) and not os.path.exists(what):
        if args.job is not None:
            raise UsageError("give one job id or cluster")
        log = _log_of(what)
        job_filter = _filter(what)
    else:
        log = what
        job_filter = _filter(args.job)
    deadline = None if args.wait is None else time.monotonic() + args.wait
    tally = JobTally(job_filter)
    if log and log == what and not os.path.exists(log):
        raise UsageError(f"{log}: no such event log")
    follow = _follow_log(log, tally) if log else _follow_queue(what, tally)
    show = _Display(is_terminal())
    try:
        while True:
            follow()
            show.update(tally)
            if tally.finished(args.num):
                show.close()
                print("All jobs done.")
                return EXIT_OK
            if deadline is not None and time.monotonic() >= deadline:
                show.close()
                print("Time expired.")
                return EXIT_NO
            time.sleep(_POLL)
    finally:
        show.close()


def _follow_log(path: str, tally: JobTally) -> Callable[[], None]:
    reader = EventLogReader(path)
    started = time.monotonic()

    def follow() -> None:
        try:
            events = reader.read()
        except FileNotFoundError:
            # The daemon writes a job's first event moments after the submit.
            if time.monotonic() - started > 10:
                raise UsageError(f"{path}: no such event log") from None
            return
        except IsADirectoryError:
            raise UsageError(f"{path} is a directory, not an event log") from None
        for event in events:
            tally.feed(event)

    return follow


def _follow_queue(text: str, tally: JobTally) -> Callable[[], None]:
    spec = (
        f"ClusterId == {text}"
        if "." not in text
        else "ClusterId == {} && ProcId == {}".format(*text.split("."))
    )
    state = {1: "idle", 2: "running", 3: "done", 4: "done", 5: "held", 6: "running", 7: "running"}
    last = [0.0]

    def follow() -> None:
        if time.monotonic() - last[0] < 0.5:
            return
        last[0] = time.monotonic()
        with client() as schedd:
            queued = schedd.query(spec, ["JobStatus"])
            gone = schedd.history(spec, ["JobStatus"])
        for ad in queued:
            status = ad.get("JobStatus")
            known = state.get(status, "idle") if isinstance(status, int) else "idle"
            tally.states[JobId(ad["ClusterId"], ad["ProcId"])] = known
        # The history last: a job that left the queue between the two reads is in both,
        # and done.
        for ad in gone:
            tally.states[JobId(ad["ClusterId"], ad["ProcId"])] = "done"

    return follow


class _Display:
    """A live line in a terminal; nothing in a pipe."""

    def __init__(self, live: bool) -> None:
        self._progress: Any = None
        self._task: Any = None
        if live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("waiting"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=None)

    def update(self, tally: JobTally) -> None:
        if self._progress is None:
            return
        detail = f"{tally.count('running')} running, {tally.count('idle')} idle, {tally.count('held')} held"
        self._progress.update(
            self._task,
            total=len(tally.states) or None,
            completed=tally.count("done"),
            description=detail,
        )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            sys.stdout.flush()
