"""What the grid manager tests share: a queue with grid jobs in it, and a running manager."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import htgrid.classad as classad
from htgrid.grid import GridManager, GridManagerConfig, GridType
from htgrid.queue import Identity, JobId, JobNotFound, JobQueue
from htgrid.submit import SubmitDescription

HERE = Path(__file__).parent
GAHP_EXT = HERE / "gahp_ext.py"
ROOT = Identity("root")

#: The stock batch GAHP, answering status from the batch system at once.
STOCK_GAHP = (
    sys.executable,
    "-m",
    "htgrid.cli",
    "gahp",
    "batch",
    "--status-max-age",
    "0.2",
    "--status-window",
    "0.05",
)

#: Everything fast: tests wait seconds, not minutes.
FAST = GridManagerConfig(
    poll_interval=0.3,
    feed_interval=0.1,
    periodic_interval=0.3,
    down_ping_interval=0.3,
    min_ping_interval=0.2,
    retry_initial=0.2,
    retry_max=1.0,
    gahp_call_timeout=60.0,
    lost_submit_grace=1.0,
    fsync=False,
    batch_gahp=STOCK_GAHP,
)


def ext_gahp(*options: str, control: Path | None = None) -> tuple[str, ...]:
    """The test GAHP (stock + BLAH_JOB_FIND, a flaky back end...), see gahp_ext.py."""
    argv = [sys.executable, str(GAHP_EXT), *options]
    if control is not None:
        argv += ["--control", str(control)]
    return tuple(argv)


@dataclass
class Grid:
    """A state directory with a queue, and a directory jobs are submitted from."""

    home: Path
    work: Path
    queue: JobQueue

    def submit(
        self, body: str, count: int = 1, *, resource: str = "batch fork", universe: str = "grid"
    ) -> list[JobId]:
        """Queue `count` procs of a grid job (or of `universe`); `body` holds the submit
        lines after universe."""
        head = f"grid_resource = {resource}\n" if universe == "grid" else ""
        text = f"universe = {universe}\n{head}{body}\nqueue {count}\n"
        desc = SubmitDescription.from_text(text, cwd=str(self.work))
        with self.queue.transaction(ROOT) as tx:
            cluster = tx.new_cluster()
            jobs = list(desc.jobs(cluster, owner="root", qdate=int(time.time())))
            for job in jobs:
                job.ad["Owner"] = "root"
            tx.set_cluster_ad(cluster, jobs[0].ad)
            for job in jobs:
                tx.new_proc(cluster, job.ad)
        return [JobId(cluster, proc) for proc in range(count)]

    def ad(self, job_id: JobId) -> classad.ClassAd:
        """The job's ad, in the queue or else in the history."""
        try:
            return self.queue.get(job_id)
        except JobNotFound:
            found = self.queue.history(f"ClusterId == {job_id.cluster} && ProcId == {job_id.proc}")
            if not found:
                raise
            return found[0]

    def in_queue(self, job_id: JobId) -> bool:
        try:
            self.queue.get(job_id)
        except JobNotFound:
            return False
        return True

    def log(self, name: str = "job.log") -> str:
        path = self.work / name
        return path.read_text() if path.exists() else ""


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    queue = JobQueue.open(home / "spool", fsync=False)
    # The jobs here are root's (the tests run as root): a grid manager run as a process
    # (`htgrid gridmanager`, which holds to the pool's owner policy) lets them run.
    (home / "htgrid.conf").write_text("ALLOW_ROOT_JOBS = true\n")
    try:
        yield Grid(home, work, queue)
    finally:
        queue.close()


@contextlib.asynccontextmanager
async def running(
    grid: Grid,
    config: GridManagerConfig = FAST,
    grid_types: Mapping[str, GridType[Any]] | None = None,
) -> AsyncIterator[GridManager]:
    """A grid manager over `grid`'s queue, in this event loop, stopped on exit (its grid
    types `grid_types` when given)."""
    manager = GridManager(grid.home, config=config, grid_types=grid_types)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    ready = asyncio.create_task(manager.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    """Poll `check` until it gives something true; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def manager_scans(grid: Grid) -> int:
    """The queue scans the grid managers' log (`--log home/gridmanager.log`) shows: one
    as each comes up, once it handles SIGTERM (a manager killed while importing has none)."""
    log = grid.home / "gridmanager.log"
    return log.read_text(errors="replace").count("grid jobs after the scan") if log.exists() else 0


def unset(ad: classad.ClassAd, name: str) -> bool:
    """Whether the attribute is absent or undefined (HTCondor's way to clear one)."""
    return name not in ad or ad.get(name) is classad.Value.Undefined


def with_gahp(argv: tuple[str, ...], **changes: object) -> GridManagerConfig:
    return replace(FAST, batch_gahp=argv, **changes)  # type: ignore[arg-type]


def in_slurm(native_id: str) -> bool:
    """Whether Slurm's queue lists the job (pending, running or ending)."""
    done = subprocess.run(
        ["squeue", "-h", "-j", native_id, "-o", "%T"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and bool(done.stdout.strip())


def flaky_control(grid: Grid, *switches: str) -> Path:
    """The control directory of gahp_ext.py's `flaky` back end, `switches` turned on."""
    control = grid.work / "control"
    control.mkdir()
    for switch in switches:
        (control / switch).touch()
    return control
