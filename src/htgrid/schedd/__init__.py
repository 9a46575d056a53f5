"""The personal pool's daemon (HTCondor's schedd, for this host).

`htgrid up` runs it in the background (`start`), `htgrid down` stops it (`stop`). It
serves the job queue's API on `$HTGRID_HOME/run/schedd.sock`, runs local universe jobs,
writes user job event logs (`htgrid.eventlog`) and evaluates periodic policies; see
`_daemon` for how the pieces fit. Only the light parts are imported here; the daemon itself is
`htgrid.schedd._daemon.Daemon`.
"""

from htgrid.schedd._config import ScheddConfig, ScheddError, htgrid_home
from htgrid.schedd._control import DaemonInfo, start, stop

__all__ = [
    "DaemonInfo",
    "ScheddConfig",
    "ScheddError",
    "htgrid_home",
    "start",
    "stop",
]
