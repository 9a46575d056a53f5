"""The events of a user job event log: one frozen dataclass per HTCondor event type.

Field names are the snake_case of the attribute names HTCondor's reader gives each
event (`HoldReasonCode` is `hold_reason_code`), and they hold HTCondor's values:
sizes in KB, memory in MB, CPU time in seconds. Each event carries its own time
(`timestamp`, POSIX seconds); nothing here reads a clock.

One-line text (reasons, hosts, notes) is written as HTCondor writes reasons: a
newline becomes `|` and a carriage return a space, so no value can break the event
apart. Readers trim the spaces around such lines.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from htgrid.eventlog._checks import IDENTIFIER, MAX_TIMESTAMP, Checked, Int64, freeze
from htgrid.eventlog._values import AdValue, EventLogError, RawExpression, old_syntax

__all__ = [
    "AdValue",
    "ClusterCompletion",
    "ClusterRemoveEvent",
    "ClusterSubmitEvent",
    "EventLogError",
    "ExecErrorType",
    "ExecutableErrorEvent",
    "ExecuteEvent",
    "FactoryPausedEvent",
    "FactoryResumedEvent",
    "GridResourceDownEvent",
    "GridResourceUpEvent",
    "GridSubmitEvent",
    "JobAbortedEvent",
    "JobAdInformationEvent",
    "JobDisconnectedEvent",
    "JobEvictedEvent",
    "JobHeldEvent",
    "JobImageSizeEvent",
    "JobReconnectFailedEvent",
    "JobReconnectedEvent",
    "JobReleasedEvent",
    "JobStatusKnownEvent",
    "JobStatusUnknownEvent",
    "JobSuspendedEvent",
    "JobTerminatedEvent",
    "JobUnsuspendedEvent",
    "RawExpression",
    "RemoteErrorEvent",
    "ResourceUsage",
    "Rusage",
    "SubmitEvent",
    "UserLogEvent",
]


@dataclass(frozen=True, kw_only=True)
class Rusage(Checked):
    """CPU time used, in seconds of user and system time (the log shows whole seconds)."""

    user_cpu: float = 0
    sys_cpu: float = 0


@dataclass(frozen=True, kw_only=True)
class ResourceUsage(Checked):
    """One row of the Partitionable Resources table, e.g. `Memory` (MB) or `Disk` (KB).

    The reader gives it back as `<name>Usage`, `Request<name>`, `<name>` (allocated)
    and `Assigned<name>`; empty cells are left out.
    """

    name: str
    usage: Int64 | float | None = None
    request: Int64 | float | None = None
    allocated: Int64 | float | None = None
    assigned: str | None = None

    def _validate(self) -> None:
        # The reader takes the row's first word as the resource's attribute name.
        if not IDENTIFIER.match(self.name):
            self._fail(f"resource name {self.name!r} is not a ClassAd attribute name")
        if self.assigned is not None:
            try:
                old_syntax(self.assigned)
            except EventLogError as exc:
                self._fail(str(exc))


@dataclass(frozen=True, kw_only=True)
class UserLogEvent(Checked):
    """What every event has: its number, the job id, and when it happened."""

    event_number: ClassVar[int]
    #: An event of a whole cluster (a late materialization factory's): proc is -1.
    cluster_level: ClassVar[bool] = False

    cluster: int
    proc: int
    timestamp: float
    subproc: int = 0

    def __post_init__(self) -> None:
        if type(self) is UserLogEvent:
            raise EventLogError("UserLogEvent is abstract: use one of its event types")
        super().__post_init__()
        for name in ("cluster", "proc", "subproc"):
            if getattr(self, name) < 0 and not (name == "proc" and self.cluster_level):
                self._fail(f"{name} must be >= 0")
        if self.cluster_level and self.proc != -1:
            self._fail("an event of a whole cluster has proc -1")
        if self.timestamp >= MAX_TIMESTAMP:
            self._fail(f"timestamp {self.timestamp} is past year 9999")


def _check_termination(event: JobTerminatedEvent | JobEvictedEvent) -> None:
    """Normal exits carry a return value, abnormal ones a signal (and maybe a core file)."""
    if event.terminated_normally:
        if event.return_value is None:
            event._fail("a normal termination needs return_value")
        if event.terminated_by_signal is not None or event.core_file:
            event._fail("a normal termination has no terminated_by_signal or core_file")
    else:
        if event.terminated_by_signal is None:
            event._fail("an abnormal termination needs terminated_by_signal")
        if event.return_value is not None:
            event._fail("an abnormal termination has no return_value")


def _check_resources(event: JobTerminatedEvent | JobEvictedEvent) -> None:
    names = [r.name.lower() for r in event.resources]
    if len(set(names)) != len(names):
        event._fail("resource names must differ (case does not count)")


def _check_required(event: UserLogEvent, *names: str) -> None:
    for name in names:
        if not getattr(event, name):
            event._fail(f"{name} must not be empty")


@dataclass(frozen=True, kw_only=True)
class SubmitEvent(UserLogEvent):
    """000: the job entered the queue.

    Readers take the first notes line as log notes (DAGMan's `DAG Node: name`) and
    the second as user notes, so user notes without log notes read back as log notes.
    """

    event_number: ClassVar[int] = 0
    submit_host: str
    log_notes: str = ""
    user_notes: str = ""
    warnings: str = ""


@dataclass(frozen=True, kw_only=True)
class ExecuteEvent(UserLogEvent):
    """001: the job started running."""

    event_number: ClassVar[int] = 1
    execute_host: str
    slot_name: str = ""


class ExecErrorType(enum.IntEnum):
    """Why the executable could not run (`ExecuteErrorType`)."""

    NOT_EXECUTABLE = 0
    BAD_LINK = 1


@dataclass(frozen=True, kw_only=True)
class ExecutableErrorEvent(UserLogEvent):
    """002: the executable could not be run."""

    event_number: ClassVar[int] = 2
    execute_error_type: int = ExecErrorType.NOT_EXECUTABLE


@dataclass(frozen=True, kw_only=True)
class JobEvictedEvent(UserLogEvent):
    """004: the job left its machine before finishing, or finished and was requeued."""

    event_number: ClassVar[int] = 4
    checkpointed: bool = False
    run_remote_usage: Rusage = Rusage()
    run_local_usage: Rusage = Rusage()
    sent_bytes: float = 0
    received_bytes: float = 0
    terminated_and_requeued: bool = False
    terminated_normally: bool = False
    return_value: int | None = None
    terminated_by_signal: int | None = None
    core_file: str = ""
    reason: str = ""
    reason_code: int = 0
    reason_subcode: int = 0
    resources: Sequence[ResourceUsage] = ()

    def _validate(self) -> None:
        _check_resources(self)
        if self.terminated_and_requeued:
            if self.checkpointed:
                self._fail("a requeued job is not also checkpointed")
            _check_termination(self)
        elif (
            self.terminated_normally
            or self.return_value is not None
            or self.terminated_by_signal is not None
            or self.core_file
        ):
            self._fail("termination details need terminated_and_requeued=True")


@dataclass(frozen=True, kw_only=True)
class JobTerminatedEvent(UserLogEvent):
    """005: the job finished, by exiting (return_value) or by a signal."""

    event_number: ClassVar[int] = 5
    terminated_normally: bool
    return_value: int | None = None
    terminated_by_signal: int | None = None
    core_file: str = ""
    run_remote_usage: Rusage = Rusage()
    run_local_usage: Rusage = Rusage()
    total_remote_usage: Rusage = Rusage()
    total_local_usage: Rusage = Rusage()
    sent_bytes: float = 0
    received_bytes: float = 0
    total_sent_bytes: float = 0
    total_received_bytes: float = 0
    resources: Sequence[ResourceUsage] = ()

    def _validate(self) -> None:
        _check_resources(self)
        _check_termination(self)


@dataclass(frozen=True, kw_only=True)
class JobImageSizeEvent(UserLogEvent):
    """006: the job's memory footprint changed (image and set sizes in KB, usage in MB)."""

    event_number: ClassVar[int] = 6
    image_size: Int64
    memory_usage: Int64 | None = None
    resident_set_size: Int64 | None = None
    proportional_set_size: Int64 | None = None

    def _validate(self) -> None:
        for name in ("image_size", "memory_usage", "resident_set_size", "proportional_set_size"):
            value = getattr(self, name)
            if value is not None and value < 0:
                self._fail(f"{name} must be >= 0")


@dataclass(frozen=True, kw_only=True)
class JobAbortedEvent(UserLogEvent):
    """009: the job was removed from the queue."""

    event_number: ClassVar[int] = 9
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class JobSuspendedEvent(UserLogEvent):
    """010: the job's processes were suspended."""

    event_number: ClassVar[int] = 10
    number_of_pids: int


@dataclass(frozen=True, kw_only=True)
class JobUnsuspendedEvent(UserLogEvent):
    """011: the job's processes were resumed."""

    event_number: ClassVar[int] = 11


@dataclass(frozen=True, kw_only=True)
class JobHeldEvent(UserLogEvent):
    """012: the job was put on hold."""

    event_number: ClassVar[int] = 12
    hold_reason: str = ""
    hold_reason_code: int = 0
    hold_reason_subcode: int = 0


@dataclass(frozen=True, kw_only=True)
class JobReleasedEvent(UserLogEvent):
    """013: the job was released from hold."""

    event_number: ClassVar[int] = 13
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class RemoteErrorEvent(UserLogEvent):
    """021: a daemon on the execute side reported an error (error_msg may span lines).

    A non-critical one is written as "Message from ...", as HTCondor writes it; its
    reader knows only "Warning", so it reads every 021 event back as critical.
    """

    event_number: ClassVar[int] = 21
    daemon: str
    execute_host: str
    error_msg: str = ""
    critical_error: bool = True
    hold_reason_code: int = 0
    hold_reason_subcode: int = 0

    def _validate(self) -> None:
        # The reader splits "<type> from <daemon> on <host>:" and needs both parts.
        _check_required(self, "daemon", "execute_host")


@dataclass(frozen=True, kw_only=True)
class JobDisconnectedEvent(UserLogEvent):
    """022: the shadow lost its connection to the job and is trying to reconnect."""

    event_number: ClassVar[int] = 22
    startd_name: str
    startd_addr: str
    disconnect_reason: str

    def _validate(self) -> None:
        # HTCondor refuses to write these events with an empty field; so do we.
        _check_required(self, "startd_name", "startd_addr", "disconnect_reason")


@dataclass(frozen=True, kw_only=True)
class JobReconnectedEvent(UserLogEvent):
    """023: the shadow reconnected to the running job."""

    event_number: ClassVar[int] = 23
    startd_name: str
    startd_addr: str
    starter_addr: str

    def _validate(self) -> None:
        _check_required(self, "startd_name", "startd_addr", "starter_addr")


@dataclass(frozen=True, kw_only=True)
class JobReconnectFailedEvent(UserLogEvent):
    """024: reconnecting failed; the job will be rescheduled."""

    event_number: ClassVar[int] = 24
    startd_name: str
    reason: str

    def _validate(self) -> None:
        _check_required(self, "startd_name", "reason")


@dataclass(frozen=True, kw_only=True)
class GridResourceUpEvent(UserLogEvent):
    """025: the job's grid resource answers again."""

    event_number: ClassVar[int] = 25
    grid_resource: str = ""


@dataclass(frozen=True, kw_only=True)
class GridResourceDownEvent(UserLogEvent):
    """026: the job's grid resource stopped answering."""

    event_number: ClassVar[int] = 26
    grid_resource: str = ""


@dataclass(frozen=True, kw_only=True)
class GridSubmitEvent(UserLogEvent):
    """027: the job was submitted to its grid resource and has a remote id."""

    event_number: ClassVar[int] = 27
    grid_resource: str = ""
    grid_job_id: str = ""


@dataclass(frozen=True, kw_only=True)
class JobAdInformationEvent(UserLogEvent):
    """028: selected job ad attributes (`JobAdInformationAttrs`), in their written order."""

    event_number: ClassVar[int] = 28
    attributes: Mapping[str, AdValue]

    def _validate(self) -> None:
        if not isinstance(self.attributes, Mapping):
            self._fail(f"attributes must be a mapping, got {self.attributes!r}")
        if not self.attributes:
            # HTCondor's reader rejects an 028 event without attributes.
            self._fail("attributes must not be empty")
        for name, value in self.attributes.items():
            if not isinstance(name, str) or not IDENTIFIER.match(name):
                self._fail(f"{name!r} is not a ClassAd attribute name")
            try:
                old_syntax(value)
            except EventLogError as exc:
                self._fail(f"attribute {name}: {exc}")
        # A private copy, so the event stays what it was when built.
        frozen = {name: freeze(value) for name, value in self.attributes.items()}
        object.__setattr__(self, "attributes", types.MappingProxyType(frozen))


@dataclass(frozen=True, kw_only=True)
class JobStatusUnknownEvent(UserLogEvent):
    """029: the grid job's remote status has not been heard for a long time."""

    event_number: ClassVar[int] = 29


@dataclass(frozen=True, kw_only=True)
class JobStatusKnownEvent(UserLogEvent):
    """030: the grid job's remote status is known again."""

    event_number: ClassVar[int] = 30


# --- the events of a cluster: HTCondor writes them for late materialization factories,
# with proc -1 (the header shows `(042.-01.000)`).


@dataclass(frozen=True, kw_only=True)
class ClusterSubmitEvent(UserLogEvent):
    """035: a late materialization factory entered the queue (before its jobs' 000s)."""

    event_number: ClassVar[int] = 35
    cluster_level: ClassVar[bool] = True
    proc: int = -1
    submit_host: str
    log_notes: str = ""
    user_notes: str = ""


class ClusterCompletion(enum.IntEnum):
    """How a factory ended (the 036 event's `Completion`)."""

    ERROR = -1
    INCOMPLETE = 0  # removed before it made every proc
    COMPLETE = 1  # it made every proc
    PAUSED = 2


@dataclass(frozen=True, kw_only=True)
class ClusterRemoveEvent(UserLogEvent):
    """036: a factory's cluster left the queue, its last job gone.

    `next_proc_id` is how many jobs it made (JobMaterializeNextProcId), `next_row` the
    next row of its item data (JobMaterializeNextRow: 0 for a plain `queue N`).
    """

    event_number: ClassVar[int] = 36
    cluster_level: ClassVar[bool] = True
    proc: int = -1
    next_proc_id: int = 0
    next_row: int = 0
    completion: int = ClusterCompletion.INCOMPLETE
    notes: str = ""


@dataclass(frozen=True, kw_only=True)
class FactoryPausedEvent(UserLogEvent):
    """037: the factory stopped making jobs for now (its cluster held: pause_code 1,
    JobMaterializePaused, and the hold's reason and code)."""

    event_number: ClassVar[int] = 37
    cluster_level: ClassVar[bool] = True
    proc: int = -1
    reason: str = ""
    pause_code: int = 0
    hold_code: int = 0


@dataclass(frozen=True, kw_only=True)
class FactoryResumedEvent(UserLogEvent):
    """038: the factory makes jobs again (its cluster released)."""

    event_number: ClassVar[int] = 38
    cluster_level: ClassVar[bool] = True
    proc: int = -1
    reason: str = ""
