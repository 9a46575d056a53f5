"""`htgrid up` and `htgrid down`: start and stop the personal pool's daemons; `htgrid
reconfig` (condor_reconfig) makes them read htgrid.conf again.

    $ htgrid up
    htgrid daemons started (pid 4242).
      socket:    /home/alice/.htgrid/run/schedd.sock
      log:       /home/alice/.htgrid/log/SchedLog
      queue:     /home/alice/.htgrid/spool/queue.db
      collector: 127.0.0.1:9618   (or: none (COLLECTOR not in DAEMON_LIST))
      daemons:   MASTER, SCHEDD, COLLECTOR, NEGOTIATOR, STARTD
      trust domain: host.example.org   (the issuer of the pool's tokens: TRUST_DOMAIN)
      pool CA:   /home/alice/.htgrid/etc/ca/ca.crt   (other pools trust it to reach this one)

Both exit 0 when the pool ends up as asked (already running, or nothing to stop, is
fine) and 1 when it does not (the daemon failed to start, or would not stop).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from htgrid.cli._common import EXIT_NO, EXIT_OK
from htgrid.master import DaemonInfo, reconfig, start, stop
from htgrid.schedd import ScheddConfig, ScheddError

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `up` and `down` to the top-level parser."""
    up = commands.add_parser(
        "up",
        help="start the personal pool's daemons in the background",
        description=(
            "Start the daemons of the pool in $HTGRID_HOME (default ~/.htgrid): the job "
            "queue, the collector, the negotiator and an execute node on this host, as "
            "DAEMON_LIST in $HTGRID_HOME/htgrid.conf says."
        ),
    )
    up.add_argument(
        "-no-execute",
        "--no-execute",
        dest="no_execute",
        action="store_true",
        help="run no execute node here (vanilla jobs wait for execute nodes elsewhere)",
    )
    up.set_defaults(handler=_up)
    down = commands.add_parser(
        "down",
        help="stop the daemons (running jobs go back to idle)",
        description=(
            "Stop the daemons cleanly: running local and vanilla jobs get their kill "
            "signal, go back to idle, and run again after the next `htgrid up`."
        ),
    )
    down.set_defaults(handler=_down)
    again = commands.add_parser(
        "reconfig",
        help="make the running daemons read htgrid.conf again (condor_reconfig)",
        description=(
            "Make the running daemons read $HTGRID_HOME/htgrid.conf again, without a "
            "restart (SIGHUP to the daemon, which passes it on): the job router's routes "
            "and transforms, SYSTEM_PERIODIC_* and PERIODIC_EXPR_INTERVAL, the grid "
            "manager's GRIDMANAGER_* limits and intervals, the execute node's START, "
            "STARTD_ATTRS, UPDATE_INTERVAL and CLAIM_WORKLIFE. DENY_*, ALLOW_* and the map "
            "file are read again after each edit anyway."
        ),
    )
    again.set_defaults(handler=_reconfig)


def _up(args: argparse.Namespace) -> int:
    config = ScheddConfig.load()
    try:
        info = start(config, execute=not args.no_execute)
    except ScheddError as exc:
        print(f"htgrid up: {exc}", file=sys.stderr)
        return EXIT_NO
    if info.already_running:
        print(f"htgrid daemons are already running (pid {info.pid}) on {info.socket}.")
        return EXIT_OK
    print(f"htgrid daemons started (pid {info.pid}).")
    print(f"  socket:    {info.socket}")
    print(f"  log:       {info.log}")
    print(f"  queue:     {info.queue}")
    print(f"  collector: {_collector(info)}")
    order = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD", "GRIDMANAGER")
    daemons = sorted(info.daemons, key=lambda d: (order.index(d) if d in order else 9, d))
    if daemons:
        print(f"  daemons:   {', '.join(daemons)}")
    _print_security(info)
    return EXIT_OK


def _collector(info: DaemonInfo) -> str:
    """Where the pool's collector listens; or that this pool runs none, and which one
    its daemons report to instead (COLLECTOR_HOST), if any."""
    if "COLLECTOR" in info.daemons and info.collector:
        return info.collector
    elsewhere = info.collector or ""
    if not elsewhere or elsewhere.endswith(":0"):  # port 0: "any free port", nobody's
        return "none (COLLECTOR not in DAEMON_LIST)"
    return f"{elsewhere} (COLLECTOR_HOST; COLLECTOR not in DAEMON_LIST)"


def _print_security(info: DaemonInfo) -> None:
    if info.security is not None:
        print(f"  trust domain: {info.security.trust_domain}")
        print(f"  pool CA:   {info.security.ca.cert}")


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


def _reconfig(args: argparse.Namespace) -> int:
    config = ScheddConfig.load()
    pid = reconfig(config)
    if pid is None:
        print(
            f"htgrid reconfig: no daemon runs (nothing answers on {config.socket})",
            file=sys.stderr,
        )
        return EXIT_NO
    print(f'Sent "Reconfig" command to local master (pid {pid}).')
    return EXIT_OK
