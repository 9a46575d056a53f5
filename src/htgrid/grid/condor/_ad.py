"""What an HTCondor-C job sends and reads: the remote ad, the stage-in ad, the remote status.

The remote ad is built as HTCondor's CondorJob::buildSubmitAd does: the local ad minus
the local bookkeeping, born held ("Spooling input data files", HoldReasonCode 16) until
its input is staged, `Remote_X` turned into `X`, the submitter's ids (`SubmitterId`, the
local queue; `SubmitterGlobalJobId`, the local job), `LeaveJobInQueue` true until the
output was fetched, and a lease. htgrid adds `GridSubmitTag`, the submission's
idempotency key, committed locally before the submit: a lost submit is found by it.
"""

from __future__ import annotations

import copy
import hashlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree, select_attrs
from htgrid.classad.fast import entries
from htgrid.errors import ClassAdSyntaxError
from htgrid.grid._values import as_int, as_number, as_str, is_plain
from htgrid.grid.condor._ids import CondorJobId

__all__ = [
    "DEFAULT_LEASE",
    "LOCAL_LEASE",
    "SPOOLING_REASON",
    "RemoteJob",
    "build_remote_ad",
    "build_stage_in_ad",
    "submitter_id",
]

#: JobLeaseDuration when the job names none (HTCondor's 40 minutes).
DEFAULT_LEASE = 2400
#: Where the local job records the expiration of the lease its remote copy holds.
#: Not JobLeaseExpiration, as HTCondor's local ad: htgrid's queue removes any job whose
#: JobLeaseExpiration passed, which is right for the remote copy and wrong for the
#: local job of a submitter that was away longer than the lease.
LOCAL_LEASE = "GridJobLeaseExpiration"
#: The hold reason of a remote job waiting for its input (HTCondor's CONDOR_HOLD_CODE 16).
SPOOLING_REASON = "Spooling input data files"
SPOOLING_CODE = 16
#: How long a remote job may wait for its input before its schedd removes it (8 hours).
STAGE_IN_LIMIT = 8 * 3600


def submitter_id(home: Path | None) -> str:
    """This grid manager's SubmitterId: the host and its pool home, stable across restarts.

    HTCondor uses the local schedd's name; two pools on one host would share that, so the
    pool home is part of it (a digest, so that no path travels).
    """
    where = str(home.resolve()) if home is not None else os.getcwd()
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    return f"htgrid@{socket.gethostname()}#{digest}"


# ---- the remote ad -----------------------------------------------------------------------

# What the remote ad never carries (CondorJob::buildSubmitAd's list, plus htgrid's own
# grid bookkeeping): the local queue's ids, policy evaluated here, hold history, leases.
_DROP = frozenset(
    name.lower()
    for name in (
        "ClusterId",
        "ProcId",
        "User",
        "Owner",
        "GridResource",
        "GridJobId",
        "GridJobStatus",
        "GridSubmitTag",
        "GridWaitReason",
        "GridJobSubmitTime",
        "GridResourceUnavailableTime",
        "LastRemoteStatusUpdate",
        "Matched",
        "Managed",
        "StageInFinish",
        "StageInStart",
        "StageOutFinish",
        "StageOutStart",
        "ScheddBday",
        "FileSystemDomain",
        "UserLog",
        "UserLogUseXML",
        "DAGManNodesLog",
        "NotifyUser",
        "OnExitHold",
        "OnExitRemove",
        "PeriodicHold",
        "PeriodicRelease",
        "PeriodicRemove",
        "ServerTime",
        "GlobalJobId",
        "CondorPlatform",
        "CondorVersion",
        "WantClaiming",
        "WantMatching",
        "HoldReason",
        "HoldReasonCode",
        "HoldReasonSubCode",
        "LastHoldReason",
        "LastHoldReasonCode",
        "LastHoldReasonSubCode",
        "ReleaseReason",
        "LastReleaseReason",
        "RemoveReason",
        "JobStatusOnRelease",
        "LastJobLeaseRenewal",
        "JobLeaseDuration",
        "TimerRemove",
        "JobLeaseExpiration",
        LOCAL_LEASE,
        "AutoClusterId",
        "AutoClusterAttrs",
        "TotalSubmitProcs",
        "RemoteHost",
        "LastRemoteHost",
        "EnteredCurrentStatus",
        "JobStartDate",
        "JobCurrentStartDate",
        "LastJobStatus",
    )
)
# Counters a fresh remote job starts from (buildSubmitAd assigns them).
_FRESH: Mapping[str, Any] = {
    "CurrentHosts": 0,
    "CompletionDate": 0,
    "RemoteWallClockTime": 0.0,
    "LocalUserCpu": 0.0,
    "LocalSysCpu": 0.0,
    "RemoteUserCpu": 0.0,
    "RemoteSysCpu": 0.0,
    "ExitStatus": 0,
    "NumCkpts": 0,
    "NumRestarts": 0,
    "NumSystemHolds": 0,
    "CommittedTime": 0,
    "CommittedSlotTime": 0,
    "CumulativeSlotTime": 0,
    "TotalSuspensions": 0,
    "LastSuspensionTime": 0,
    "CumulativeSuspensionTime": 0,
    "CommittedSuspensionTime": 0,
    "ExitBySignal": False,
    "JobNotification": 0,
}
_ABSENT: Final = object()
_ENV = frozenset({"env", "envdelim", "environment"})
_ARGS = frozenset({"args", "arguments"})
_NULL_FILES = frozenset({"", "/dev/null"})
_VANILLA = 5


