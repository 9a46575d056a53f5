"""Running the pool's daemon in this process until it is told to stop: the schedd, with
the pool's other daemons (`Pool`) as its companion.

When it has stopped cleanly, the daemon becomes DEFAULT_MASTER_SHUTDOWN_SCRIPT if one is
set (HTCondor's condor_master execs it instead of exiting): on a cloud instance, a
`shutdown -h now` once the pool has wound down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from htgrid._gc import tune_gc
from htgrid._privsep import daemon_umask
from htgrid.classad import preload_functions
from htgrid.errors import HTGridError
from htgrid.master._pool import Pool
from htgrid.pool import configure_logging, htgrid_home
from htgrid.schedd import Daemon, ScheddConfig

__all__ = ["pool_daemon", "run_daemon"]


def pool_daemon(config: ScheddConfig, *, clock: Callable[[], float] = time.time) -> Daemon:
    """The schedd of `config` with the pool's other daemons beside it: one process."""
    return Daemon(config, clock=clock, companion=Pool(config, clock=clock))


def run_daemon(home: Path | None = None, *, execute: bool = True) -> int:
    """Run the daemon of `home` (default $HTGRID_HOME); the process exit status.

    `execute=False` leaves the execute node out (`htgrid up -no-execute`).
    """
    daemon_umask()  # what it makes is its own, whatever the umask it was started with
    configure_logging()
    log = logging.getLogger("htgrid.schedd")
    try:
        config = ScheddConfig.load((home or htgrid_home()).absolute())
        if not execute:
            config = config.without_execute()
        preload_functions()
        tune_gc()
        asyncio.run(pool_daemon(config).run())
    except HTGridError as exc:
        log.error("cannot run: %s", exc)  # the log is stderr
        return 1
    except OSError as exc:
        log.error("cannot run: %s: %s", exc.filename or "", exc.strerror or exc)
        return 1
    if config.shutdown_script:
        log.info("running DEFAULT_MASTER_SHUTDOWN_SCRIPT: %s", config.shutdown_script)
        logging.shutdown()
        os.execv("/bin/sh", ["/bin/sh", "-c", config.shutdown_script])
    return 0
