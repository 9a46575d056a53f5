"""Helpers of the daemon's tests: a pool per module, submitting, waiting, reading logs."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import htcondor2

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool, run_cli, wait_for

__all__ = [
    "FAST",
    "PersonalPool",
    "ad_of",
    "event_types",
    "finished",
    "run_cli",
    "submit",
    "wait_for",
]

# Knobs that keep the tests quick: policies every half second, 2 s to die after SIGTERM.
FAST: dict[str, Any] = {"periodic_interval": 0.5, "kill_grace": 2.0, "fsync": False}


def submit(pool: PersonalPool, directory: Path, text: str, *extra: str) -> int:
    """Write `text` as a submit file in `directory`, submit it from there; the cluster."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "job.sub"
    path.write_text(text)
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        rc, out, err = run_cli(pool.home, "submit", str(path), *extra)
    finally:
        os.chdir(cwd)
    assert rc == 0, err
    return int(out.strip().rsplit(" ", 1)[-1].rstrip("."))


def ad_of(schedd: ScheddClient, job: str, attrs: Sequence[str] | None = None) -> ClassAd | None:
    """The job's ad from the queue, else from the history, else None."""
    cluster, proc = job.split(".")
    constraint = f"ClusterId == {cluster} && ProcId == {proc}"
    found = schedd.query(constraint, attrs) or schedd.history(constraint, attrs)
    return found[0] if found else None


def finished(schedd: ScheddClient, cluster: int, procs: int) -> list[ClassAd] | None:
    """The history ads of a cluster once all its procs have left the queue."""
    ads = schedd.history(f"ClusterId == {cluster}")
    if len(ads) < procs:
        return None
    return sorted(ads, key=lambda ad: ad["ProcId"])


def event_types(log: Path, job: str | None = None) -> list[int]:
    """The event numbers of a log (of one job), read by HTCondor's own reader."""
    return [
        int(event.type)
        for event in htcondor2.JobEventLog(str(log)).events(stop_after=0)
        if job is None or f"{event.cluster}.{event.proc}" == job
    ]


def events(log: Path) -> Iterator[htcondor2.JobEvent]:
    yield from htcondor2.JobEventLog(str(log)).events(stop_after=0)
