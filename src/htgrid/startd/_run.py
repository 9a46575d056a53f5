"""Running the execute node in this process until it stops; its exit status.

Run by the master, the node exits with `EXIT_IDLE` after STARTD_NOCLAIM_SHUTDOWN, and
the master shuts the pool down and runs DEFAULT_MASTER_SHUTDOWN_SCRIPT. Run alone
(`htgrid startd`), the node is its own master: it runs the script itself when it exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from htgrid._gc import tune_gc
from htgrid._privsep import daemon_umask
from htgrid.classad import preload_functions
from htgrid.errors import HTGridError
from htgrid.pool import configure_logging
from htgrid.startd._config import StartdConfig
from htgrid.startd._daemon import EXIT_IDLE, ExitReason, Startd

__all__ = ["run_startd"]

_log = logging.getLogger("htgrid.startd")


def run_startd(
    home: Path | None = None,
    *,
    pool: str | None = None,
    parent_fd: int | None = None,
    network: bool = False,
) -> int:
    """Run the execute node of `home` (default $HTGRID_HOME); the process exit status.
    With `network`, its API is served over TLS too, for schedds on other hosts."""
    daemon_umask()  # what it makes is its own, whatever the umask it was started with
    configure_logging()
    try:
        config = StartdConfig.load(home)
        preload_functions()
        tune_gc()
        startd = Startd(config, pool=pool, parent_fd=parent_fd, network=network)
        reason = asyncio.run(startd.run())
    except HTGridError as exc:
        _log.error("cannot run: %s", exc)
        return 1
    except OSError as exc:
        _log.error("cannot run: %s: %s", exc.filename or "", exc.strerror or exc)
        return 1
    if reason is ExitReason.REFUSED:
        return 1  # it never joined: nothing ran, and it is no exit for want of work
    if parent_fd is None and config.shutdown_script:
        # On its own, the node is its master: HTCondor's master execs the script at exit.
        _log.info("running DEFAULT_MASTER_SHUTDOWN_SCRIPT: %s", config.shutdown_script)
        logging.shutdown()
        os.execv("/bin/sh", ["/bin/sh", "-c", config.shutdown_script])
    return EXIT_IDLE if reason is ExitReason.IDLE else 0
