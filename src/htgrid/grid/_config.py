"""The grid manager's settings: one frozen value passed down, no global configuration.

Defaults are HTCondor's (`GRIDMANAGER_*`, reference §8) where it has one. The pool's
htgrid.conf may set the knobs in `KNOBS` (HTCondor's names); `with_knobs` applies them.
A running grid manager takes them again at a reconfig (`htgrid reconfig`, SIGHUP), all
but those in `RESTART_KNOBS`; a GAHP server started after it takes its settings too.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htgrid.pool import ConfigFile, PoolError

__all__ = ["KNOBS", "RESTART_KNOBS", "GridManagerConfig"]

#: The htgrid.conf knobs the grid manager reads, and the field each one sets.
KNOBS: Mapping[str, str] = {
    "GRIDMANAGER_JOB_PROBE_INTERVAL": "poll_interval",
    "GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE": "max_submitted_per_resource",
    "PERIODIC_EXPR_INTERVAL": "periodic_interval",
    "GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL": "collector_update_interval",
    "GRIDMANAGER_RESOURCE_PROBE_INTERVAL": "down_ping_interval",
    "GRIDMANAGER_GAHP_CALL_TIMEOUT": "gahp_call_timeout",
    "GRIDMANAGER_GAHP_RESPONSE_TIMEOUT": "gahp_response_timeout",
    "GRIDMANAGER_MAX_PENDING_REQUESTS": "max_pending_requests",
}

#: The batch GAHP server's command line (HTCondor's blahpd), words split as a shell does.
BATCH_GAHP = "BATCH_GAHP"

#: The knobs a running grid manager cannot take (each resource's request throttle is
#: sized when it is made): a change waits for a restart.
RESTART_KNOBS: frozenset[str] = frozenset({"GRIDMANAGER_MAX_PENDING_REQUESTS"})


@dataclass(frozen=True, slots=True)
class GridManagerConfig:
    """How the grid manager runs. Times are seconds."""

    #: Between two bulk status polls of one resource (GRIDMANAGER_JOB_PROBE_INTERVAL).
    #: HTCondor waits 60 s; one poll costs one bulk query whatever the number of jobs,
    #: so a personal pool can afford to look every 10 s.
    poll_interval: float = 10.0
    #: At most this long between two reads of the queue's change feed. The queue daemon
    #: rings the grid manager's doorbell after each change it makes, which starts a read
    #: at once (as its GRIDMAN_ADD_JOBS signal does in HTCondor); this read on a timer
    #: catches what was written to the queue without the daemon.
    feed_interval: float = 2.0
    #: Between two evaluations of the jobs' PeriodicHold/PeriodicRemove (the queue's own
    #: periodic pass leaves the grid manager's jobs to it: PERIODIC_EXPR_INTERVAL).
    periodic_interval: float = 60.0
    #: Between two updates of each resource's Grid ad in the collector
    #: (GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL, HTCondor's 5 minutes).
    collector_update_interval: float = 300.0
    #: Between pings of a resource that is down (GRIDMANAGER_RESOURCE_PROBE_INTERVAL).
    down_ping_interval: float = 300.0
    #: At least this long between two pings of a resource that is up.
    min_ping_interval: float = 15.0
    #: Jobs submitted at once per resource (GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE).
    max_submitted_per_resource: int = 1000
    #: GAHP requests in flight per resource (GRIDMANAGER_MAX_PENDING_REQUESTS).
    max_pending_requests: int = 50
    #: A GAHP request with no result in this long is lost (GRIDMANAGER_GAHP_CALL_TIMEOUT).
    gahp_call_timeout: float = 300.0
    #: A GAHP server's return line may take this long before it counts as hung.
    gahp_response_timeout: float = 20.0
    #: The longest line read from a GAHP server. HTCondor's grid manager stops at 500 KiB;
    #: htgrid's reads more so that one status answer can cover every job of a resource
    #: (a server never writes past its own limit: HTCondor's unless told otherwise).
    gahp_max_line: int = 64 * 1024 * 1024
    #: First wait before retrying after a transient failure; it doubles up to `retry_max`.
    retry_initial: float = 5.0
    retry_max: float = 300.0
    #: Before looking up a submission whose answer was lost, wait this long: a submit
    #: command a dead GAHP server left running (an orphaned sbatch) lands first.
    lost_submit_grace: float = 10.0
    #: Transient submit failures in a row before the job is held.
    max_submit_attempts: int = 5
    #: A routine step (fetching a job's output) shows in GridWaitReason once it has taken
    #: this long: most end sooner, and writing the reason for each of them was a queue
    #: change per job for every follower of the queue to read.
    slow_step_after: float = 5.0
    #: A job no status poll has answered about for this long has an unknown status: the
    #: grid manager sets CurrentStatusUnknown and logs 029, then 030 at the next answer.
    #: HTCondor's BaseJob::CheckRemoteStatus uses a fixed 15 minutes (no knob).
    status_unknown_after: float = 900.0
    #: Polls in a row the batch system may not know a submitted job before it is held.
    max_unknown_polls: int = 10
    #: Most job ids in one bulk status request (its reply is one line of at most 500 KiB).
    status_batch_size: int = 2500
    #: Transient submit failures in a row on one resource before its submits pause.
    failure_threshold: int = 3
    #: The batch GAHP server's command line (`htgrid gahp batch`).
    batch_gahp: tuple[str, ...] = (sys.executable, "-m", "htgrid.cli", "gahp", "batch")
    #: Whether the submission tags are synced to disk before submitting (a power cut
    #: could otherwise lose one and submit again); a kill -9 is survived either way.
    fsync: bool = True

    def backoff(self, failures: int) -> float:
        """The wait after `failures` (>= 1) failures in a row."""
        return min(self.retry_max, self.retry_initial * 2.0 ** max(0, failures - 1))

    def with_knobs(self, home: Path) -> GridManagerConfig:
        """This config with the knobs of `home`'s htgrid.conf applied to the fields still
        at their defaults (a setting given on the command line wins over the file)."""
        conf = ConfigFile.read(home)
        defaults = GridManagerConfig()
        changes: dict[str, Any] = {}
        for knob, name in KNOBS.items():
            default = getattr(defaults, name)
            if conf.has(knob) and getattr(self, name) == default:
                value = conf.number(knob, default)
                changes[name] = int(value) if isinstance(default, int) else value
        if conf.has(BATCH_GAHP) and self.batch_gahp == defaults.batch_gahp:
            changes["batch_gahp"] = _command(conf, BATCH_GAHP)
        return dataclasses.replace(self, **changes) if changes else self

    def reconfigured(self, new: GridManagerConfig) -> tuple[GridManagerConfig, list[str]]:
        """`new` as a running grid manager takes it (the RESTART_KNOBS kept as they are in
        `self`), and a line for each knob that changed, saying so or that it waits for a
        restart."""
        lines, kept = [], {}
        if new.batch_gahp != self.batch_gahp:
            lines.append(
                f"{BATCH_GAHP} = {shlex.join(new.batch_gahp)}: the batch GAHP server's "
                "command from its next start (the running one serves on)"
            )
        for knob, name in KNOBS.items():
            old, value = getattr(self, name), getattr(new, name)
            if old == value:
                continue
            if knob in RESTART_KNOBS:
                kept[name] = old
                lines.append(f"{knob} {old:g} -> {value:g} needs a restart: {old:g} kept")
            else:
                lines.append(f"{knob} {old:g} -> {value:g}")
        return dataclasses.replace(new, **kept), lines


def _command(conf: ConfigFile, knob: str) -> tuple[str, ...]:
    """A command line knob's words (PoolError naming it and its line if it has none or
    cannot be split)."""
    text = conf.text(knob)
    try:
        words = tuple(shlex.split(text))
    except ValueError as err:
        raise PoolError(f"{conf.path}:{conf.values[knob][1]}: {knob}: {err}") from None
    if not words:
        raise PoolError(f"{conf.path}:{conf.values[knob][1]}: {knob} names no command")
    return words
