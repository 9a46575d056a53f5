"""The master (HTCondor's condor_master): `htgrid up` and `htgrid down`, and the process
that runs the pool's daemons.

`start` spawns `python -m htgrid.master --background` and waits until it answers; `stop`
asks it to stop and waits until it has. That process is the schedd (`htgrid.schedd`),
with the master's part beside it, its `Companion` (`Pool`): the collector and the
execute node (startd) and the grid manager as supervised children (`_supervise`:
restarted after a back-off when they die, stopped when the master goes), the negotiator
as a task over the queue, and the schedd's ad in the collector. `pool_daemon` composes
the two; the schedd knows the master only as the companion it was given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.master._control import DaemonInfo, alive, reconfig, start, stop

if TYPE_CHECKING:
    from htgrid.master._run import pool_daemon, run_daemon

#: The daemon itself loads when first asked for: `htgrid up` only spawns it.
_LAZY: Final = {"pool_daemon": "_run", "run_daemon": "_run"}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = ["DaemonInfo", "alive", "pool_daemon", "reconfig", "run_daemon", "start", "stop"]
