"""What every daemon of a pool shares, below them all: its configuration and its home.

- `ConfigFile` (`_config`): the pool's htgrid.conf, read with line numbers; `KNOBS`, the
  table of the knobs it may set and their defaults, which `ConfigFile` falls back on and
  `htgrid config_val` prints; `htgrid_home()`; the values several daemons read
  (`ApiLimits`, the master's `Backoff`, `DEFAULT_TRANSFER_MB`); `PoolError`, what a bad
  file raises.
- `HomeLayout` (`_home`): every path under $HTGRID_HOME, the security files' included,
  and `make_dirs`, which gives them their modes; `trusted_ca_files`.
- Job processes (`_launch`): how the schedd's local universe and the execute node's
  starter start, signal and reap a job's process (`LaunchSpec`, `spawn`, `wait_exit`,
  `reap`), and find what a crashed daemon left running (`family_marker`,
  `kill_leftovers`).
- `configure_logging` (`_logging`): the daemons' log lines.
- The jobs' MyProxy passwords (`_myproxy`): kept by the schedd, read by the grid manager.

Each daemon package (htgrid.grid, net, collector, startd, negotiator, schedd, master)
imports this one; it imports only the layers below (htgrid.client and what is under it:
pyproject.toml's import-linter contracts). The configuration and the layout load with
the package, the rest when first asked for: `htgrid q` needs where the socket is, not
how a job is started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.pool._config import (
    CONFIG_NAME,
    DEFAULT_LIMITS,
    DEFAULT_TRANSFER_MB,
    KNOBS,
    ApiLimits,
    Backoff,
    ConfigFile,
    PoolError,
    htgrid_home,
)
from htgrid.pool._home import HomeLayout, trusted_ca_files
from htgrid.pool._myproxy import (
    MYPROXY_DIR,
    myproxy_jobs,
    myproxy_password_file,
    read_myproxy_password,
    store_myproxy_password,
)

if TYPE_CHECKING:
    from htgrid.pool._launch import (
        MARKER,
        Exit,
        LaunchError,
        LaunchSpec,
        family_marker,
        job_arguments,
        job_environment,
        kill_group,
        kill_leftovers,
        reap,
        signal_of,
        spawn,
        wait_exit,
    )
    from htgrid.pool._logging import configure_logging

#: Where each other name lives, loaded when first asked for.
_LAZY: Final = {
    "MARKER": "_launch",
    "Exit": "_launch",
    "LaunchError": "_launch",
    "LaunchSpec": "_launch",
    "family_marker": "_launch",
    "job_arguments": "_launch",
    "job_environment": "_launch",
    "kill_group": "_launch",
    "kill_leftovers": "_launch",
    "signal_of": "_launch",
    "reap": "_launch",
    "spawn": "_launch",
    "wait_exit": "_launch",
    "configure_logging": "_logging",
}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_LIMITS",
    "DEFAULT_TRANSFER_MB",
    "KNOBS",
    "MARKER",
    "MYPROXY_DIR",
    "ApiLimits",
    "Backoff",
    "ConfigFile",
    "Exit",
    "HomeLayout",
    "LaunchError",
    "LaunchSpec",
    "PoolError",
    "configure_logging",
    "family_marker",
    "htgrid_home",
    "job_arguments",
    "job_environment",
    "kill_group",
    "kill_leftovers",
    "myproxy_jobs",
    "myproxy_password_file",
    "read_myproxy_password",
    "reap",
    "signal_of",
    "spawn",
    "store_myproxy_password",
    "trusted_ca_files",
    "wait_exit",
]