def _literal(ad: ClassAd, name: str) -> Any:
    try:
        value = ad[name]  # a constant as it is: most are, and need no evaluation
    except KeyError:
        return None
    if isinstance(value, ExprTree):
        try:
            value = ad.eval(name)
        except (KeyError, TypeError, ValueError):
            return None
    return value if is_plain(value) else None


def _local_path(path: str, iwd: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(iwd, path))


def _inputs(text: object) -> list[str]:
    if not isinstance(text, str):
        return []
    return [item.strip() for item in text.split(",") if item.strip()]


def lease_duration(ad: ClassAd) -> int:
    """The job's JobLeaseDuration (seconds), HTCondor's 2400 when it names none."""
    value = as_int(_literal(ad, "JobLeaseDuration"))
    return value if value is not None and value > 0 else DEFAULT_LEASE


def transfers_executable(ad: ClassAd) -> bool:
    return _literal(ad, "TransferExecutable") is not False


def _born() -> ClassAd:
    """What every remote ad has the same: the counters it starts from, held for its input."""
    ad = ClassAd()
    ad["JobUniverse"] = _VANILLA
    ad.update(_FRESH)
    ad["JobStatus"] = 5
    ad["HoldReason"] = SPOOLING_REASON
    ad["HoldReasonCode"] = SPOOLING_CODE
    ad["HoldReasonSubCode"] = 0
    # Kept after completion until the output is fetched, but not past the lease: a
    # submitter gone for good does not leave the job there forever.
    ad["LeaveJobInQueue"] = ExprTree(
        "JobStatus == 4 && (JobLeaseExpiration =?= undefined || time() < JobLeaseExpiration)"
    )
    ad["PeriodicRemove"] = ExprTree(
        f"(StageInFinish > 0) =!= true && time() > QDate + {STAGE_IN_LIMIT}"
    )
    return ad


#: Made once; each remote ad takes its expressions as they are (ClassAd.update).
_BORN: Final = _born()


@dataclass(frozen=True, slots=True)
class _Plan:
    """What building a remote ad does with a local ad's names: the same for every job of
    a cluster, so worked out once for each set of names."""

    drop: tuple[str, ...]
    #: (X, Remote_X): the remote value of X.
    remote: tuple[tuple[str, str], ...]
    #: The environment and argument attributes a Remote_ one of their group replaces.
    groups: tuple[frozenset[str], ...]


_PLANS: dict[tuple[str, ...], _Plan] = {}
_PLANS_MAX = 256


def _plan(names: tuple[str, ...]) -> _Plan:
    plan = _PLANS.get(names)
    if plan is None:
        lowered = [(name, name.lower()) for name in names]
        remote = tuple(
            (name[7:], name) for name, low in lowered if _prefixed(low) and low[:7] == "remote_"
        )
        targets = {target.lower() for target, _ in remote}
        plan = _Plan(
            drop=tuple(name for name, low in lowered if low in _DROP or _prefixed(low)),
            remote=remote,
            groups=tuple(group for group in (_ENV, _ARGS) if not targets.isdisjoint(group)),
        )
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[names] = plan
    return plan


