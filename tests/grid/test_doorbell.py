"""The queue daemon rings the grid manager's doorbell after it changes the queue: a submit
or an `htgrid rm` reaches the grid manager at once, not at its next timed read."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

from htgrid.grid import GridManager, GridManagerConfig
from htgrid.queue.doorbell import Doorbell, ring
from htgrid.testing import PersonalPool, run_cli

# Far longer than any wait below: only a ring can wake the grid manager in time.
NEVER = 600.0


def test_a_ring_with_no_listener_is_harmless(tmp_path: Path) -> None:
    path = tmp_path / "wake"
    assert ring(path) is False
    assert not path.exists()


def test_rings_wake_the_listener_once_and_it_can_stop(tmp_path: Path) -> None:
    path = tmp_path / "wake"
    path.write_text("a stray file where the pipe goes\n")

    async def main() -> None:
        bell = Doorbell(path)
        bell.open()
        assert stat.S_ISFIFO(os.stat(path).st_mode)
        try:
            assert all(ring(path) for _ in range(3))
            await asyncio.wait_for(bell.wait(), 5)
            # The three rings were one: nothing is left to wake for.
            waiter = asyncio.ensure_future(bell.wait())
            done, _ = await asyncio.wait({waiter}, timeout=0.2)
            assert not done
            ring(path)
            await asyncio.wait_for(waiter, 5)
        finally:
            bell.close()
        assert ring(path) is False  # nobody listens now
        assert stat.S_ISFIFO(os.stat(path).st_mode)  # left for the next grid manager

    asyncio.run(main())


def _grid_job(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sub").write_text(
        "universe = grid\ngrid_resource = batch fork\nexecutable = /bin/sleep\n"
        "arguments = 300\ntransfer_executable = false\nqueue\n"
    )
    return work / "job.sub"


def test_the_grid_manager_hears_of_a_submit_and_a_removal_at_once(tmp_path: Path) -> None:
    pool = PersonalPool(tmp_path / "pool", fsync=False, daemons=("MASTER", "SCHEDD"))
    config = GridManagerConfig(feed_interval=NEVER, poll_interval=1.0, fsync=False)
    with pool:
        job_file = _grid_job(tmp_path / "work")

        async def main() -> None:
            manager = GridManager(pool.home, config=config)
            stop = asyncio.Event()
            task = asyncio.create_task(manager.run(stop))
            try:
                await asyncio.wait_for(manager.ready.wait(), 30)
                await asyncio.sleep(0.3)  # the first read of the feed is behind it
                status, _, err = await asyncio.to_thread(
                    run_cli, pool.home, "submit", str(job_file)
                )
                assert status == 0, err
                began = time.monotonic()
                while not manager.jobs:
                    assert time.monotonic() - began < 20, "the grid manager never heard"
                    await asyncio.sleep(0.05)
                (job_id,) = manager.jobs
                status, _, err = await asyncio.to_thread(
                    run_cli, pool.home, "rm", f"{job_id.cluster}.{job_id.proc}"
                )
                assert status == 0, err
                with pool.client() as schedd:
                    began = time.monotonic()
                    while schedd.query("true", ["JobStatus"]):
                        assert time.monotonic() - began < 20, "the removal never reached it"
                        await asyncio.sleep(0.1)
            finally:
                stop.set()
                await asyncio.wait_for(task, 60)

        asyncio.run(main())
