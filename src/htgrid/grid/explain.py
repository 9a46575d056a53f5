"""`explain_grid_job`: where a grid job stands and why, from its job ad alone.

For `htgrid q -better-analyze`. It reads what HTCondor's grid manager writes (GridJobId,
GridJobStatus, LastRemoteStatusUpdate, GridResourceUnavailableTime, HoldReason...) plus
htgrid's GridWaitReason (what the job waits for) and GridJobSubmitTime. How a type's
GridJobId reads, and what more a type says of a submitted job (a remote schedd's lease,
a VM's public name), each type declares in its GridType (`remote`, `active_lines`).
"""

from __future__ import annotations

import contextlib

from htgrid.classad import ClassAd
from htgrid.grid._gridtype import Remote
from htgrid.grid._registry import GRID_TYPES, grid_type_of
from htgrid.grid._values import as_int, as_number, as_str, time_text
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["explain_grid_job"]


def _lower_first(text: str) -> str:
    """ "The remote schedd" -> "the remote schedd"; a name keeps its case."""
    return text[:1].lower() + text[1:] if text.startswith("The ") else text


def _text(ad: ClassAd, name: str) -> str | None:
    return as_str(ad.get(name)) or None


def explain_grid_job(ad: ClassAd) -> list[str]:
    """Lines saying where the grid job of `ad` stands and why."""
    if ad.get("JobUniverse") != 9:
        return ["This is not a grid universe job."]
    resource = _text(ad, "GridResource") or ""
    name = grid_type_of(resource)
    gtype = GRID_TYPES.get(name)
    if gtype is None:
        return [f"The grid manager cannot run grid type {name or '(none)'!r} ({resource!r})."]
    lines = [f"Grid job for {resource!r}."]
    status = ad.get("JobStatus")
    managed = _text(ad, "Managed")
    grid_id = gtype.remote(ad)
    if status == JobStatus.HELD:
        lines += _held(ad, managed, grid_id)
    elif status == JobStatus.REMOVED:
        lines += _removed(managed, grid_id)
    elif status == JobStatus.COMPLETED:
        lines += _completed(ad, grid_id)
    else:
        lines += _active(ad, managed, grid_id, resource)
        if grid_id is not None and grid_id.remote_id:
            lines += gtype.active_lines(ad)
    return lines


def _held(ad: ClassAd, managed: str | None, grid_id: Remote | None) -> list[str]:
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


def _removed(managed: str | None, grid_id: Remote | None) -> list[str]:
    if managed != "External":
        return ["Removed."]
    if grid_id is not None and grid_id.remote_id:
        return [
            f"Removed: the grid manager cancels {grid_id.noun} {grid_id.remote_id}; the job "
            f"leaves the queue once {_lower_first(grid_id.reporter)} confirms."
        ]
    return ["Removed: the grid manager lets it leave the queue (nothing was submitted)."]


def _completed(ad: ClassAd, grid_id: Remote | None) -> list[str]:
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


def _active(ad: ClassAd, managed: str | None, grid_id: Remote | None, resource: str) -> list[str]:
    lines: list[str] = []
    down = time_text(ad.get("GridResourceUnavailableTime"))
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
    submitted = time_text(ad.get("GridJobSubmitTime"))
    at = f" at {submitted}" if submitted else ""
    lines.append(f"Submitted to {resource!r} as {grid_id.noun} {grid_id.remote_id}{at}.")
    remote = _text(ad, "GridJobStatus")
    seen = time_text(ad.get("LastRemoteStatusUpdate"))
    if remote:
        lines.append(
            f"{grid_id.reporter} last reported it {remote}" + (f" (at {seen})." if seen else ".")
        )
    else:
        lines.append(
            f"No status from {_lower_first(grid_id.reporter)} yet (it is polled periodically)."
        )
    if managed != "External":
        lines.append("The grid manager has not taken it up again yet.")
    return lines
