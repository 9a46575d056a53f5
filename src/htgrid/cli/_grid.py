"""`htgrid gridmanager`: run the grid manager over a queue (the queue daemon starts it)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from htgrid.errors import UsageError
from htgrid.pool import HomeLayout, htgrid_home

if TYPE_CHECKING:
    from collections.abc import Sequence

    from htgrid.classad import ClassAd
    from htgrid.grid import GridManagerConfig, Publish

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add the `gridmanager` command to the top-level parser."""
    cmd = commands.add_parser(
        "gridmanager",
        help="run the grid manager: grid universe jobs to their GAHP servers",
        description=(
            "Adopt the queue's grid universe jobs and run them through GAHP servers until "
            "SIGTERM. Safe to kill at any moment: a new one recovers every job."
        ),
    )
    cmd.add_argument(
        "--home",
        type=Path,
        default=None,
        help="htgrid's state directory (default: $HTGRID_HOME, else ~/.htgrid)",
    )
    cmd.add_argument(
        "--queue-dir",
        type=Path,
        default=None,
        help="the job queue's directory (default: $HTGRID_QUEUE_DIR, else HOME/spool)",
    )
    cmd.add_argument("--poll-interval", type=float, metavar="SECONDS", help="status polls (10)")
    cmd.add_argument("--feed-interval", type=float, metavar="SECONDS", help="queue reads (2)")
    cmd.add_argument(
        "--max-submitted", type=int, metavar="N", help="jobs submitted per resource (1000)"
    )
    cmd.add_argument(
        "--batch-gahp",
        metavar="COMMAND",
        help="the batch GAHP server's command line (default: htgrid gahp batch)",
    )
    cmd.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any GridManagerConfig field, e.g. --set lost_submit_grace=2 (repeatable)",
    )
    cmd.add_argument(
        "--log",
        type=Path,
        default=None,
        help="log file (default: HOME/log/GridmanagerLog; '-' for stderr)",
    )
    # The master's pipe (`htgrid up`): stop when it closes.
    cmd.add_argument("--parent-fd", type=int, help=argparse.SUPPRESS)
    cmd.add_argument("-v", "--verbose", action="store_true", help="log more")
    cmd.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # Imported here for start-up: building the parser (`htgrid --help`) loads no daemon.
    from htgrid.grid import GridManagerConfig, run_gridmanager

    home = args.home.absolute() if args.home else htgrid_home()
    queue_dir = args.queue_dir or os.environ.get("HTGRID_QUEUE_DIR") or None
    settings = [
        f"{name}={value}"
        for name, value in (
            ("poll_interval", args.poll_interval),
            ("feed_interval", args.feed_interval),
            ("max_submitted_per_resource", args.max_submitted),
            ("batch_gahp", args.batch_gahp),
        )
        if value is not None
    ]
    config = GridManagerConfig()
    for setting in [*settings, *args.set]:
        config = _setting(config, setting)
    log_path = args.log or HomeLayout(home).gridmanager_log
    if str(log_path) == "-":
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("htgrid")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    return run_gridmanager(
        home,
        queue_dir=queue_dir,
        config=config,
        parent_fd=args.parent_fd,
        publish=_publisher(home),
    )


def _publisher(home: Path) -> Publish | None:
    """What sends the Grid ads (`condor_status -grid`) to the pool's collector: the
    personal pool's while it runs, else COLLECTOR_HOST when set; None with neither."""
    import getpass

    from htgrid.collector import CollectorClient, default_pool
    from htgrid.pool import ConfigFile
    from htgrid.schedd import default_schedd_name

    conf = ConfigFile.read(home)
    if HomeLayout(home).collector_address_file.exists():
        pool = default_pool(home)
    elif conf.has("COLLECTOR_HOST") and not conf.text("COLLECTOR_HOST").endswith(":0"):
        pool = conf.text("COLLECTOR_HOST")
    else:
        return None
    schedd = conf.text("SCHEDD_NAME", default_schedd_name())
    owner = getpass.getuser()
    clients: list[CollectorClient] = []  # made on first use, inside the manager's loop

    async def publish(ads: Sequence[ClassAd]) -> None:
        if not clients:
            clients.append(CollectorClient(pool, timeout=10.0, home=home, daemon=True))
        for ad in ads:
            ad["ScheddName"] = schedd
            if "Owner" not in ad:  # the grid manager's own jobs
                ad["Owner"] = owner
        await clients[0].advertise("UPDATE_GRID_AD", ads)

    return publish


def _setting(config: GridManagerConfig, text: str) -> GridManagerConfig:
    """`config` with one `NAME=VALUE` applied, VALUE read as the field's type."""
    import dataclasses
    import shlex

    name, sep, value = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(config)}
    if not sep or name not in fields:
        raise UsageError(f"--set {text}: expected NAME=VALUE, NAME one of {', '.join(fields)}")
    current = getattr(config, name)
    parsed: Any
    try:
        if isinstance(current, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            parsed = value.lower() in ("true", "1", "yes")
        elif isinstance(current, int):
            parsed = int(value)
        elif isinstance(current, float):
            parsed = float(value)
        else:
            parsed = tuple(shlex.split(value))
    except ValueError:
        raise UsageError(f"--set {text}: {value!r} is not a valid {name}") from None
    changes: dict[str, Any] = {name: parsed}
    return dataclasses.replace(config, **changes)
