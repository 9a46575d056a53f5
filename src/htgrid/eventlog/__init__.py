"""The user job event log: the file a job's `log = ...` names, in HTCondor's text format.

Build an event (one frozen dataclass per event type, each carrying its own time),
turn it into text with `format_event`, or append it to a log with `UserLog`:

    log = UserLog("/home/alice/job.log")
    log.append(JobHeldEvent(cluster=42, proc=0, timestamp=time.time(),
                            hold_reason="Spooling input data files",
                            hold_reason_code=16, hold_reason_subcode=0))

The text is what condor_event.cpp writes, so `condor_wait`, DAGMan and
`htcondor2.JobEventLog` read these logs as their own. `EventLogReader` reads them back
incrementally (what `htgrid wait` follows).
"""

from __future__ import annotations

from htgrid.eventlog._events import (
    AdValue,
    ClusterCompletion,
    ClusterRemoveEvent,
    ClusterSubmitEvent,
    EventLogError,
    ExecErrorType,
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
    RawExpression,
    RemoteErrorEvent,
    ResourceUsage,
    Rusage,
    SubmitEvent,
    UserLogEvent,
)
from htgrid.eventlog._format import EVENT_TERMINATOR, LogFormat, format_event
from htgrid.eventlog._reader import EventLogReader, LoggedEvent
from htgrid.eventlog._writer import UserLog

__all__ = [
    "EVENT_TERMINATOR",
    "AdValue",
    "ClusterCompletion",
    "ClusterRemoveEvent",
    "ClusterSubmitEvent",
    "EventLogError",
    "EventLogReader",
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
    "LogFormat",
    "LoggedEvent",
    "RawExpression",
    "RemoteErrorEvent",
    "ResourceUsage",
    "Rusage",
    "SubmitEvent",
    "UserLog",
    "UserLogEvent",
    "format_event",
]
