"""`explain_grid_job`: where a grid job stands and why, from its job ad alone.

For `htgrid q -better-analyze`. It reads what HTCondor's grid manager writes (GridJobId,
GridJobStatus, LastRemoteStatusUpdate, GridResourceUnavailableTime, HoldReason...) plus
htgrid's GridWaitReason (what the job waits for) and GridJobSubmitTime.
"""

from __future__ import annotations

import contextlib
import time

from htgrid.classad import ClassAd
from htgrid.grid._gridids import BatchJobId, grid_type_of
from htgrid.grid._values import as_int, as_number, as_str
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["explain_grid_job"]

_KNOWN_TYPES = frozenset({"batch"})


def _when(value: object) -> str | None:
    number = as_number(value)
    if number is None or number <= 0:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(number))


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
    grid_id = BatchJobId.parse(ad.get("GridJobId"))
    if status == JobStatus.HELD:
        lines += _held(ad, managed, grid_id)
    elif status == JobStatus.REMOVED:
        lines += _removed(managed, grid_id)
    elif status == JobStatus.COMPLETED:
        lines += _completed(ad, grid_id)
    else:
        lines += _active(ad, managed, grid_id, resource)
    return lines


def _held(ad: ClassAd, managed: str | None, grid_id: BatchJobId | None) -> list[str]:
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
    if managed == "External" and grid_id is not None and grid_id.blah_id:
        lines.append(f"The grid manager is cancelling batch job {grid_id.blah_id} first.")
    else:
        lines.append("`htgrid release` submits it again from the start.")
    return lines


def _removed(managed: str | None, grid_id: BatchJobId | None) -> list[str]:
    if managed != "External":
        return ["Removed."]
    if grid_id is not None and grid_id.blah_id:
        return [
            f"Removed: the grid manager cancels batch job {grid_id.blah_id}; the job leaves "
            "the queue once the batch system confirms."
        ]
    return ["Removed: the grid manager lets it leave the queue (nothing was submitted)."]


def _completed(ad: ClassAd, grid_id: BatchJobId | None) -> list[str]:
    if ad.get("ExitBySignal") is True:
        how = f"killed by signal {ad.get('ExitSignal')}"
    else:
        how = f"exit code {ad.get('ExitCode')}"
    where = f" as batch job {grid_id.blah_id}" if grid_id is not None and grid_id.blah_id else ""
    wall = as_number(ad.get("RemoteWallClockTime"))
    took = "" if wall is None else f" after {wall:g} s of wall-clock time"
    return [f"Completed{where}: {how}{took}."]


def _active(
    ad: ClassAd, managed: str | None, grid_id: BatchJobId | None, resource: str
) -> list[str]:
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
    if grid_id.blah_id is None:
        lines.append(
            f"Being submitted with tag {grid_id.tag}: the tag is recorded, the batch job id "
            "is not known yet (after a restart the grid manager looks the tag up)."
        )
        return lines
    submitted = _when(ad.get("GridJobSubmitTime"))
    at = f" at {submitted}" if submitted else ""
    lines.append(f"Submitted to {resource!r} as batch job {grid_id.blah_id}{at}.")
    remote = _text(ad, "GridJobStatus")
    seen = _when(ad.get("LastRemoteStatusUpdate"))
    if remote:
        lines.append(
            f"The batch system last reported it {remote}" + (f" (at {seen})." if seen else ".")
        )
    else:
        lines.append("No status from the batch system yet (it is polled periodically).")
    if managed != "External":
        lines.append("The grid manager has not taken it up again yet.")
    return lines
