"""`explain_grid_job`: where a grid job stands and why, from its job ad alone.

For `htgrid q -better-analyze`. It reads what HTCondor's grid manager writes (GridJobId,
GridJobStatus, LastRemoteStatusUpdate, GridResourceUnavailableTime, HoldReason...) plus
htgrid's GridWaitReason (what the job waits for) and GridJobSubmitTime. For condor
(HTCondor-C) jobs also the remote schedd and pool, the input's stage in, where the job
runs there, and the lease the remote copy holds (GridJobLeaseExpiration).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.grid._errors import UnsupportedGridJob
from htgrid.grid._gridids import BatchJobId, Ec2JobId, grid_type_of
from htgrid.grid._values import as_int, as_number, as_str
from htgrid.grid.condor._ad import LOCAL_LEASE, CondorJobId, CondorResourceName, is_submit_tag
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["explain_grid_job"]

_KNOWN_TYPES = frozenset({"batch", "ec2", "condor"})


@dataclass(frozen=True, slots=True)
class _Remote:
    """A GridJobId as explanations name it: the idempotency key, and the remote id."""

    key: str
    remote_id: str | None
    #: "batch job" or "instance"; "tag" or "client token"; who reports the status.
    noun: str
    key_noun: str
    reporter: str


def _remote(gtype: str, ad: ClassAd) -> _Remote | None:
    value = ad.get("GridJobId")
    if gtype == "condor":
        return _condor_remote(ad)
    if gtype == "ec2":
        ec2 = Ec2JobId.parse(value)
        if ec2 is None:
            return None
        return _Remote(ec2.client_token, ec2.instance_id, "instance", "client token", "EC2")
    batch = BatchJobId.parse(value)
    if batch is None:
        return None
    return _Remote(batch.tag, batch.blah_id, "batch job", "tag", "The batch system")


def _when(value: object) -> str | None:
    number = as_number(value)
    if number is None or number <= 0:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(number))


def _lower_first(text: str) -> str:
    """ "The batch system" -> "the batch system" (names further on keep their case)."""
    return text[:1].lower() + text[1:]


def _text(ad: ClassAd, name: str) -> str | None:
    return as_str(ad.get(name)) or None


def explain_grid_job(ad: ClassAd) -> list[str]:
    """Lines saying where the grid job of `ad` stands and why."""
    if ad.get("JobUniverse") != 9:
        return ["This is not a grid universe job."]
    resource = _text(ad, "GridResource") or ""
    gtype = grid_type_of(resource)
    if gtype not in _KNOWN_TYPES:
        return [f"The grid manager cannot run grid type {gtype or '(none)'!r} ({resource!r})."]
    lines = [f"Grid job for {resource!r}."]
    status = ad.get("JobStatus")
    managed = _text(ad, "Managed")
    grid_id = _remote(gtype, ad)
    if status == JobStatus.HELD:
        lines += _held(ad, managed, grid_id)
    elif status == JobStatus.REMOVED:
        lines += _removed(managed, grid_id)
    elif status == JobStatus.COMPLETED:
        lines += _completed(ad, grid_id)
    else:
        lines += _active(ad, managed, grid_id, resource)
        if gtype == "condor" and grid_id is not None and grid_id.remote_id:
            lines += _condor_active(ad)
    return lines


def _condor_remote(ad: ClassAd) -> _Remote | None:
    """A condor job's remote id (GridJobId), or its submit tag while being submitted."""
    condor = CondorJobId.parse(ad.get("GridJobId"))
    tag = ad.get("GridSubmitTag")
    key = tag if isinstance(tag, str) and is_submit_tag(tag) else ""
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
    return _Remote(key or "(none)", remote_id, "job", "submit tag", reporter)


def _condor_active(ad: ClassAd) -> list[str]:
    """What only a submitted condor job has to say: stage in, where it runs, its lease."""
    lines: list[str] = []
    if not _text(ad, "GridJobStatus"):
        lines.append(
            'Its input is staged in first: the remote copy waits, held ("Spooling input '
            'data files"), until the files arrive; then it is released and polled.'
        )
    elif ad.get("JobStatus") == JobStatus.RUNNING and _text(ad, "RemoteHost"):
        lines.append(f"It runs there on {_text(ad, 'RemoteHost')}.")
    expiration = as_number(ad.get(LOCAL_LEASE))
    duration = as_int(ad.get("JobLeaseDuration"))
    if expiration is not None and expiration > 0:
        how_long = f" (JobLeaseDuration {duration} s)" if duration else ""
        if expiration < time.time():
            lines.append(
                f"Its lease at the remote schedd expired at {_when(expiration)}{how_long}: "
                "unless the grid manager renews it now, the remote schedd has removed "
                "the job."
            )
        else:
            lines.append(
                f"Its lease at the remote schedd runs until {_when(expiration)}{how_long}; "
                "the grid manager renews it. Should the grid manager stay away past it, "
                "the remote schedd removes the job."
            )
    return lines


