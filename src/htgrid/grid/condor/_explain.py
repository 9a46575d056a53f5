"""What `htgrid q -better-analyze` says of a condor (HTCondor-C) job beyond every type's lines:
the remote schedd and pool, the input's stage in, where the job runs there, and the lease
its remote copy holds (GridJobLeaseExpiration)."""

from __future__ import annotations

import time

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import is_tag
from htgrid.grid._gridtype import Remote
from htgrid.grid._values import as_int, as_number, as_str, time_text
from htgrid.grid.condor._ad import LOCAL_LEASE
from htgrid.grid.condor._ids import CondorJobId, CondorResourceName
from htgrid.queue import JobStatus

__all__ = ["active_lines", "remote_of"]


def remote_of(ad: ClassAd) -> Remote | None:
    """A condor job's remote id (GridJobId), or its submit tag while being submitted."""
    condor = CondorJobId.parse(ad.get("GridJobId"))
    tag = ad.get("GridSubmitTag")
    key = tag if is_tag(tag) else ""
    if condor is None and not key:
        return None
    reporter = "The remote schedd"
    try:
        name = CondorResourceName.parse(as_str(ad.get("GridResource")) or "")
        reporter = f"The remote schedd {name.schedd} (pool {name.pool})"
    except UnsupportedGridJob:
        pass
    if condor is not None:
        reporter = f"The remote schedd {condor.schedd} (pool {condor.pool})"
    remote_id = condor.remote if condor is not None else None
    return Remote(key or "(none)", remote_id, "job", "submit tag", reporter)


def active_lines(ad: ClassAd) -> list[str]:
    """What only a submitted condor job has to say: stage in, where it runs, its lease."""
    lines: list[str] = []
    if not as_str(ad.get("GridJobStatus")):
        lines.append(
            'Its input is staged in first: the remote copy waits, held ("Spooling input '
            'data files"), until the files arrive; then it is released and polled.'
        )
    elif ad.get("JobStatus") == JobStatus.RUNNING and as_str(ad.get("RemoteHost")):
        lines.append(f"It runs there on {as_str(ad.get('RemoteHost'))}.")
    expiration = as_number(ad.get(LOCAL_LEASE))
    duration = as_int(ad.get("JobLeaseDuration"))
    if expiration is not None and expiration > 0:
        how_long = f" (JobLeaseDuration {duration} s)" if duration else ""
        if expiration < time.time():
            lines.append(
                f"Its lease at the remote schedd expired at {time_text(expiration)}{how_long}: "
                "unless the grid manager renews it now, the remote schedd has removed "
                "the job."
            )
        else:
            lines.append(
                f"Its lease at the remote schedd runs until {time_text(expiration)}{how_long}; "
                "the grid manager renews it. Should the grid manager stay away past it, "
                "the remote schedd removes the job."
            )
    return lines
