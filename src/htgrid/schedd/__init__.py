"""The schedd (HTCondor's condor_schedd, for this host): the job queue's daemon.

It serves the job queue's API on `$HTGRID_HOME/run/schedd.sock` and over TLS, runs local
universe jobs, runs vanilla jobs on the execute node through its shadows, writes user
job event logs (`htgrid.eventlog`) and evaluates periodic policies; see `_daemon` for how
the pieces fit. It runs in the master's process (`htgrid.master`, `htgrid up`), beside
the pool's other daemons: the master gives the `Daemon` a `Companion`, and runs the
negotiator over the queue (`QueueJobs`, `NegotiationLoop`) and the schedd's ad in the
collector (`ScheddAdvertiser`). The settings load with the package; the daemon and
the rest when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand
from htgrid.schedd._config import DAEMONS, ScheddConfig, ScheddError, default_schedd_name

if TYPE_CHECKING:
    from htgrid.schedd._advertise import ScheddAdvertiser
    from htgrid.schedd._daemon import Companion, Daemon, Running
    from htgrid.schedd._negotiation import NegotiationLoop, QueueJobs

#: Where each other name lives, loaded when first asked for: a command needs the
#: settings (where the socket is), not the daemon.
_LAZY: Final = {
    "ScheddAdvertiser": "_advertise",
    "Companion": "_daemon",
    "Daemon": "_daemon",
    "Running": "_daemon",
    "NegotiationLoop": "_negotiation",
    "QueueJobs": "_negotiation",
}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = [
    "DAEMONS",
    "Companion",
    "Daemon",
    "NegotiationLoop",
    "QueueJobs",
    "Running",
    "ScheddAdvertiser",
    "ScheddConfig",
    "ScheddError",
    "default_schedd_name",
]
