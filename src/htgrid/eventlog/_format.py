"""HTCondor's text form of user log events, line for line as condor_event.cpp writes them."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from htgrid.eventlog._events import (
    ClusterCompletion,
    ClusterRemoveEvent,
    ClusterSubmitEvent,
    EventLogError,
    ExecutableErrorEvent,
    ExecuteEvent,
    FactoryPausedEvent,
    FactoryResumedEvent,
    GridResourceDownEvent,
    GridResourceUpEvent,
    GridSubmitEvent,
    JobAbortedEvent,
    JobAdInformationEvent,
    JobDisconnectedEvent,
    JobEvictedEvent,
    JobHeldEvent,
    JobImageSizeEvent,
    JobReconnectedEvent,
    JobReconnectFailedEvent,
    JobReleasedEvent,
    JobStatusKnownEvent,
    JobStatusUnknownEvent,
    JobSuspendedEvent,
    JobTerminatedEvent,
    JobUnsuspendedEvent,
    RemoteErrorEvent,
    ResourceUsage,
    Rusage,
    SubmitEvent,
    UserLogEvent,
)
from htgrid.eventlog._values import old_syntax

__all__ = ["EVENT_TERMINATOR", "LogFormat", "format_event"]

EVENT_TERMINATOR = "...\n"


@dataclass(frozen=True)
class LogFormat:
    """How headers print the event time (HTCondor's DEFAULT_USERLOG_FORMAT_OPTIONS).

    The default is HTCondor's: `YYYY-MM-DD HH:MM:SS` in local time. `utc` prints UTC
    with a trailing `Z` (unambiguous across daylight-saving changes), `sub_second`
    adds milliseconds, and `iso_date=False` is the pre-8.8 `MM/DD HH:MM:SS` form.
    """

    iso_date: bool = True
    utc: bool = False
    sub_second: bool = False

    @classmethod
    def from_options(cls, options: str) -> LogFormat:
        """Read a DEFAULT_USERLOG_FORMAT_OPTIONS value, e.g. `"ISO_DATE, UTC"` or `"LEGACY"`.

        Starts from the default, `!` turns an option off, and unknown words are
        ignored as HTCondor does. XML and JSON logs are not supported.
        """
        flags = {"iso_date": cls.iso_date, "utc": cls.utc, "sub_second": cls.sub_second}
        for word in re.split(r"[\s,]+", options.strip()):
            negate = word.startswith("!")
            key = word[1:].lower() if negate else word.lower()
            if key in flags:
                flags[key] = not negate
            elif key == "legacy":
                if negate:
                    flags["iso_date"] = True
                else:
                    flags.update(iso_date=False, utc=False, sub_second=False)
            elif key in ("xml", "json") and not negate:
                raise EventLogError(f"{word.upper()} event logs are not supported")
        return cls(**flags)


def format_event(event: UserLogEvent, fmt: LogFormat | None = None) -> str:
    """The complete text of `event`: header line, body lines and the `...` line.

    `fmt` defaults to HTCondor's own default: ISO date and time, local time zone.
    """
    if not isinstance(event, UserLogEvent):
        raise EventLogError(f"not a user log event: {event!r}")
    return _header(event, fmt or LogFormat()) + _body(event) + EVENT_TERMINATOR


def _header(event: UserLogEvent, fmt: LogFormat) -> str:
    # Whole microseconds first, so 0.123 s does not print as 122 ms.
    seconds, micros = divmod(round(event.timestamp * 1_000_000), 1_000_000)
    try:
        tm = time.gmtime(seconds) if fmt.utc else time.localtime(seconds)
    except (OverflowError, OSError) as exc:
        raise EventLogError(f"cannot print time {event.timestamp}: {exc}") from exc
    clock = f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
    if fmt.iso_date:
        when = f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d} {clock}"
    else:
        when = f"{tm.tm_mon:02d}/{tm.tm_mday:02d} {clock}"
    if fmt.sub_second:
        when += f".{micros // 1000:03d}"
    if fmt.utc:
        when += "Z"
    job = f"{event.cluster:03d}.{event.proc:03d}.{event.subproc:03d}"
    return f"{event.event_number:03d} ({job}) {when} "


# --- text fields -----------------------------------------------------------------------

_ONE_LINE = str.maketrans({"\n": "|", "\r": " ", "\0": " "})


def _line(text: str) -> str:
    """A value kept on one line: HTCondor's rule for reasons (newline to `|`, CR to space).

    HTCondor applies it to reasons only; here it guards every one-line field, so no
    value can end its line early or forge a `...` terminator. NUL, which would end a
    C string, becomes a space too.
    """
    return text.translate(_ONE_LINE)


def _clip(text: str, limit: int = 8191) -> str:
    """HTCondor's `%.8191s`: at most `limit` bytes of UTF-8, never half a character."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


# --- shared pieces ---------------------------------------------------------------------


def _rusage(usage: Rusage) -> str:
    """`\\tUsr D HH:MM:SS, Sys D HH:MM:SS` from whole seconds, as formatRusage prints it."""
    parts = []
    for seconds in (int(usage.user_cpu), int(usage.sys_cpu)):
        days, rest = divmod(seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        parts.append(f"{days} {hours:02d}:{minutes:02d}:{secs:02d}")
    return f"\tUsr {parts[0]}, Sys {parts[1]}"


def _termination(normal: bool, return_value: int | None, signal: int | None) -> str:
    if normal:
        return f"\t(1) Normal termination (return value {return_value})\n"
    return f"\t(0) Abnormal termination (signal {signal})\n"


def _core_file(core_file: str) -> str:
    if core_file:
        return f"\t(1) Corefile in: {_line(core_file)}\n"
    return "\t(0) No core file\n"


_LABEL_UNITS = {
    "Memory": " (MB)",
    "Disk": " (KB)",
    "Gpus": " (Average)",
    "GpusMemory": " (MB)",
    "TimeExecute": " (s)",
    "TimeSlotBusy": " (s)",
}


def _cell(value: int | float | None) -> tuple[str, bool]:
    """A number as the table shows it, and whether it has a fractional part."""
    if value is None:
        return "", False
    if isinstance(value, float):
        # HTCondor prints reals with a positive fraction as %.2f, all others as integers.
        if value - int(value) > 0.0:
            return f"{value:.2f}", True
        return str(int(value)), False
    return str(value), False


def _align(column: list[str], fractional: bool) -> list[str]:
    # Bare integers get three spaces so they line up with the digits before a ".dd".
    if not fractional:
        return column
    return [cell + "   " if cell.isdigit() and cell.isascii() else cell for cell in column]


def _resources(resources: Sequence[ResourceUsage]) -> str:
    """The Partitionable Resources table, rows sorted by name ignoring case."""
    if not resources:
        return ""
    rows = sorted(resources, key=lambda r: r.name.lower())
    columns: list[list[str]] = []
    for attr in ("usage", "request", "allocated"):
        cells = [_cell(getattr(r, attr)) for r in rows]
        columns.append(_align([c for c, _ in cells], any(f for _, f in cells)))
    use, req, alloc = columns
    assigned = ["" if r.assigned is None else old_syntax(r.assigned) for r in rows]
    w_res = max([len("Memory (MB)") + 1] + [len(r.name) for r in rows]) + 8
    w_use = max([8] + [len(c) for c in use])
    w_req = max([8] + [len(c) for c in req])
    w_alloc = max([0] + [len(c) for c in alloc])
    w_assigned = max([0] + [len(c) for c in assigned])
    out = (
        f"\tPartitionable Resources : {'Usage':>{w_use}} {'Request':>{w_req}} "
        f"{'Allocated' if w_alloc else '':>{max(w_alloc, 9)}} "
        f"{'Assigned' if w_assigned else ''}\n"
    )
    for i, row in enumerate(rows):
        label = row.name + _LABEL_UNITS.get(row.name, "")
        out += (
            f"\t   {label:<{w_res}} : {use[i]:>{w_use}} {req[i]:>{w_req}} "
            f"{alloc[i]:>{max(w_alloc, 9)}} {assigned[i]}\n"
        )
    return out


# --- bodies ----------------------------------------------------------------------------


@functools.singledispatch
def _body(event: UserLogEvent) -> str:
    raise EventLogError(f"no text form for {type(event).__name__}")


@_body.register
def _(event: SubmitEvent) -> str:
    out = f"Job submitted from host: {_line(event.submit_host)}\n"
    if event.log_notes:
        out += f"    {_clip(_line(event.log_notes))}\n"
    if event.user_notes:
        out += f"    {_clip(_line(event.user_notes))}\n"
    if event.warnings:
        out += (
            "    WARNING: Committed job submission into the queue with the following "
            f"warning(s): {_clip(_line(event.warnings), 8110)}\n"
        )
    return out


@_body.register
def _(event: ExecuteEvent) -> str:
    out = f"Job executing on host: {_line(event.execute_host)}\n"
    if event.slot_name:
        out += f"\tSlotName: {_line(event.slot_name)}\n"
    return out


_EXEC_ERRORS = {0: "Job file not executable.", 1: "Job not properly linked for Condor."}


@_body.register
def _(event: ExecutableErrorEvent) -> str:
    text = _EXEC_ERRORS.get(event.execute_error_type, "[Bad error number.]")
    return f"({event.execute_error_type}) {text}\n"


@_body.register
def _(event: JobEvictedEvent) -> str:
    out = "Job was evicted."
    if event.reason_code != 0:
        out += f" Code {event.reason_code} Subcode {event.reason_subcode}"
    if event.terminated_and_requeued:
        out += "\n\t(0) Job terminated and was requeued\n\t"
    elif event.checkpointed:
        out += "\n\t(1) Job was checkpointed.\n\t"
    else:
        out += "\n\t(0) CPU times\n\t"
    out += f"{_rusage(event.run_remote_usage)}  -  Run Remote Usage\n\t"
    out += f"{_rusage(event.run_local_usage)}  -  Run Local Usage\n"
    out += f"\t{event.sent_bytes:.0f}  -  Run Bytes Sent By Job\n"
    out += f"\t{event.received_bytes:.0f}  -  Run Bytes Received By Job\n"
    if event.terminated_and_requeued:
        out += _termination(
            event.terminated_normally, event.return_value, event.terminated_by_signal
        )
        if not event.terminated_normally:
            out += _core_file(event.core_file)
    if event.reason:
        prefix = "" if event.terminated_and_requeued else "Reason: "
        out += f"\t{prefix}{_line(event.reason)}\n"
    return out + _resources(event.resources)


@_body.register
def _(event: JobTerminatedEvent) -> str:
    out = "Job terminated.\n"
    out += _termination(event.terminated_normally, event.return_value, event.terminated_by_signal)
    if not event.terminated_normally:
        out += _core_file(event.core_file)
    out += "\t"
    out += f"{_rusage(event.run_remote_usage)}  -  Run Remote Usage\n\t"
    out += f"{_rusage(event.run_local_usage)}  -  Run Local Usage\n\t"
    out += f"{_rusage(event.total_remote_usage)}  -  Total Remote Usage\n\t"
    out += f"{_rusage(event.total_local_usage)}  -  Total Local Usage\n"
    out += f"\t{event.sent_bytes:.0f}  -  Run Bytes Sent By Job\n"
    out += f"\t{event.received_bytes:.0f}  -  Run Bytes Received By Job\n"
    out += f"\t{event.total_sent_bytes:.0f}  -  Total Bytes Sent By Job\n"
    out += f"\t{event.total_received_bytes:.0f}  -  Total Bytes Received By Job\n"
    return out + _resources(event.resources)


@_body.register
def _(event: JobImageSizeEvent) -> str:
    out = f"Image size of job updated: {event.image_size}\n"
    if event.memory_usage is not None:
        out += f"\t{event.memory_usage}  -  MemoryUsage of job (MB)\n"
    if event.resident_set_size is not None:
        out += f"\t{event.resident_set_size}  -  ResidentSetSize of job (KB)\n"
    if event.proportional_set_size is not None:
        out += f"\t{event.proportional_set_size}  -  ProportionalSetSize of job (KB)\n"
    return out


@_body.register
def _(event: JobAbortedEvent) -> str:
    return "Job was aborted.\n" + (f"\t{_line(event.reason)}\n" if event.reason else "")


@_body.register
def _(event: JobSuspendedEvent) -> str:
    return f"Job was suspended.\n\tNumber of processes actually suspended: {event.number_of_pids}\n"


@_body.register
def _(event: JobUnsuspendedEvent) -> str:
    return "Job was unsuspended.\n"


@_body.register
def _(event: JobHeldEvent) -> str:
    reason = _line(event.hold_reason) if event.hold_reason else "Reason unspecified"
    return (
        f"Job was held.\n\t{reason}\n"
        f"\tCode {event.hold_reason_code} Subcode {event.hold_reason_subcode}\n"
    )


@_body.register
def _(event: JobReleasedEvent) -> str:
    return "Job was released.\n" + (f"\t{_line(event.reason)}\n" if event.reason else "")


@_body.register
def _(event: RemoteErrorEvent) -> str:
    kind = "Error" if event.critical_error else "Message"
    out = f"{kind} from {_line(event.daemon)} on {_line(event.execute_host)}:\n"
    # Each line of the message indented by a tab; a final newline adds no empty line.
    message = event.error_msg.translate({ord("\r"): " ", ord("\0"): " "})
    if message:
        for line in message.removesuffix("\n").split("\n"):
            out += f"\t{line}\n"
    if event.hold_reason_code:
        out += f"\tCode {event.hold_reason_code} Subcode {event.hold_reason_subcode}\n"
    return out


@_body.register
def _(event: JobDisconnectedEvent) -> str:
    return (
        "Job disconnected, attempting to reconnect\n"
        f"    {_clip(_line(event.disconnect_reason))}\n"
        f"    Trying to reconnect to {_line(event.startd_name)} {_line(event.startd_addr)}\n"
    )


@_body.register
def _(event: JobReconnectedEvent) -> str:
    return (
        f"Job reconnected to {_line(event.startd_name)}\n"
        f"    startd address: {_line(event.startd_addr)}\n"
        f"    starter address: {_line(event.starter_addr)}\n"
    )


@_body.register
def _(event: JobReconnectFailedEvent) -> str:
    return (
        "Job reconnection failed\n"
        f"    {_clip(_line(event.reason))}\n"
        f"    Can not reconnect to {_line(event.startd_name)}, rescheduling job\n"
    )


def _grid_field(name: str, value: str) -> str:
    return f"    {name}: {_clip(_line(value)) if value else 'UNKNOWN'}\n"


@_body.register
def _(event: GridResourceUpEvent) -> str:
    return "Grid Resource Back Up\n" + _grid_field("GridResource", event.grid_resource)


@_body.register
def _(event: GridResourceDownEvent) -> str:
    return "Detected Down Grid Resource\n" + _grid_field("GridResource", event.grid_resource)


@_body.register
def _(event: GridSubmitEvent) -> str:
    return (
        "Job submitted to grid resource\n"
        + _grid_field("GridResource", event.grid_resource)
        + _grid_field("GridJobId", event.grid_job_id)
    )


@_body.register
def _(event: JobAdInformationEvent) -> str:
    lines = [f"{name} = {old_syntax(value)}\n" for name, value in event.attributes.items()]
    return "Job ad information event triggered.\n" + "".join(lines)


@_body.register
def _(event: JobStatusUnknownEvent) -> str:
    return "The job's remote status is unknown\n"


@_body.register
def _(event: JobStatusKnownEvent) -> str:
    return "The job's remote status is known again\n"


@_body.register
def _(event: ClusterSubmitEvent) -> str:
    out = f"Cluster submitted from host: {_line(event.submit_host)}\n"
    if event.log_notes:
        out += f"    {_clip(_line(event.log_notes))}\n"
    if event.user_notes:
        out += f"    {_clip(_line(event.user_notes))}\n"
    return out


@_body.register
def _(event: ClusterRemoveEvent) -> str:
    # The count and the completion share a line, as condor_event.cpp prints them.
    out = f"Cluster removed\n\tMaterialized {event.next_proc_id} jobs from {event.next_row} items."
    if event.completion <= ClusterCompletion.ERROR:
        out += f"\tError {event.completion}\n"
    elif event.completion == ClusterCompletion.COMPLETE:
        out += "\tComplete\n"
    elif event.completion >= ClusterCompletion.PAUSED:
        out += "\tPaused\n"
    else:
        out += "\tIncomplete\n"
    if event.notes:
        out += f"\t{_line(event.notes)}\n"
    return out


@_body.register
def _(event: FactoryPausedEvent) -> str:
    out = "Job Materialization Paused\n"
    if event.reason or event.pause_code:
        out += f"\t{_line(event.reason)}\n"
    if event.pause_code:
        out += f"\tPauseCode {event.pause_code}\n"
    if event.hold_code:
        out += f"\tHoldCode {event.hold_code}\n"
    return out


@_body.register
def _(event: FactoryResumedEvent) -> str:
    return "Job Materialization Resumed\n" + (f"\t{_line(event.reason)}\n" if event.reason else "")