def build_remote_ad(
    ad: ClassAd,
    *,
    tag: str,
    submitter: str,
    global_job_id: str,
    lease_expiration: int,
    now: int,
) -> ClassAd:
    """The CONDOR_JOB_SUBMIT ad for local job `ad` (a new ClassAd; `ad` is not changed)."""
    plan = _plan(tuple(ad))
    out = copy.copy(ad)  # the expressions shared, not converted to values and back
    for name in plan.drop:
        del out[name]
    iwd = as_str(_literal(ad, "Iwd")) or "/"
    # Files travel in the sandbox: the remote job names them by their base names, and
    # the local paths stay in SUBMIT_* for the output's way back (the GAHP's stage out).
    cmd = as_str(_literal(ad, "Cmd"))
    if cmd and transfers_executable(ad):
        out["Cmd"] = os.path.basename(cmd)
    for attr in ("Out", "Err"):
        path = as_str(_literal(ad, attr))
        if path is not None and path not in _NULL_FILES:
            out[f"SUBMIT_{attr}"] = _local_path(path, iwd)
            out[attr] = os.path.basename(path)
    stdin = as_str(_literal(ad, "In"))
    if stdin is not None and stdin not in _NULL_FILES:
        out["In"] = os.path.basename(stdin)
    inputs = _inputs(_literal(ad, "TransferInput"))
    if inputs:
        out["TransferInput"] = ",".join(os.path.basename(item.rstrip("/")) for item in inputs)
    proxy = as_str(_literal(ad, "x509userproxy"))
    if proxy:  # staged in with the input, as HTCondor's file transfer adds it
        out["x509userproxy"] = os.path.basename(proxy)
    out["Iwd"] = iwd
    out["SUBMIT_Iwd"] = iwd
    out.update(_BORN)
    out["QDate"] = now
    out["EnteredCurrentStatus"] = now
    out["JobLeaseDuration"] = lease_duration(ad)
    out["JobLeaseExpiration"] = lease_expiration
    out["SubmitterId"] = submitter
    out["SubmitterGlobalJobId"] = global_job_id
    out["GridSubmitTag"] = tag
    # Remote_X becomes X; a remote environment or argument replaces the whole group.
    for group in plan.groups:
        for name in [name for name in out if name.lower() in group]:
            del out[name]
    for target, name in plan.remote:
        out[target] = ad[name]
    return out


def _prefixed(lowered: str) -> bool:
    return len(lowered) > 7 and lowered[:7] in ("remote_", "submit_")


#: What a stage in reads of its ad (the C-GAHP's input file list): nothing else is sent.
_STAGE_IN_ATTRS: Final = (
    "Iwd",
    "SUBMIT_Iwd",
    "Cmd",
    "SUBMIT_Cmd",
    "TransferExecutable",
    "In",
    "SUBMIT_In",
    "TransferIn",
    "TransferInput",
    "x509userproxy",
)


def build_stage_in_ad(remote_ad: ClassAd, local: ClassAd, job_id: CondorJobId) -> ClassAd:
    """The CONDOR_JOB_STAGE_IN ad: the remote job's ids and where its input files are.

    The GAHP reads the files this ad names (Cmd, In, TransferInput, x509userproxy) and
    sends them under their base names; here they are the local absolute paths. Only the
    attributes the stage in reads travel, as values: the whole ad went with the submit,
    and a thousand stage-ins of whole ads cost both sides more than the files did (the
    GAHP takes a whole ad as well, as HTCondor's grid manager sends it).
    """
    out = ClassAd()
    for name in _STAGE_IN_ATTRS:
        if name in remote_ad:
            value = _literal(remote_ad, name)
            out[name] = remote_ad[name] if value is None else value
    out["ClusterId"] = job_id.cluster
    out["ProcId"] = job_id.proc
    iwd = as_str(_literal(local, "Iwd")) or "/"
    cmd = as_str(_literal(local, "Cmd"))
    if cmd:
        out["Cmd"] = _local_path(cmd, iwd) if transfers_executable(local) else cmd
    stdin = as_str(_literal(local, "In"))
    if stdin is not None and stdin not in _NULL_FILES:
        out["In"] = _local_path(stdin, iwd)
    inputs = _inputs(_literal(local, "TransferInput"))
    if inputs:
        out["TransferInput"] = ",".join(_local_path(item, iwd) for item in inputs)
    proxy = as_str(_literal(local, "x509userproxy"))
    if proxy:
        out["x509userproxy"] = _local_path(proxy, iwd)
    return out


# ---- the remote status ---------------------------------------------------------------------

