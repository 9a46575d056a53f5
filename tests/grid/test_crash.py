"""kill -9 of the grid manager or of its GAHP server at seeded random moments.

Each job appends a line to its own marker file when it starts, so the marker counts its
executions in the batch system. Whatever the kills, every job must end Completed, and
must have run exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable

import pytest

from htgrid.grid import GridManager
from htgrid.queue import JobId, JobStatus

from ._harness import (
    STOCK_GAHP,
    Grid,
    ext_gahp,
    manager_scans,
    running,
    wait_for,
    with_gahp,
)

JOBS = 12


def _submit(grid: Grid, seconds: float) -> list[JobId]:
    return _submit_to(grid, "batch fork", seconds)


def _submit_to(grid: Grid, resource: str, seconds: float) -> list[JobId]:
    marker = grid.work / "marker"
    return grid.submit(
        "executable = /bin/sh\n"
        f"arguments = \"-c 'echo $$ >> {marker}.$(Process); sleep {seconds}'\"\n"
        "log = job.log",
        count=JOBS,
        resource=resource,
    )


def _check(grid: Grid, ids: list[JobId]) -> None:
    log = grid.log()
    for job_id in ids:
        runs = (grid.work / f"marker.{job_id.proc}").read_text().split()
        assert len(runs) == 1, f"job {job_id} ran {len(runs)} times"
        ad = grid.ad(job_id)
        assert ad["JobStatus"] == JobStatus.COMPLETED, job_id
        assert ad["ExitCode"] == 0
        # 027 follows the commit of the batch job id: at most once per submission.
        assert log.count(f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)") <= 1


def _start_manager(grid: Grid, gahp: tuple[str, ...]) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "htgrid.cli", "gridmanager",
        "--home", str(grid.home),
        "--poll-interval", "0.3",
        "--feed-interval", "0.1",
        "--batch-gahp", shlex.join(gahp),
        "--set", "lost_submit_grace=1",
        "--log", str(grid.home / "gridmanager.log"),
    ]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _wait_scan(grid: Grid, before: int) -> None:
    """Until the log shows a scan after the `before`-th (at most 60 s)."""
    deadline = time.monotonic() + 60
    while manager_scans(grid) <= before and time.monotonic() < deadline:
        time.sleep(0.05)


# The test GAHP (gahp_ext.py) with --finish-submits behaves as the stock one now does:
# when the grid manager dies, the submits already started are finished and recorded.
FINISHING = ext_gahp("--finish-submits")


# More seeds for a stress run: HTGRID_CRASH_SEEDS=10,11,12 pytest tests/grid/test_crash.py
_MORE = [
    pytest.param(int(seed), FINISHING, 3.0, id=f"find-seed{seed}")
    for seed in os.environ.get("HTGRID_CRASH_SEEDS", "").split(",")
    if seed.strip().isdigit()
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("seed", "gahp", "seconds"),
    [
        *_MORE,
        pytest.param(1, FINISHING, 3.0, id="find-seed1"),
        pytest.param(2, FINISHING, 3.0, id="find-seed2"),
        pytest.param(3, ext_gahp("--finish-submits", "--no-find"), 12.0, id="no-find-seed3"),
        pytest.param(6, STOCK_GAHP, 3.0, id="stock-seed6"),
        pytest.param(7, STOCK_GAHP, 3.0, id="stock-seed7"),
    ],
)
def test_kill_9_of_the_grid_manager(
    grid: Grid, seed: int, gahp: tuple[str, ...], seconds: float
) -> None:
    """With BLAH_JOB_FIND any job may be caught; without it, recovery by resubmitting with
    the same ClientJobId needs the job still running when the manager comes back."""
    rng = random.Random(seed)
    ids = _submit(grid, seconds)
    kills = 0
    scans = manager_scans(grid)
    manager = _start_manager(grid, gahp)
    try:
        for _ in range(8):
            time.sleep(rng.uniform(0.2, 1.6))
            if not any(map(grid.in_queue, ids)):
                break
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            kills += 1
            scans = manager_scans(grid)
            manager = _start_manager(grid, gahp)
        deadline = time.monotonic() + 120
        while any(map(grid.in_queue, ids)):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the jobs did not finish"
            time.sleep(0.1)
    finally:
        # A clean stop (exit 0) is asked of a manager that is up: one just restarted may
        # still be importing, before it handles SIGTERM.
        _wait_scan(grid, scans)
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
    assert status == 0
    assert kills >= 3
    _check(grid, ids)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [4, 5])
def test_kill_9_of_the_gahp_server(grid: Grid, seed: int) -> None:
    """Kills at random moments once the jobs are submitted: lost polls, lost cancels."""
    rng = random.Random(seed)
    ids = _submit(grid, 6.0)
    config = with_gahp(STOCK_GAHP)

    async def main() -> None:
        async with running(grid, config) as manager:
            await wait_for(
                "the submits", lambda: all(grid.ad(i).get("GridJobSubmitTime") for i in ids)
            )
            killed: set[int] = set()
            while len(killed) < 4 and any(map(grid.in_queue, ids)):
                await asyncio.sleep(rng.uniform(0.1, 1.0))
                pid = _kill_gahp(manager, killed)
                if pid is not None:
                    killed.add(pid)
            await wait_for(
                "the jobs to finish", lambda: not any(map(grid.in_queue, ids)), timeout=120
            )
            assert len(killed) >= 3
            assert manager.gahps["batch"].starts >= len(killed)

    run(main())
    _check(grid, ids)


@pytest.mark.timeout(120)
def test_kill_9_of_the_gahp_server_during_submits(grid: Grid) -> None:
    """Submits lost with their server are looked up by tag, and sent again only if absent."""
    control = grid.work / "control"
    control.mkdir()
    (control / "submit-slow").touch()
    ids = _submit_to(grid, "batch flaky", 0.5)
    config = with_gahp(ext_gahp(control=control))

    async def main() -> None:
        async with running(grid, config) as manager:
            await wait_for(
                "submits in flight", lambda: len(list(control.glob("submitting.*"))) == JOBS
            )
            (control / "submit-slow").unlink()
            assert _kill_gahp(manager, set()) is not None
            await wait_for(
                "the jobs to finish", lambda: not any(map(grid.in_queue, ids)), timeout=60
            )
            assert manager.gahps["batch"].starts == 2

    run(main())
    _check(grid, ids)


def _kill_gahp(manager: GridManager, already: set[int]) -> int | None:
    """SIGKILL the live batch GAHP server (not one already killed); its pid."""
    handle = manager.gahps.get("batch")
    client = None if handle is None else handle._client
    if client is None or not client.alive or client.pid is None or client.pid in already:
        return None
    os.kill(client.pid, signal.SIGKILL)
    return client.pid


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]
