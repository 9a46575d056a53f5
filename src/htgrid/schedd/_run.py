"""Running the daemon in this process until it is told to stop."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from htgrid.errors import HTGridError
from htgrid.schedd._config import ScheddConfig, htgrid_home
from htgrid.schedd._daemon import Daemon, configure_logging

__all__ = ["run_daemon"]


def run_daemon(home: Path | None = None) -> int:
    """Run the daemon of `home` (default $HTGRID_HOME); the process exit status."""
    configure_logging()
    log = logging.getLogger("htgrid.schedd")
    try:
        config = ScheddConfig.load((home or htgrid_home()).absolute())
        asyncio.run(Daemon(config).run())
    except HTGridError as exc:
        log.error("cannot run: %s", exc)  # the log is stderr
        return 1
    except OSError as exc:
        log.error("cannot run: %s: %s", exc.filename or "", exc.strerror or exc)
        return 1
    return 0
