"""The HTCondor event a committed change of the job queue makes in a job's user log.

A job's change: 001 executing, 004 evicted (or terminated and requeued), 005 terminated,
009 aborted, 010 suspended and 011 unsuspended (by its node's policy), 012 held, 013 released, 022 disconnected, 023 reconnected and 024
reconnection failed. A late materialization factory's change: 035 cluster submitted, 037
materialization paused, 038 resumed, 036 cluster removed. (000 submitted needs nothing
but the job: the writer, `_userlog`, makes it.) Each event carries the change's time.
"""

from __future__ import annotations

from typing import Any, Final

from htgrid.classad import ClassAd
from htgrid.eventlog import (
    ClusterCompletion,
    ClusterRemoveEvent,
    ClusterSubmitEvent,
    ExecuteEvent,
    FactoryPausedEvent,
    FactoryResumedEvent,
    JobAbortedEvent,
    JobDisconnectedEvent,
    JobEvictedEvent,
    JobHeldEvent,
    JobReconnectedEvent,
    JobReconnectFailedEvent,
    JobReleasedEvent,
    JobSuspendedEvent,
    JobTerminatedEvent,
    JobUnsuspendedEvent,
    Rusage,
    UserLogEvent,
)
from htgrid.queue import Change, ChangeKind, JobId, JobStatus

__all__ = ["events_for", "factory_event", "is_disconnection"]

_SCHEDULER: Final = 7  # JobUniverse
_RUNNING: Final = frozenset({JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED})

#: The 036 event's Completion by the mode a factory ended in (JobMaterializePaused).
_COMPLETION: Final = {
    -1: ClusterCompletion.ERROR,
    1: ClusterCompletion.PAUSED,
    2: ClusterCompletion.COMPLETE,  # every proc made
}


def _usage(ad: ClassAd, user: str, system: str) -> Rusage:
    if ad.get("JobUniverse") == _SCHEDULER:
        # HTCondor's schedd measures no usage of its scheduler universe jobs: its 005 and
        # 004 events show zeros (Scheduler::WriteTerminateToUserLog); the ad keeps ours.
        return Rusage()
    return Rusage(user_cpu=_number(ad.get(user)), sys_cpu=_number(ad.get(system)))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value >= 0 else 0.0


def _exit(change: Change, ad: ClassAd) -> dict[str, Any]:
    """How the job's process ended, from the change (else the ad)."""

    def get(name: str) -> Any:
        return change.attrs.get(name, ad.get(name))

    if get("ExitBySignal") is True:
        sig = get("ExitSignal")
        return {
            "terminated_normally": False,
            "terminated_by_signal": sig if type(sig) is int else 0,
        }
    code = get("ExitCode")
    return {"terminated_normally": True, "return_value": code if type(code) is int else 0}


def events_for(change: Change, jid: JobId, ad: ClassAd, host: str) -> UserLogEvent | None:
    """The event a status change writes (None for changes HTCondor logs nothing for)."""
    head: dict[str, Any] = {"cluster": jid.cluster, "proc": jid.proc, "timestamp": change.time}
    attrs = change.attrs
    if change.kind is ChangeKind.ATTRIBUTES:
        return _disconnection_event(change, head, ad) if is_disconnection(change) else None
    new, old = change.status, change.last_status
    if new == JobStatus.RUNNING and old not in _RUNNING:
        # A grid job runs on its grid resource, which is what HTCondor names here.
        grid = ad.get("GridResource") if ad.get("JobUniverse") == 9 else None
        return ExecuteEvent(**head, execute_host=str(grid) if grid else host)
    if new == JobStatus.SUSPENDED and old == JobStatus.RUNNING:  # its node's SUSPEND
        # The node stops the job's process group as one; it does not count its members.
        return JobSuspendedEvent(**head, number_of_pids=1)
    if new == JobStatus.RUNNING and old == JobStatus.SUSPENDED:
        return JobUnsuspendedEvent(**head)
    if new == JobStatus.HELD:
        return JobHeldEvent(
            **head,
            hold_reason=str(attrs.get("HoldReason", "")),
            hold_reason_code=_int(attrs.get("HoldReasonCode")),
            hold_reason_subcode=_int(attrs.get("HoldReasonSubCode")),
        )
    if new == JobStatus.REMOVED:
        return JobAbortedEvent(**head, reason=str(attrs.get("RemoveReason", "")))
    if new == JobStatus.IDLE and old == JobStatus.HELD:
        return JobReleasedEvent(**head, reason=str(attrs.get("ReleaseReason", "")))
    run = _usage(ad, "RemoteUserCpu", "RemoteSysCpu")
    if new == JobStatus.IDLE and old in _RUNNING:
        if "NumJobCompletions" in attrs:  # exited, and its policy sent it back to idle
            return JobEvictedEvent(
                **head, terminated_and_requeued=True, run_remote_usage=run, **_exit(change, ad)
            )
        return JobEvictedEvent(
            **head,
            run_remote_usage=run,
            reason=str(attrs.get("VacateReason", "")),
            reason_code=_int(attrs.get("VacateReasonCode")),
            reason_subcode=_int(attrs.get("VacateReasonSubCode")),
        )
    if new == JobStatus.COMPLETED:
        total = _usage(ad, "CumulativeRemoteUserCpu", "CumulativeRemoteSysCpu")
        return JobTerminatedEvent(
            **head, run_remote_usage=run, total_remote_usage=total, **_exit(change, ad)
        )
    return None


