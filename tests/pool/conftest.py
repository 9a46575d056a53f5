"""A whole personal pool per module: queue, collector, negotiator and an execute node."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import htcondor2  # type: ignore[import-untyped]
import pytest

from htgrid.net import ScheddClient
from htgrid.testing import WHOLE_POOL, PersonalPool, run_cli

# Quick cycles and short leases, so that the tests wait for seconds, not minutes.
FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "NUM_CPUS": 20,
    "UPDATE_INTERVAL": 10,
    "SCHEDD_INTERVAL": 1,
    "ALIVE_INTERVAL": 2,
    "MAX_CLAIM_ALIVES_MISSED": 3,
    "MASTER_BACKOFF_CONSTANT": 0.5,
}


# Everything but the grid manager, another component's: these tests check the ads it
# would read (GridResource filled in by matchmaking), and nothing submits their grid jobs.
DAEMONS = tuple(d for d in WHOLE_POOL if d != "GRIDMANAGER")


def whole_pool(home: Path, **config: object) -> PersonalPool:
    return PersonalPool(home, kill_grace=2, fsync=False, daemons=DAEMONS, config={**FAST, **config})


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with whole_pool(tmp_path_factory.mktemp("pool")) as running:
        yield running


@pytest.fixture
def schedd(pool: PersonalPool) -> Iterator[ScheddClient]:
    with pool.client() as client:
        yield client


def submit(home: Path, directory: Path, text: str) -> int:
    """Submit `text` from `directory` to the pool in `home`, as a user in a shell there."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "job.sub").write_text(text)
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        rc, out, err = run_cli(home, "submit", "job.sub")
    finally:
        os.chdir(cwd)
    assert rc == 0, err
    return int(out.strip().rsplit(" ", 1)[-1].rstrip("."))


def events(log: Path) -> dict[str, list[int]]:
    """The event numbers of each job in a log, read by HTCondor's own reader."""
    out: dict[str, list[int]] = {}
    for event in htcondor2.JobEventLog(str(log)).events(stop_after=0):
        out.setdefault(f"{event.cluster}.{event.proc}", []).append(int(event.type))
    return out


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# A job that says hello as `name` into `name.out`, with `extra` submit lines.
HELLO_JOB = """executable = hello.sh
arguments = {name}
should_transfer_files = YES
output = {name}.out
log = {name}.log
request_memory = 16
{extra}
queue
"""


def ran(schedd: ScheddClient, cluster: int) -> bool:
    """Whether the (one-job) cluster ran and left the queue."""
    return len(schedd.history(f"ClusterId == {cluster}", ["ExitCode"])) == 1