# What the grid manager copies from the remote ad into the local one (ProcessRemoteAd).
MIRRORED = (
    "BytesSent",
    "BytesRecvd",
    "CompletionDate",
    "JobRunCount",
    "JobStartDate",
    "ExitReason",
    "JobCurrentStartDate",
    "JobCurrentStartExecutingDate",
    "JobLastStartDate",
    "RemoteSysCpu",
    "RemoteUserCpu",
    "NumJobStarts",
    "NumRestarts",
    "RemoteWallClockTime",
    "ImageSize",
    "MemoryUsage",
    "ResidentSetSize",
    "DiskUsage",
    "CpusProvisioned",
    "DiskProvisioned",
    "MemoryProvisioned",
)
_MIRRORED_KEYS: Final = tuple((name, name.lower()) for name in MIRRORED)
_PLAIN: Final = frozenset({str, int, float, bool})  # the literals a status read takes


#: Every attribute `RemoteJob.from_text` reads.
_STATUS_ATTRS: Final = (
    "ClusterId",
    "ProcId",
    "JobStatus",
    "ExitSignal",
    "ExitBySignal",
    "ServerTime",
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "ExitCode",
    "RemoteHost",
    "RemoveReason",
    "StageInFinish",
    "GridSubmitTag",
    *MIRRORED,
)


@dataclass(frozen=True, slots=True)
class RemoteJob:
    """One remote job as a status answer gave it."""

    cluster: int
    proc: int
    job_status: int
    server_time: float
    hold_reason: str | None = None
    hold_code: int = 0
    hold_subcode: int = 0
    exit_code: int | None = None
    exit_signal: int | None = None
    remote_host: str | None = None
    remove_reason: str | None = None
    stage_in_finish: float | None = None
    tag: str | None = None
    copied: Mapping[str, Any] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return f"{self.cluster}.{self.proc}"

    def changes_for(self, local: ClassAd) -> dict[str, Any]:
        """The copied attributes the local job should take (ProcessRemoteAd): those whose
        value differs there. A counter the local job has not got, still at the value the
        remote copy was born with (CompletionDate 0 of a job not done), is left out: it
        tells nothing, and writing it made a queue change per job at the first poll."""
        changes: dict[str, Any] = {}
        for name, value in self.copied.items():
            if name not in local:
                fresh = _FRESH.get(name, _ABSENT)
                if fresh is not _ABSENT and type(fresh) is type(value) and fresh == value:
                    continue
            elif local.get(name) == value:
                continue
            changes[name] = value
        return changes

    @property
    def spooling(self) -> bool:
        """Still held for its input (not yet staged in)."""
        return self.job_status == 5 and (
            self.hold_code == SPOOLING_CODE or self.hold_reason == SPOOLING_REASON
        )

    @classmethod
    def from_text(cls, text: str, now: float) -> RemoteJob:
        """Read a status ad; ValueError naming the ad if it is not one."""
        try:
            # Only what is read here is parsed: a status ad is ten times that.
            ad = select_attrs(text, _STATUS_ATTRS)
        except (ClassAdSyntaxError, ValueError, TypeError) as err:
            raise ValueError(f"bad status ad from the remote schedd: {text[:200]!r}") from err
        # Only literals are read, and those straight from the entries: a thousand ads'
        # lookups through the mapping (a value made for each) cost as much as the split.
        get = {k: lit for k, entry in entries(ad).items() if type(lit := entry.lit) in _PLAIN}.get
        cluster = as_int(get("clusterid"))
        proc = as_int(get("procid"))
        status = as_int(get("jobstatus"))
        if cluster is None or proc is None or status is None:
            raise ValueError(f"status ad without ClusterId, ProcId or JobStatus: {text[:200]!r}")
        signal = as_int(get("exitsignal")) if get("exitbysignal") is True else None
        server_time = as_number(get("servertime"))
        return cls(
            cluster=cluster,
            proc=proc,
            job_status=status,
            server_time=float(server_time) if server_time is not None else now,
            hold_reason=as_str(get("holdreason")),
            hold_code=as_int(get("holdreasoncode")) or 0,
            hold_subcode=as_int(get("holdreasonsubcode")) or 0,
            exit_code=as_int(get("exitcode")),
            exit_signal=signal,
            remote_host=as_str(get("remotehost")),
            remove_reason=as_str(get("removereason")),
            stage_in_finish=as_number(get("stageinfinish")),
            tag=as_str(get("gridsubmittag")),
            copied={name: value for name, key in _MIRRORED_KEYS if (value := get(key)) is not None},
        )
