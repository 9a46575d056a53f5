"""`htgrid ce up|down`: a compute entrypoint (HTCondor-CE's condor-ce service).

    $ htgrid ce up --batch slurm          # first time: writes ~/.htgrid-ce/htgrid.conf
    htgrid CE started (pid 4242).
      home:      /home/alice/.htgrid-ce   (HTGRID_CE_HOME, or --home)
      collector: 127.0.0.1:9619
      schedd:    ce@host.example.org
      routes:    Slurm_Cluster (batch slurm)
      submitters use: grid_resource = condor ce@host.example.org 127.0.0.1:9619

A CE is a pool of its own (its home, its collector port, 9619 unless --port says
otherwise) running the queue, the grid manager and the job router, configured with
HTCondor-CE's defaults (`htgrid.router.ce_config`). Its htgrid.conf is written once, when
the home has none; after that it is the administrator's to edit.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from htgrid.cli._ce_trace import register_trace
from htgrid.cli._common import EXIT_NO, EXIT_OK
from htgrid.errors import UsageError

__all__ = ["register"]


def _ce_home(args: argparse.Namespace) -> Path:
    if args.home is not None:
        return Path(args.home).absolute()
    env = os.environ.get("HTGRID_CE_HOME")
    return Path(env).absolute() if env else Path.home() / ".htgrid-ce"


def register(commands: Any) -> None:
    """Add `ce` and its actions."""
    ce = commands.add_parser(
        "ce",
        help="run a compute entrypoint (HTCondor-CE): up, down, trace",
        description="A compute entrypoint: a pool of its own that routes the jobs remote "
        "submitters send it over HTCondor-C to the site's batch system.",
    )
    actions = ce.add_subparsers(dest="ce_action", metavar="ACTION")
    up = actions.add_parser("up", help="start the CE (writing its configuration if new)")
    up.add_argument(
        "--batch",
        default=None,
        help="where a new CE routes jobs: slurm, sge, pbs, lsf, fork, or a grid "
        "resource ('condor SCHEDD HOST:PORT': another pool)",
    )
    up.add_argument("--port", type=int, default=None, help="a new CE's collector port (9619)")
    down = actions.add_parser("down", help="stop the CE's daemons")
    for cmd in (up, down):
        cmd.add_argument("--home", default=None, help="the CE's home (HTGRID_CE_HOME)")
    up.set_defaults(handler=_up)
    down.set_defaults(handler=_down)
    register_trace(actions)
    ce.set_defaults(handler=lambda args: _usage(ce))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _up(args: argparse.Namespace) -> int:
    from htgrid.master import start
    from htgrid.pool import CONFIG_NAME
    from htgrid.router import CE_PORT, RouterConfig, ce_config
    from htgrid.schedd import ScheddConfig, ScheddError

    home = _ce_home(args)
    conf_path = home / CONFIG_NAME
    if not conf_path.exists():
        if not args.batch:
            raise UsageError(
                f"{conf_path} does not exist: a new CE needs --batch (slurm, sge, pbs, lsf, "
                "fork, or 'condor SCHEDD HOST:PORT')"
            )
        home.mkdir(parents=True, exist_ok=True, mode=0o755)
        text = ce_config(args.batch, args.port or CE_PORT, host=socket.getfqdn())
        conf_path.write_text(text, encoding="utf-8")
        print(f"wrote {conf_path} (HTCondor-CE's defaults, a route to {args.batch})")
    elif args.batch or args.port:
        print(
            f"htgrid ce up: {conf_path} exists: --batch and --port are for a new CE "
            "(edit the file instead)",
            file=sys.stderr,
        )
        return EXIT_NO
    config = ScheddConfig.load(home)
    if "JOB_ROUTER" not in config.daemons:
        print(f"htgrid ce up: {conf_path}: DAEMON_LIST has no JOB_ROUTER", file=sys.stderr)
        return EXIT_NO
    routes = RouterConfig.load(home)
    for problem in routes.problems:
        print(f"htgrid ce up: {conf_path}: {problem}", file=sys.stderr)
    try:
        info = start(config, execute=False)
    except ScheddError as exc:
        print(f"htgrid ce up: {exc}", file=sys.stderr)
        return EXIT_NO
    said = "is already running" if info.already_running else "started"
    print(f"htgrid CE {said} (pid {info.pid}).")
    print(f"  home:      {home}")
    print(f"  collector: {info.collector}")
    print(f"  schedd:    {config.schedd_name}")
    names = ", ".join(
        f"{r.name} ({r.grid_resource or 'universe ' + str(r.target_universe)})"
        for r in routes.routes
    )
    print(f"  routes:    {names or 'none (JOB_ROUTER_ROUTE_NAMES)'}")
    print(f"  submitters use: grid_resource = condor {config.schedd_name} {info.collector}")
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    from htgrid.master import stop
    from htgrid.schedd import ScheddConfig, ScheddError

    config = ScheddConfig.load(_ce_home(args))
    try:
        pid = stop(config)
    except ScheddError as exc:
        print(f"htgrid ce down: {exc}", file=sys.stderr)
        return EXIT_NO
    print("htgrid CE is not running." if pid is None else f"htgrid CE stopped (pid {pid}).")
    return EXIT_OK
