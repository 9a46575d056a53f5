"""condor_reconfig at the execute node: htgrid.conf read again, what can change taken.

The master passes `htgrid reconfig` on as SIGHUP; a node run on its own takes SIGHUP as
well. Which knobs a running node takes, and which wait for a restart, is
`StartdConfig.reconfigured`'s: both are logged, as HTCondor's startd does.
"""

from __future__ import annotations

import asyncio
import logging

from htgrid.errors import HTGridError
from htgrid.startd._config import StartdConfig

__all__ = ["reread"]

_log = logging.getLogger("htgrid.startd")


async def reread(config: StartdConfig) -> StartdConfig | None:
    """The settings to run with after a reconfig, from `config` in force; None when
    htgrid.conf cannot be read (said in the log: the settings in force are kept)."""
    try:
        new = await asyncio.to_thread(StartdConfig.load, config.home)
    except HTGridError as exc:
        _log.error("reconfig: htgrid.conf is refused, the settings in force kept: %s", exc)
        return None
    taken, changed, later = config.reconfigured(new)
    if changed:
        _log.info("reconfig: %s taken", ", ".join(changed))
    for knob in later:
        _log.warning("reconfig: %s changed, which needs a restart of the execute node", knob)
    if not changed and not later:
        _log.info("reconfig: htgrid.conf read again; nothing of the execute node changed")
    return taken
