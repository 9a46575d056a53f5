"""`htgrid up` and `htgrid down`: start and stop the personal pool's daemons.

    $ htgrid up
    htgrid daemons started (pid 4242).
      socket: /home/alice/.htgrid/run/schedd.sock
      log:    /home/alice/.htgrid/log/SchedLog
      queue:  /home/alice/.htgrid/spool/queue.db

Both exit 0 when the pool ends up as asked (already running, or nothing to stop, is
fine) and 1 when it does not (the daemon failed to start, or would not stop).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from htgrid.cli._common import EXIT_NO, EXIT_OK
from htgrid.schedd import ScheddConfig, ScheddError, start, stop

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `up` and `down` to the top-level parser."""
    up = commands.add_parser(
        "up",
        help="start the personal pool's daemons in the background",
        description="Start the daemons of the pool in $HTGRID_HOME (default ~/.htgrid).",
    )
    up.set_defaults(handler=_up)
    down = commands.add_parser(
        "down",
        help="stop the daemons (running local jobs go back to idle)",
        description=(
            "Stop the daemons cleanly: running local universe jobs get their kill signal, "
            "go back to idle, and run again after the next `htgrid up`."
        ),
    )
    down.set_defaults(handler=_down)


def _up(args: argparse.Namespace) -> int:
    config = ScheddConfig.load()
    try:
        info = start(config)
    except ScheddError as exc:
        print(f"htgrid up: {exc}", file=sys.stderr)
        return EXIT_NO
    if info.already_running:
        print(f"htgrid daemons are already running (pid {info.pid}) on {info.socket}.")
        return EXIT_OK
    print(f"htgrid daemons started (pid {info.pid}).")
    print(f"  socket: {info.socket}")
    print(f"  log:    {info.log}")
    print(f"  queue:  {info.queue}")
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    config = ScheddConfig.load()
    try:
        pid = stop(config)
    except ScheddError as exc:
        print(f"htgrid down: {exc}", file=sys.stderr)
        return EXIT_NO
    if pid is None:
        print(f"htgrid daemons are not running (nothing answers on {config.socket}).")
    else:
        print(f"htgrid daemons stopped (pid {pid}).")
    return EXIT_OK
