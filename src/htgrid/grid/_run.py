"""Running the grid manager in this process (`htgrid gridmanager`, as the master starts
it): signals, the master's pipe, condor_reconfig, the exit status."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from htgrid._aio import on_parent_gone, take_sighup
from htgrid._gc import tune_gc
from htgrid._privsep import ALLOW_ROOT_JOBS, OwnerPolicy, daemon_umask
from htgrid.classad import preload_functions
from htgrid.errors import HTGridError
from htgrid.gahp import Clock
from htgrid.grid._config import GridManagerConfig
from htgrid.grid._errors import AlreadyRunning
from htgrid.grid.manager import GridManager, Publish
from htgrid.pool import ConfigFile

__all__ = ["run_gridmanager"]

log = logging.getLogger("htgrid.grid")


def run_gridmanager(
    home: str | os.PathLike[str],
    *,
    queue_dir: str | os.PathLike[str] | None = None,
    config: GridManagerConfig | None = None,
    clock: Clock | None = None,
    parent_fd: int | None = None,
    publish: Publish | None = None,
) -> int:
    """Run a grid manager in this process until SIGTERM or SIGINT; the exit status.

    0 after a clean stop, 3 if another grid manager already runs on `home`, 1 if it
    could not start (the queue cannot be opened...). With `parent_fd` (the master's
    pipe) it also stops when that pipe closes: a master killed -9 takes it along, as
    it takes its other daemons, instead of leaving it to run the queue alone.
    """

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        if parent_fd is not None:

            def parent_gone() -> None:
                log.warning("the master that started this grid manager is gone: stopping")
                stop.set()

            on_parent_gone(loop, parent_fd, parent_gone)
        base = config or GridManagerConfig()
        settings = base.with_knobs(Path(home))
        # Whose jobs run, and as whom: this process's user (root: each job's as its owner).
        allow_root = ConfigFile.read(Path(home)).flag(ALLOW_ROOT_JOBS, False)
        manager = GridManager(
            home,
            queue_dir=queue_dir,
            config=settings,
            clock=clock,
            policy=OwnerPolicy(allow_root=allow_root),
            publish=publish,
        )
        rereads: set[asyncio.Task[None]] = set()

        async def reread() -> None:
            try:
                new = await asyncio.to_thread(base.with_knobs, Path(home))
            except HTGridError as err:
                log.error("reconfig: htgrid.conf is refused, the settings in force kept: %s", err)
                return
            manager.reconfig(new)

        def on_sighup() -> None:
            task = asyncio.create_task(reread(), name="reconfig")
            rereads.add(task)
            task.add_done_callback(rereads.discard)

        take_sighup(loop, on_sighup)  # condor_reconfig (the master passes it on)
        await manager.run(stop)

    daemon_umask()  # what it makes is its own, whatever the umask it was started with
    preload_functions()
    tune_gc()
    try:
        asyncio.run(main())
    except AlreadyRunning as err:
        log.error("%s", err)
        return 3
    except HTGridError as err:  # the queue cannot be opened, say
        log.error("grid manager: %s", err)
        return 1
    return 0