def factory_event(change: Change, host: str) -> UserLogEvent:
    """The event of a change of a factory (its cluster's, proc -1), as the schedd's
    WriteClusterSubmitToUserLog, WriteFactoryPauseToUserLog and
    WriteClusterRemoveToUserLog make it."""
    head: dict[str, Any] = {"cluster": change.cluster, "timestamp": change.time}
    attrs = change.attrs
    if change.kind is ChangeKind.FACTORY_SUBMITTED:
        return ClusterSubmitEvent(**head, submit_host=host)
    if change.kind is ChangeKind.FACTORY_PAUSED:
        return FactoryPausedEvent(
            **head,
            reason=str(attrs.get("JobMaterializePauseReason", "")),
            pause_code=_int(attrs.get("JobMaterializePaused")),
            hold_code=_int(attrs.get("HoldReasonCode")),
        )
    if change.kind is ChangeKind.FACTORY_RESUMED:
        return FactoryResumedEvent(**head, reason=str(attrs.get("ReleaseReason", "")))
    mode = _int(attrs.get("JobMaterializePaused"))
    return ClusterRemoveEvent(
        **head,
        next_proc_id=_int(attrs.get("JobMaterializeNextProcId")),
        next_row=_int(attrs.get("JobMaterializeNextRow")),
        completion=_COMPLETION.get(mode, ClusterCompletion.INCOMPLETE),
        notes=str(attrs.get("JobMaterializePauseReason", "")),
    )


def is_disconnection(change: Change) -> bool:
    """Whether the change stamps a job disconnected, or clears that stamp."""
    return "jobdisconnecteddate" in change.stored.lower() and "JobDisconnectedDate" in change.attrs


def _disconnection_event(change: Change, head: dict[str, Any], ad: ClassAd) -> UserLogEvent | None:
    """022 when the schedd loses contact with the job's node (JobDisconnectedDate set,
    with DisconnectReason: HTCondor's text); 023 when it reconnects to the run (the
    stamp cleared as NumJobReconnects grows); 024 when it gives up on that run (the
    stamp cleared, VacateReason saying why). The node is named by the job's slot
    (RemoteHost) and reached at StartdIpAddr, as HTCondor's events name the startd."""
    node = str(ad.get("LastRemoteHost") or "unknown")
    address = str(ad.get("StartdIpAddr") or "unknown")
    attrs = change.attrs
    if type(attrs.get("JobDisconnectedDate")) is int:
        why = attrs.get("DisconnectReason")
        return JobDisconnectedEvent(
            **head,
            startd_name=node,
            startd_addr=address,
            disconnect_reason=why if isinstance(why, str) and why else "Unknown reason",
        )
    if "NumJobReconnects" in attrs:
        # The starter is the node's own process: it is reached where the node is.
        return JobReconnectedEvent(
            **head, startd_name=node, startd_addr=address, starter_addr=address
        )
    why = attrs.get("VacateReason")
    return JobReconnectFailedEvent(
        **head,
        startd_name=node,
        reason=why if isinstance(why, str) and why else "Reconnect is not supported",
    )


def _int(value: Any) -> int:
    return value if type(value) is int else 0
