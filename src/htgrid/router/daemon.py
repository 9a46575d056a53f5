"""The job router's process (HTCondor's condor_job_router): JOB_ROUTER in DAEMON_LIST.

    htgrid job_router --home $HTGRID_HOME        # or: run_router(home)

It opens the pool's queue as the grid manager does, runs a full pass (`JobRouter.cycle`)
each JOB_ROUTER_POLLING_PERIOD seconds, routes new jobs (`JobRouter.route_new`) whenever
the schedd rings its doorbell (`<spool>/jobrouter/wake`) in between, and rings the grid
manager's after it submits or removes. A full pass keeps the pairs in step: run at each
ring, while thousands of jobs arrive, it was most of the router's time. The pairs it
reads are those the queue's change feed says changed; its position in the feed is in
`<spool>/jobrouter/feed.seq`, which the schedd keeps the feed for. Its hooks run beside
the passes (`HookRunner`): a slow one holds up its own job only.
htgrid.conf is read again when it changes or on SIGHUP (routes reloaded on reconfig).
One router per queue (`<spool>/jobrouter/lock`): a second exits with status 3. kill -9
is safe at any moment: the next one adopts the routed jobs from the queue.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Final

from htgrid._aio import on_parent_gone, take_sighup
from htgrid._files import single_instance, write_atomic
from htgrid._privsep import daemon_umask
from htgrid.classad import preload_functions
from htgrid.errors import HTGridError
from htgrid.pool import CONFIG_NAME, HomeLayout
from htgrid.queue import JobQueue
from htgrid.queue.doorbell import Doorbell, ring
from htgrid.router._hooks import HookRunner
from htgrid.router._router import JobRouter
from htgrid.router._routes import RouterConfig, RouterError

__all__ = ["run_router"]

log = logging.getLogger("htgrid.router")

#: Hooks that may run at once (HTCondor's router starts each when due, with no bound).
HOOK_WORKERS: Final = 8


def _config_stamp(home: Path) -> float:
    try:
        return (home / CONFIG_NAME).stat().st_mtime
    except OSError:
        return 0.0


async def _serve(home: Path, stop: asyncio.Event, reload: asyncio.Event) -> None:
    layout = HomeLayout(home)
    layout.jobrouter_dir.mkdir(parents=True, exist_ok=True)
    config = RouterConfig.load(home)
    for problem in config.problems:
        log.error("job router: %s", problem)
    stamp = _config_stamp(home)
    queue = await asyncio.to_thread(JobQueue.open, layout.spool, fsync=True, check=False)
    bell = Doorbell(layout.jobrouter_doorbell)
    try:
        bell.open()
    except OSError as err:
        log.warning("job router: no doorbell at %s: %s", bell.path, err)

    def wake_gridmanager() -> None:
        ring(layout.gridmanager_doorbell)

    # Hooks run beside the passes; one that ends rings this router for the pass that
    # takes its result.
    def wake_router() -> None:
        ring(layout.jobrouter_doorbell)

    runner = HookRunner(workers=HOOK_WORKERS, wake=wake_router)
    router = JobRouter(queue, config, after_change=wake_gridmanager, hook_runner=runner)
    log.info(
        "job router %s: routes %s", config.name, ", ".join(r.name for r in config.routes) or "none"
    )
    loop = asyncio.get_running_loop()
    full_due = 0.0  # when the next full pass is due
    saved = -1  # the feed position last saved
    try:
        while not stop.is_set():
            if reload.is_set() or _config_stamp(home) != stamp:
                reload.clear()
                full_due = 0.0
                stamp = _config_stamp(home)
                try:
                    router.reconfig(RouterConfig.load(home))
                    log.info(
                        "job router: routes reloaded: %s",
                        ", ".join(r.name for r in router.config.routes),
                    )
                    for problem in router.config.problems:
                        log.error("job router: %s", problem)
                except HTGridError as err:
                    log.error("job router: the new configuration is refused, the old kept: %s", err)
            try:
                if loop.time() >= full_due:
                    full_due = loop.time() + router.config.polling_period
                    await asyncio.to_thread(router.cycle)
                else:
                    await asyncio.to_thread(router.route_new)
            except HTGridError as err:
                log.error("job router: the pass failed: %s", err)
            if router.feed_position != saved:
                # The schedd trims the feed up to the position of its every follower: what
                # the router did not read, it would find only by reading every routed job.
                saved = router.feed_position
                try:
                    write_atomic(layout.jobrouter_feed_file, f"{saved}\n".encode("ascii"))
                except OSError as err:
                    log.warning("job router: cannot save its feed position: %s", err)
            waits = [
                asyncio.ensure_future(bell.wait()),
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(reload.wait()),
            ]
            try:
                await asyncio.wait(
                    waits,
                    timeout=max(0.0, full_due - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in waits:
                    waiter.cancel()
    finally:
        bell.close()
        await asyncio.to_thread(queue.close)


def run_router(home: str | os.PathLike[str], *, parent_fd: int | None = None) -> int:
    """Run the router until SIGTERM or SIGINT: 0 after a clean stop, 3 if another runs,
    1 if it cannot start (a bad configuration, a queue that cannot be opened)."""
    home = Path(home)

    async def main() -> None:
        stop = asyncio.Event()
        reload = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        take_sighup(loop, reload.set)
        if parent_fd is not None:

            def parent_gone() -> None:
                log.warning("the master that started this job router is gone: stopping")
                stop.set()

            on_parent_gone(loop, parent_fd, parent_gone)
        await _serve(home, stop, reload)

    daemon_umask()
    preload_functions()
    try:
        lock = HomeLayout(home).jobrouter_dir / "lock"
        with single_instance(
            lock, lambda: RouterError(f"another job router runs on {lock.parent}")
        ):
            asyncio.run(main())
    except RouterError as err:
        log.error("%s", err)
        return 3 if "another job router" in str(err) else 1
    except HTGridError as err:
        log.error("job router: %s", err)
        return 1
    return 0
