"""`htgrid startd`: run an execute node in the foreground (condor_startd).

    $ htgrid startd -pool 127.0.0.1:9618
    11/21/26 17:02:11 htgrid startd (pid 4242) serving ~/.htgrid/run/startd.sock: slot1@host, ...

`htgrid up` runs one for the personal pool already; this command is for a node run by
something else (systemd, a cloud instance's boot script), on this host or another. It
serves the schedds over TLS on NETWORK_INTERFACE (default: the address that reaches the
collector) with a certificate it makes at each start and advertises, and joins the pool
with what its administrator gave it, as condor_startd with IDTOKENS:

    pool$ htgrid token create -identity node7@pool.example -authz ADVERTISE_STARTD \
              -token /tmp/node7.token                   # copied to the node's etc/tokens.d
    node$ htgrid trust add pool.example ca.crt          # the pool's etc/ca/ca.crt
    node$ echo NETWORK_HOSTNAME = node7 >> $HTGRID_HOME/htgrid.conf
    node$ htgrid startd -pool cm.pool.example:9618

The collector takes from that token the ads of node7 only (Machine node7, Name
slot1@node7); only callers with a certificate of the pool's CA (its schedds) may claim
the node. A node the pool refuses (no token, another pool's, revoked, another node's
name) exits at once with status 1, saying why. It reads the execute node's
knobs from $HTGRID_HOME/htgrid.conf (NUM_CPUS, START, STARTD_ATTRS,
STARTD_NOCLAIM_SHUTDOWN...), and with DEFAULT_MASTER_SHUTDOWN_SCRIPT set it runs that
command when it exits, e.g. `shutdown -h now` after STARTD_NOCLAIM_SHUTDOWN seconds
without work. Exit status: 0 stopped, 99 stopped for want of work, 1 could not run.
"""

from __future__ import annotations

import argparse
from typing import Any

from htgrid.pool import ConfigFile, htgrid_home

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `startd` to the top-level parser."""
    sd = commands.add_parser(
        "startd",
        help="run an execute node in the foreground (condor_startd)",
        description=(
            "Advertise this host's cpus, memory, disk and GPUs as a partitionable slot "
            "and run the jobs the pool's schedd sends, each in a scratch sandbox."
        ),
    )
    sd.add_argument("-pool", "--pool", help="host[:port] of the collector (COLLECTOR_HOST)")
    sd.set_defaults(handler=_startd)


def _startd(args: argparse.Namespace) -> int:
    # Imported here for start-up: building the parser (`htgrid --help`) loads no daemon.
    from htgrid.collector import default_pool
    from htgrid.startd import run_startd

    home = htgrid_home()
    pool = args.pool
    if pool is None and not _configured(home):
        pool = default_pool()
    return run_startd(home, pool=pool, network=True)


def _configured(home: Any) -> bool:
    """Whether htgrid.conf names the collector (else the personal pool's, if it runs)."""
    return ConfigFile.read(home).has("COLLECTOR_HOST")