def _held(ad: ClassAd, managed: str | None, grid_id: _Remote | None) -> list[str]:
    code = as_int(ad.get("HoldReasonCode"))
    name = ""
    if code is not None:
        with contextlib.suppress(ValueError):
            name = f" {HoldReasonCode(code).name}"
    reason = _text(ad, "HoldReason") or "no reason recorded"
    lines = [
        f"Held: {reason} (HoldReasonCode {code}{name}, "
        f"HoldReasonSubCode {as_int(ad.get('HoldReasonSubCode')) or 0})."
    ]
    if managed == "External" and grid_id is not None and grid_id.remote_id:
        lines.append(f"The grid manager is cancelling {grid_id.noun} {grid_id.remote_id} first.")
    else:
        lines.append("`htgrid release` submits it again from the start.")
    return lines


def _removed(managed: str | None, grid_id: _Remote | None) -> list[str]:
    if managed != "External":
        return ["Removed."]
    if grid_id is not None and grid_id.remote_id:
        return [
            f"Removed: the grid manager cancels {grid_id.noun} {grid_id.remote_id}; the job "
            f"leaves the queue once {_lower_first(grid_id.reporter)} confirms."
        ]
    return ["Removed: the grid manager lets it leave the queue (nothing was submitted)."]


def _completed(ad: ClassAd, grid_id: _Remote | None) -> list[str]:
    if ad.get("ExitBySignal") is True:
        how = f"killed by signal {ad.get('ExitSignal')}"
    else:
        how = f"exit code {ad.get('ExitCode')}"
    where = ""
    if grid_id is not None and grid_id.remote_id:
        where = f" as {grid_id.noun} {grid_id.remote_id}"
    wall = as_number(ad.get("RemoteWallClockTime"))
    took = "" if wall is None else f" after {wall:g} s of wall-clock time"
    return [f"Completed{where}: {how}{took}."]


def _active(ad: ClassAd, managed: str | None, grid_id: _Remote | None, resource: str) -> list[str]:
    lines: list[str] = []
    down = _when(ad.get("GridResourceUnavailableTime"))
    if down:
        lines.append(
            f"Resource {resource!r} has been down since {down}: the job waits for it and "
            "does not fail."
        )
    wait = _text(ad, "GridWaitReason")
    if wait:
        lines.append(f"Waiting: {wait}.")
    if grid_id is None:
        if not wait and not down:
            lines.append(
                "Not submitted yet: the grid manager submits it when it picks it up "
                "(is `htgrid gridmanager` running?)."
            )
        return lines
    if grid_id.remote_id is None:
        lines.append(
            f"Being submitted with {grid_id.key_noun} {grid_id.key}: the {grid_id.key_noun} "
            f"is recorded, the {grid_id.noun} id is not known yet (after a restart the grid "
            f"manager looks the {grid_id.key_noun} up)."
        )
        return lines
    submitted = _when(ad.get("GridJobSubmitTime"))
    at = f" at {submitted}" if submitted else ""
    lines.append(f"Submitted to {resource!r} as {grid_id.noun} {grid_id.remote_id}{at}.")
    remote = _text(ad, "GridJobStatus")
    seen = _when(ad.get("LastRemoteStatusUpdate"))
    if remote:
        lines.append(
            f"{grid_id.reporter} last reported it {remote}" + (f" (at {seen})." if seen else ".")
        )
    else:
        lines.append(
            f"No status from {_lower_first(grid_id.reporter)} yet (it is polled periodically)."
        )
    vm_name = _text(ad, "EC2RemoteVirtualMachineName")
    if vm_name:
        lines.append(f"Its public DNS name is {vm_name}.")
    if managed != "External":
        lines.append("The grid manager has not taken it up again yet.")
    return lines
