"""The user job event log writer, checked against HTCondor's own reader (htcondor2)."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import htcondor2
import pytest

from htgrid import eventlog
from htgrid.errors import HTGridError
from htgrid.eventlog import (
    ClusterCompletion,
    ClusterRemoveEvent,
    ClusterSubmitEvent,
    EventLogError,
    EventLogReader,
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
    LogFormat,
    RawExpression,
    RemoteErrorEvent,
    ResourceUsage,
    Rusage,
    SubmitEvent,
    UserLog,
    UserLogEvent,
    format_event,
)

# 2024-07-04 17:30:15 UTC: daylight-saving time in the test zone.
T = 1720114215
# 2024-01-15 09:05:07 UTC: standard time in the test zone.
T_WINTER = 1705309507
# US Central with its DST rules, spelled out so no zoneinfo files are needed.
TEST_TZ = "CST6CDT,M3.2.0,M11.1.0"


@pytest.fixture(autouse=True)
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run every test in a zone that is not UTC, so local-time mistakes show."""
    monkeypatch.setenv("TZ", TEST_TZ)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def read_back(path: Path) -> list[htcondor2.JobEvent]:
    return list(htcondor2.JobEventLog(str(path)).events(stop_after=0))


def attrs(event: htcondor2.JobEvent) -> dict[str, Any]:
    return {key: event[key] for key in event.keys()}  # noqa: SIM118 (not a dict)


def write(tmp_path: Path, *events: UserLogEvent, fmt: LogFormat | None = None) -> Path:
    path = tmp_path / "job.log"
    log = UserLog(path, fmt=fmt)
    for event in events:
        log.append(event)
    return path


def job(**kw: Any) -> dict[str, Any]:
    return {"cluster": 4321, "proc": 7, "timestamp": T, **kw}


TABLE = (
    ResourceUsage(name="Memory", usage=0, request=1, allocated=942),
    ResourceUsage(name="Cpus", usage=0.04, request=1, allocated=1),
    ResourceUsage(name="Disk", usage=13, request=1, allocated=267504737),
)
TABLE_ATTRS = {
    "CpusUsage": 0.04,
    "RequestCpus": 1,
    "Cpus": 1,
    "DiskUsage": 13,
    "RequestDisk": 1,
    "Disk": 267504737,
    "MemoryUsage": 0,
    "RequestMemory": 1,
    "Memory": 942,
}

# Every event type: what we write, and what HTCondor's reader must give back.
CASES: list[tuple[UserLogEvent, dict[str, Any]]] = [
    (
        SubmitEvent(**job(), submit_host="<10.0.0.5:9618?addrs=10.0.0.5-9618&sock=schedd_1_2>"),
        {"SubmitHost": "<10.0.0.5:9618?addrs=10.0.0.5-9618&sock=schedd_1_2>"},
    ),
    (
        SubmitEvent(
            **job(),
            submit_host="<10.0.0.5:9618>",
            log_notes="DAG Node: B",
            user_notes="my notes",
            warnings="request_disk is too small",
        ),
        {
            "SubmitHost": "<10.0.0.5:9618>",
            "LogNotes": "DAG Node: B",
            "UserNotes": "my notes",
            "Warnings": "WARNING: Committed job submission into the queue with the "
            "following warning(s): request_disk is too small",
        },
    ),
    (
        ExecuteEvent(**job(), execute_host="<10.0.0.9:9618?sock=startd>", slot_name="slot1_1@n1"),
        {"ExecuteHost": "<10.0.0.9:9618?sock=startd>", "SlotName": "slot1_1@n1"},
    ),
    (
        ExecuteEvent(**job(), execute_host="gridhost.example.org"),
        {"ExecuteHost": "gridhost.example.org"},
    ),
    (ExecutableErrorEvent(**job()), {"ExecuteErrorType": 0}),
    (
        ExecutableErrorEvent(**job(), execute_error_type=ExecErrorType.BAD_LINK),
        {"ExecuteErrorType": 1},
    ),
    (
        JobEvictedEvent(
            **job(),
            run_remote_usage=Rusage(user_cpu=61, sys_cpu=2),
            sent_bytes=29,
            received_bytes=144,
            reason="Claim preempted",
            reason_code=1,
            reason_subcode=3,
            resources=TABLE,
        ),
        {
            "Checkpointed": False,
            "TerminatedAndRequeued": False,
            "RunRemoteUsage": "Usr 0 00:01:01, Sys 0 00:00:02",
            "RunLocalUsage": "Usr 0 00:00:00, Sys 0 00:00:00",
            "SentBytes": 29.0,
            "ReceivedBytes": 144.0,
            "Reason": "Claim preempted",
            "ReasonCode": 1,
            "ReasonSubCode": 3,
        },
    ),
    (JobEvictedEvent(**job(), checkpointed=True), {"Checkpointed": True}),
    (
        JobEvictedEvent(
            **job(),
            terminated_and_requeued=True,
            terminated_normally=True,
            return_value=3,
            reason="The OnExitRemove expression 'ExitCode == 0' evaluated to False",
        ),
        {
            "TerminatedAndRequeued": True,
            "TerminatedNormally": True,
            "ReturnValue": 3,
            "Reason": "The OnExitRemove expression 'ExitCode == 0' evaluated to False",
        },
    ),
    (
        JobEvictedEvent(
            **job(),
            terminated_and_requeued=True,
            terminated_by_signal=9,
            core_file="/scratch/core.4321.7",
        ),
        {
            "TerminatedAndRequeued": True,
            "TerminatedNormally": False,
            "TerminatedBySignal": 9,
            "CoreFile": "/scratch/core.4321.7",
        },
    ),
    (
        JobTerminatedEvent(
            **job(),
            terminated_normally=True,
            return_value=0,
            run_remote_usage=Rusage(user_cpu=93784, sys_cpu=5.9),
            total_remote_usage=Rusage(user_cpu=93784, sys_cpu=6),
            sent_bytes=23,
            received_bytes=113,
            total_sent_bytes=46,
            total_received_bytes=226,
            resources=TABLE,
        ),
        {
            "TerminatedNormally": True,
            "ReturnValue": 0,
            "RunRemoteUsage": "Usr 1 02:03:04, Sys 0 00:00:05",
            "RunLocalUsage": "Usr 0 00:00:00, Sys 0 00:00:00",
            "TotalRemoteUsage": "Usr 1 02:03:04, Sys 0 00:00:06",
            "TotalLocalUsage": "Usr 0 00:00:00, Sys 0 00:00:00",
            "SentBytes": 23.0,
            "ReceivedBytes": 113.0,
            "TotalSentBytes": 46.0,
            "TotalReceivedBytes": 226.0,
            **TABLE_ATTRS,
        },
    ),
    (
        JobTerminatedEvent(**job(), terminated_normally=False, terminated_by_signal=11),
        {"TerminatedNormally": False, "TerminatedBySignal": 11},
    ),
    (
        JobTerminatedEvent(
            **job(), terminated_normally=False, terminated_by_signal=6, core_file="core.99"
        ),
        {"TerminatedNormally": False, "TerminatedBySignal": 6, "CoreFile": "core.99"},
    ),
    (
        JobImageSizeEvent(
            **job(),
            image_size=284,
            memory_usage=3,
            resident_set_size=2900,
            proportional_set_size=2500,
        ),
        {"Size": 284, "MemoryUsage": 3, "ResidentSetSize": 2900, "ProportionalSetSize": 2500},
    ),
    (JobImageSizeEvent(**job(), image_size=2**40), {"Size": 2**40}),
    (
        JobAbortedEvent(**job(), reason="via condor_rm (by user alice)"),
        {"Reason": "via condor_rm (by user alice)"},
    ),
    (JobAbortedEvent(**job()), {}),
    (JobSuspendedEvent(**job(), number_of_pids=3), {"NumberOfPIDs": 3}),
    (JobUnsuspendedEvent(**job()), {}),
    (
        JobHeldEvent(
            **job(),
            hold_reason="Error from slot1@n1: Failed to open 'in.dat' as standard input",
            hold_reason_code=13,
            hold_reason_subcode=2,
        ),
        {
            "HoldReason": "Error from slot1@n1: Failed to open 'in.dat' as standard input",
            "HoldReasonCode": 13,
            "HoldReasonSubCode": 2,
        },
    ),
    (JobHeldEvent(**job()), {"HoldReasonCode": 0, "HoldReasonSubCode": 0}),
    (
        JobReleasedEvent(**job(), reason="via condor_release (by user alice)"),
        {"Reason": "via condor_release (by user alice)"},
    ),
    (
        RemoteErrorEvent(
            **job(),
            daemon="condor_starter",
            execute_host="slot1@n1.example.org",
            error_msg="Failed to transfer files\nsecond line",
            hold_reason_code=12,
            hold_reason_subcode=2,
        ),
        {
            "Daemon": "condor_starter",
            "ExecuteHost": "slot1@n1.example.org",
            "ErrorMsg": "Failed to transfer files\nsecond line",
            "HoldReasonCode": 12,
            "HoldReasonSubCode": 2,
        },
    ),
    (
        JobDisconnectedEvent(
            **job(),
            startd_name="slot1@n1",
            startd_addr="<10.0.0.9:9618>",
            disconnect_reason="Socket between submit and execute hosts closed unexpectedly",
        ),
        {
            "StartdName": "slot1@n1",
            "StartdAddr": "<10.0.0.9:9618>",
            "DisconnectReason": "Socket between submit and execute hosts closed unexpectedly",
        },
    ),
    (
        JobReconnectedEvent(
            **job(),
            startd_name="slot1@n1",
            startd_addr="<10.0.0.9:9618>",
            starter_addr="<10.0.0.9:4242>",
        ),
        {
            "StartdName": "slot1@n1",
            "StartdAddr": "<10.0.0.9:9618>",
            "StarterAddr": "<10.0.0.9:4242>",
        },
    ),
    (
        JobReconnectFailedEvent(
            **job(), startd_name="slot1@n1", reason="Job lease expired before reconnect"
        ),
        {"StartdName": "slot1@n1", "Reason": "Job lease expired before reconnect"},
    ),
    (
        GridResourceUpEvent(**job(), grid_resource="batch slurm alice@login.hpc.example.org"),
        {"GridResource": "batch slurm alice@login.hpc.example.org"},
    ),
    (
        GridResourceDownEvent(**job(), grid_resource="arc https://arc.example.org:443/arex"),
        {"GridResource": "arc https://arc.example.org:443/arex"},
    ),
    (
        GridSubmitEvent(
            **job(),
            grid_resource="batch slurm alice@login.hpc.example.org",
            grid_job_id="batch slurm alice@login.hpc.example.org 4321.7/20240704/123456",
        ),
        {
            "GridResource": "batch slurm alice@login.hpc.example.org",
            "GridJobId": "batch slurm alice@login.hpc.example.org 4321.7/20240704/123456",
        },
    ),
    (GridSubmitEvent(**job()), {"GridResource": "UNKNOWN", "GridJobId": "UNKNOWN"}),
    (
        JobAdInformationEvent(
            **job(),
            attributes={
                "JobStatus": 2,
                "Owner": "alice",
                "GridJobStatus": "RUNNING",
                "RemoteWallClockTime": 12.5,
                "IsGrid": True,
                "Nothing": None,
                "Ids": ["a", 1],
            },
        ),
        {
            "JobStatus": 2,
            "Owner": "alice",
            "GridJobStatus": "RUNNING",
            "RemoteWallClockTime": 12.5,
            "IsGrid": True,
            "Ids": ["a", 1],
        },
    ),
    (JobStatusUnknownEvent(**job()), {}),
    (JobStatusKnownEvent(**job()), {}),
]


@pytest.mark.parametrize(
    ("event", "expected"),
    CASES,
    ids=lambda c: type(c).__name__ if isinstance(c, UserLogEvent) else "",
)
def test_every_event_type_reads_back(
    tmp_path: Path, event: UserLogEvent, expected: dict[str, Any]
) -> None:
    path = write(tmp_path, event)
    (got,) = read_back(path)
    assert got.type == htcondor2.JobEventType(event.event_number)
    assert (got.cluster, got.proc) == (4321, 7)
    assert got["Subproc"] == 0
    assert got.timestamp == T
    assert {key: attrs(got).get(key) for key in expected} == expected


# The events of a whole cluster (a late materialization factory): proc -1.
CLUSTER_CASES: list[tuple[UserLogEvent, dict[str, Any]]] = [
    (
        ClusterSubmitEvent(cluster=4321, timestamp=T, submit_host="<10.0.0.5:9618?sock=schedd>"),
        {"SubmitHost": "<10.0.0.5:9618?sock=schedd>"},
    ),
    (
        ClusterRemoveEvent(
            cluster=4321, timestamp=T, next_proc_id=40, completion=ClusterCompletion.COMPLETE
        ),
        {"NextProcId": 40, "NextRow": 0, "Completion": 1, "Notes": None},
    ),
    (
        ClusterRemoveEvent(
            cluster=4321,
            timestamp=T,
            next_proc_id=7,
            next_row=3,
            completion=ClusterCompletion.INCOMPLETE,
            notes="via condor_hold (by user alice)",
        ),
        {
            "NextProcId": 7,
            "NextRow": 3,
            "Completion": 0,
            "Notes": "via condor_hold (by user alice)",
        },
    ),
    (
        ClusterRemoveEvent(cluster=4321, timestamp=T, completion=ClusterCompletion.PAUSED),
        {"NextProcId": 0, "Completion": 2},
    ),
    (
        ClusterRemoveEvent(cluster=4321, timestamp=T, completion=ClusterCompletion.ERROR),
        {"Completion": -1},
    ),
    (
        FactoryPausedEvent(
            cluster=4321, timestamp=T, reason="disk\nfull", pause_code=1, hold_code=1
        ),
        {"Reason": "disk|full", "PauseCode": 1, "HoldCode": 1},
    ),
    (FactoryPausedEvent(cluster=4321, timestamp=T), {"Reason": None, "PauseCode": 0}),
    (
        FactoryResumedEvent(cluster=4321, timestamp=T, reason="via condor_release"),
        {"Reason": "via condor_release"},
    ),
    (FactoryResumedEvent(cluster=4321, timestamp=T), {"Reason": None}),
]


@pytest.mark.parametrize(
    ("event", "expected"),
    CLUSTER_CASES,
    ids=lambda c: type(c).__name__ if isinstance(c, UserLogEvent) else "",
)
def test_every_cluster_event_type_reads_back(
    tmp_path: Path, event: UserLogEvent, expected: dict[str, Any]
) -> None:
    path = write(tmp_path, event)
    (got,) = read_back(path)
    assert got.type == htcondor2.JobEventType(event.event_number)
    assert (got.cluster, got.proc) == (4321, -1)
    assert got.timestamp == T
    assert {key: attrs(got).get(key) for key in expected} == expected
    (ours,) = EventLogReader(path).read()  # htgrid's own reader (htgrid wait) too
    assert (ours.number, ours.job_id.cluster, ours.job_id.proc) == (event.event_number, 4321, -1)


def test_cluster_event_text_is_htcondors() -> None:
    removed = ClusterRemoveEvent(
        cluster=12, timestamp=T, next_proc_id=10, completion=ClusterCompletion.COMPLETE
    )
    assert format_event(removed) == (
        "036 (012.-01.000) 2024-07-04 12:30:15 Cluster removed\n"
        "\tMaterialized 10 jobs from 0 items.\tComplete\n"
        "...\n"
    )
    paused = FactoryPausedEvent(
        cluster=12, timestamp=T, reason="via condor_hold", pause_code=1, hold_code=1
    )
    assert format_event(paused).splitlines() == [
        "037 (012.-01.000) 2024-07-04 12:30:15 Job Materialization Paused",
        "\tvia condor_hold",
        "\tPauseCode 1",
        "\tHoldCode 1",
        "...",
    ]
    submitted = ClusterSubmitEvent(cluster=12, timestamp=T, submit_host="<127.0.0.1:9618>")
    assert format_event(submitted).splitlines()[0] == (
        "035 (012.-01.000) 2024-07-04 12:30:15 Cluster submitted from host: <127.0.0.1:9618>"
    )


def test_cases_cover_every_event_type() -> None:
    written = {type(event) for event, _ in CASES + CLUSTER_CASES}
    public = {
        cls
        for name in eventlog.__all__
        if isinstance(cls := getattr(eventlog, name), type)
        and issubclass(cls, UserLogEvent)
        and cls is not UserLogEvent
    }
    assert written == public
    numbers = sorted(cls.event_number for cls in public)
    assert numbers == [
        0, 1, 2, 4, 5, 6, 9, 10, 11, 12, 13, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 35, 36, 37, 38
    ]  # fmt: skip


# --- the exact text ------------------------------------------------------------------------


def test_terminated_text_is_htcondors() -> None:
    # The same event as in HTCondor's manual and real logs, byte for byte.
    event = JobTerminatedEvent(
        cluster=1,
        proc=0,
        timestamp=T,
        terminated_normally=True,
        return_value=0,
        sent_bytes=23,
        received_bytes=113,
        total_sent_bytes=23,
        total_received_bytes=113,
        resources=TABLE,
    )
    assert format_event(event) == (
        "005 (001.000.000) 2024-07-04 12:30:15 Job terminated.\n"
        "\t(1) Normal termination (return value 0)\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Remote Usage\n"
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Local Usage\n"
        "\t23  -  Run Bytes Sent By Job\n"
        "\t113  -  Run Bytes Received By Job\n"
        "\t23  -  Total Bytes Sent By Job\n"
        "\t113  -  Total Bytes Received By Job\n"
        "\tPartitionable Resources :    Usage  Request Allocated \n"
        "\t   Cpus                 :     0.04        1         1 \n"
        "\t   Disk (KB)            :    13           1 267504737 \n"
        "\t   Memory (MB)          :     0           1       942 \n"
        "...\n"
    )


def test_header_pads_ids_and_prints_local_time() -> None:
    event = JobHeldEvent(cluster=5, proc=12, subproc=3, timestamp=T_WINTER, hold_reason="x")
    assert format_event(event).splitlines() == [
        "012 (005.012.003) 2024-01-15 03:05:07 Job was held.",
        "\tx",
        "\tCode 0 Subcode 0",
        "...",
    ]
    big = JobUnsuspendedEvent(cluster=1234567, proc=1000, timestamp=T)
    assert format_event(big).startswith("011 (1234567.1000.000) 2024-07-04 12:30:15 Job was")


def test_evicted_and_abnormal_text() -> None:
    evicted = JobEvictedEvent(cluster=1, proc=0, timestamp=T, reason="Preempted", reason_code=2)
    assert format_event(evicted).splitlines()[:3] == [
        "004 (001.000.000) 2024-07-04 12:30:15 Job was evicted. Code 2 Subcode 0",
        "\t(0) CPU times",
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage",
    ]
    assert "\tReason: Preempted\n" in format_event(evicted)
    killed = JobTerminatedEvent(
        cluster=1, proc=0, timestamp=T, terminated_normally=False, terminated_by_signal=9
    )
    assert format_event(killed).splitlines()[1:4] == [
        "\t(0) Abnormal termination (signal 9)",
        "\t(0) No core file",
        "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage",
    ]


def test_grid_and_job_ad_text() -> None:
    grid = GridSubmitEvent(
        cluster=9,
        proc=0,
        timestamp=T,
        grid_resource="condor ce.example.org ce.example.org:9619",
        grid_job_id="condor ce.example.org ce.example.org:9619 77.0",
    )
    assert format_event(grid).splitlines()[1:] == [
        "    GridResource: condor ce.example.org ce.example.org:9619",
        "    GridJobId: condor ce.example.org ce.example.org:9619 77.0",
        "...",
    ]
    info = JobAdInformationEvent(
        cluster=9,
        proc=0,
        timestamp=T,
        attributes={
            "A": 1.0,
            "B": 1e20,
            "C": -0.0,
            "D": 'say "hi"',
            "E": RawExpression("RequestMemory * 2"),
            "F": [1, "x"],
            "G": None,
        },
    )
    assert format_event(info).splitlines()[1:] == [
        "A = 1.0",
        "B = 1E+20",
        "C = -0.0",
        'D = "say \\"hi\\""',
        "E = RequestMemory * 2",
        'F = { 1,"x" }',
        "G = undefined",
        "...",
    ]


def test_remote_message_is_written_as_htcondor_writes_it(tmp_path: Path) -> None:
    # HTCondor writes "Message" for a non-critical error (and its reader only knows
    # "Warning", so it reports the event as critical): we write what HTCondor writes.
    event = RemoteErrorEvent(
        **job(), daemon="condor_starter", execute_host="n1", error_msg="fyi", critical_error=False
    )
    assert format_event(event).splitlines()[0].endswith("Message from condor_starter on n1:")
    (got,) = read_back(write(tmp_path, event))
    assert got["ErrorMsg"] == "fyi"


def test_resource_table_with_extra_resources(tmp_path: Path) -> None:
    rows = (
        ResourceUsage(name="Cpus", usage=1.84, request=8, allocated=8),
        ResourceUsage(name="Gpus", usage=0.5, request=1, allocated=1, assigned="GPU-5ab3"),
        ResourceUsage(name="TimeExecute", usage=220),
        ResourceUsage(name="Memory", usage=2345, request=8192, allocated=8192),
    )
    event = JobTerminatedEvent(**job(), terminated_normally=True, return_value=0, resources=rows)
    table = format_event(event).splitlines()[10:15]
    assert table == [
        "\tPartitionable Resources :    Usage  Request Allocated Assigned",
        "\t   Cpus                 :     1.84        8         8 ",
        '\t   Gpus (Average)       :     0.50        1         1 "GPU-5ab3"',
        "\t   Memory (MB)          :  2345        8192      8192 ",
        "\t   TimeExecute (s)      :   220                       ",
    ]
    (got,) = read_back(write(tmp_path, event))
    seen = attrs(got)
    assert seen["CpusUsage"] == 1.84
    assert seen["GpusUsage"] == 0.5
    assert seen["AssignedGpus"] == "GPU-5ab3"
    assert seen["MemoryUsage"] == 2345
    assert seen["RequestMemory"] == 8192
    assert seen["TimeExecuteUsage"] == 220


# --- time -----------------------------------------------------------------------------------


@pytest.mark.parametrize("when", [T, T_WINTER, 0, 2_000_000_000])
def test_local_time_default_reads_back(tmp_path: Path, when: int) -> None:
    (got,) = read_back(write(tmp_path, JobUnsuspendedEvent(cluster=1, proc=0, timestamp=when)))
    assert got.timestamp == when


@pytest.mark.parametrize("zone", ["UTC0", "JST-9", "NZST-12NZDT,M9.5.0,M4.1.0/3", TEST_TZ])
def test_utc_option_reads_back_in_any_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str
) -> None:
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    fmt = LogFormat(utc=True, sub_second=True)
    event = JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T + 0.123)
    assert format_event(event, fmt).startswith("011 (001.000.000) 2024-07-04 17:30:15.123Z ")
    (got,) = read_back(write(tmp_path, event, fmt=fmt))
    assert got.timestamp == T
    assert got["EventTime"].endswith(".123")


def test_legacy_dates_read_back_within_the_year(tmp_path: Path) -> None:
    # MM/DD dates carry no year; readers assume the current one.
    now = time.localtime()
    when = time.mktime((now.tm_year, 1, 2, 3, 4, 5, 0, 0, -1))
    fmt = LogFormat.from_options("LEGACY")
    event = JobUnsuspendedEvent(cluster=1, proc=0, timestamp=when)
    assert format_event(event, fmt).startswith("011 (001.000.000) 01/02 03:04:05 Job")
    (got,) = read_back(write(tmp_path, event, fmt=fmt))
    assert got.timestamp == when


def test_format_options_parse_like_htcondor() -> None:
    assert LogFormat.from_options("") == LogFormat()
    assert LogFormat.from_options("UTC") == LogFormat(utc=True)
    assert LogFormat.from_options("iso_date, utc sub_second") == LogFormat(
        utc=True, sub_second=True
    )
    assert LogFormat.from_options("LEGACY") == LogFormat(iso_date=False)
    assert LogFormat.from_options("!ISO_DATE") == LogFormat(iso_date=False)
    assert LogFormat.from_options("LEGACY,!LEGACY") == LogFormat()
    assert LogFormat.from_options("UTC, MYSTERY") == LogFormat(utc=True)
    with pytest.raises(EventLogError, match="JSON"):
        LogFormat.from_options("JSON")


def test_sub_second_rounds_to_the_microsecond_first() -> None:
    fmt = LogFormat(sub_second=True)
    text = format_event(JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T + 0.123), fmt)
    assert " 12:30:15.123 " in text
    text = format_event(JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T + 0.9999), fmt)
    assert " 12:30:15.999 " in text


# --- many events, shared logs, crashes --------------------------------------------------


def test_a_grid_jobs_life_in_order(tmp_path: Path) -> None:
    resource = "batch slurm alice@login.hpc.example.org"
    events: list[UserLogEvent] = [
        SubmitEvent(**job(timestamp=T), submit_host="<10.0.0.5:9618>"),
        GridResourceDownEvent(**job(timestamp=T + 1), grid_resource=resource),
        GridResourceUpEvent(**job(timestamp=T + 60), grid_resource=resource),
        GridSubmitEvent(
            **job(timestamp=T + 61), grid_resource=resource, grid_job_id=f"{resource} 99"
        ),
        JobAdInformationEvent(**job(timestamp=T + 61), attributes={"GridJobId": f"{resource} 99"}),
        ExecuteEvent(**job(timestamp=T + 120), execute_host="login.hpc.example.org"),
        JobStatusUnknownEvent(**job(timestamp=T + 900)),
        JobStatusKnownEvent(**job(timestamp=T + 960)),
        JobHeldEvent(**job(timestamp=T + 1000), hold_reason="GAHP exited", hold_reason_code=0),
        JobReleasedEvent(**job(timestamp=T + 1100), reason="via condor_release"),
        JobTerminatedEvent(**job(timestamp=T + 2000), terminated_normally=True, return_value=0),
    ]
    got = read_back(write(tmp_path, *events))
    assert [(e.type, e.timestamp) for e in got] == [
        (htcondor2.JobEventType(e.event_number), e.timestamp) for e in events
    ]
    assert got[3]["GridJobId"] == f"{resource} 99"


def test_one_log_shared_by_two_clusters(tmp_path: Path) -> None:
    path = tmp_path / "shared.log"
    first, second = UserLog(path), UserLog(path)
    for proc in range(3):
        first.append(SubmitEvent(cluster=10, proc=proc, timestamp=T + proc, submit_host="<a:1>"))
        second.append(SubmitEvent(cluster=11, proc=proc, timestamp=T + proc, submit_host="<b:1>"))
    first.append(JobAbortedEvent(cluster=10, proc=1, timestamp=T + 10, reason="removed"))
    second.append(JobHeldEvent(cluster=11, proc=2, timestamp=T + 11, hold_reason="held"))
    got = [(e.cluster, e.proc, e.type) for e in read_back(path)]
    submit = htcondor2.JobEventType.SUBMIT
    assert got == [
        (10, 0, submit), (11, 0, submit), (10, 1, submit),
        (11, 1, submit), (10, 2, submit), (11, 2, submit),
        (10, 1, htcondor2.JobEventType.JOB_ABORTED),
        (11, 2, htcondor2.JobEventType.JOB_HELD),
    ]  # fmt: skip


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "busy.log"
    reason = "x" * 5000  # long events, so interleaving would show

    def writer(cluster: int) -> None:
        log = UserLog(path)
        for proc in range(50):
            log.append(JobHeldEvent(cluster=cluster, proc=proc, timestamp=T, hold_reason=reason))

    threads = [threading.Thread(target=writer, args=(c,)) for c in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = read_back(path)
    assert len(got) == 200
    assert all(e["HoldReason"] == reason for e in got)
    for cluster in range(1, 5):
        assert [e.proc for e in got if e.cluster == cluster] == list(range(50))


@pytest.mark.parametrize("cut", [1, 10, 40, 60, 400, -5, -4, -2])
def test_a_cut_off_last_event_leaves_the_others_readable(tmp_path: Path, cut: int) -> None:
    events = [
        SubmitEvent(**job(), submit_host="<a:1>"),
        ExecuteEvent(**job(), execute_host="<b:2>"),
        JobImageSizeEvent(**job(), image_size=10, memory_usage=1),
    ]
    path = write(tmp_path, *events)
    last = format_event(
        JobTerminatedEvent(**job(), terminated_normally=True, return_value=0, resources=TABLE)
    )
    with path.open("a") as f:
        f.write(last[:cut])  # a crash mid-write
    got = read_back(path)
    assert [e.type for e in got[:3]] == [
        htcondor2.JobEventType.SUBMIT,
        htcondor2.JobEventType.EXECUTE,
        htcondor2.JobEventType.IMAGE_SIZE,
    ]
    assert len(got) == 3


# --- awkward text ---------------------------------------------------------------------------


def test_newlines_in_a_hold_reason_stay_on_one_line(tmp_path: Path) -> None:
    # HTCondor turns \n into | and \r into a space; "..." inside a reason ends nothing.
    event = JobHeldEvent(
        **job(),
        hold_reason="first\nsecond\r\n...\nthird",
        hold_reason_code=34,
        hold_reason_subcode=1,
    )
    text = format_event(event)
    assert text.count("\n") == 4
    assert "\tfirst|second |...|third\n" in text
    (got,) = read_back(write(tmp_path, event, JobReleasedEvent(**job(), reason="ok")))[:1]
    assert got["HoldReason"] == "first|second |...|third"
    assert got["HoldReasonCode"] == 34
    assert len(read_back(tmp_path / "job.log")) == 2


@pytest.mark.parametrize(
    "text",
    [
        "Ünïcödé reasons — 日本語",
        "quotes \"inside\" and 'single'",
        "tabs\tinside",
        "back\\slash C:\\path\\",
        "Reason: looks like a prefix",
        "...",
        "Code 5 Subcode 6",
    ],
)
def test_special_characters_in_reasons(tmp_path: Path, text: str) -> None:
    events = [
        JobHeldEvent(**job(), hold_reason=text, hold_reason_code=1),
        JobAbortedEvent(**job(), reason=text),
        JobReleasedEvent(**job(), reason=text),
        JobEvictedEvent(**job(), reason=text),
        JobReconnectFailedEvent(**job(), startd_name="slot1@n1", reason=text),
        GridSubmitEvent(**job(), grid_resource=text, grid_job_id=text),
        SubmitEvent(**job(), submit_host="<a:1>", log_notes=text),
    ]
    got = read_back(write(tmp_path, *events))
    assert len(got) == len(events)
    assert got[0]["HoldReason"] == text
    assert got[1]["Reason"] == text
    assert got[2]["Reason"] == text
    assert got[3]["Reason"] == text  # the reader drops only our own "Reason: "
    assert got[4]["Reason"] == text
    assert (got[5]["GridResource"], got[5]["GridJobId"]) == (text, text)
    assert got[6]["LogNotes"] == text


@pytest.mark.parametrize(
    "value",
    [
        'a "quoted" word',
        '"',
        'ends with a quote"',
        "back\\slash",
        'backslash then quote \\"',
        'odd \\"run \\\\\\"',
        "C:\\dir\\",
        "two trailing\\\\",
        "Ünïcödé",
        "",
        "x = y; [ z ]",
    ],
)
def test_job_ad_strings_read_back(tmp_path: Path, value: str) -> None:
    attributes: dict[str, Any] = {"S": value}
    if not value.endswith("\\"):
        attributes["L"] = [value, 1]
    event = JobAdInformationEvent(**job(), attributes=attributes)
    (got,) = read_back(write(tmp_path, event))
    assert got["S"] == value
    if "L" in attributes:
        assert list(got["L"]) == [value, 1]


@pytest.mark.parametrize(
    "attributes",
    [
        {"S": "line\nbreak"},
        {"S": "cr\r"},
        {"S": "nul\0"},
        # Only a string that ends its line may end in a backslash.
        {"S": ["trailing\\"]},
    ],
)
def test_job_ad_strings_old_syntax_cannot_carry_are_refused(attributes: dict[str, Any]) -> None:
    with pytest.raises(EventLogError, match=r"attribute S: .* cannot be written"):
        JobAdInformationEvent(**job(), attributes=attributes)


def test_job_ad_numbers_read_back(tmp_path: Path) -> None:
    values = {"Big": 2**62, "Neg": -5, "Real": 0.1, "Whole": 100.0, "Huge": 1.5e300, "Tiny": 5e-324}
    (got,) = read_back(write(tmp_path, JobAdInformationEvent(**job(), attributes=values)))
    assert {k: got[k] for k in values} == values


def test_remote_error_keeps_its_lines(tmp_path: Path) -> None:
    message = "line one\n\tindented\n\nafter blank\r\nlast\n"
    event = RemoteErrorEvent(**job(), daemon="condor_starter", execute_host="n1", error_msg=message)
    assert format_event(event).splitlines()[1:6] == [
        "\tline one", "\t\tindented", "\t", "\tafter blank ", "\tlast",
    ]  # fmt: skip
    (got,) = read_back(write(tmp_path, event))
    assert got["ErrorMsg"] == "line one\n\tindented\n\nafter blank \nlast"


def test_long_notes_are_cut_like_htcondors_printf() -> None:
    event = SubmitEvent(**job(), submit_host="<a:1>", log_notes="é" * 5000)
    line = format_event(event).splitlines()[1]
    assert line == "    " + "é" * 4095  # 8191 bytes of UTF-8, no half character


# --- the writer -----------------------------------------------------------------------------


def test_userlog_creates_then_appends(tmp_path: Path) -> None:
    path = tmp_path / "new.log"
    log = UserLog(path)
    assert not path.exists()
    log.append(JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T))
    log.append(JobUnsuspendedEvent(cluster=1, proc=1, timestamp=T))
    assert path.read_text().count("...\n") == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o664 & ~_umask()
    assert repr(log).startswith("UserLog(")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_userlog_one_write_per_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        calls.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    event = JobTerminatedEvent(**job(), terminated_normally=True, return_value=0, resources=TABLE)
    UserLog(tmp_path / "a.log").append(event)
    assert calls == [len(format_event(event).encode())]


def test_userlog_finishes_a_short_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, data[:7])

    monkeypatch.setattr(os, "write", short_write)
    path = tmp_path / "short.log"
    UserLog(path).append(JobHeldEvent(**job(), hold_reason="slow disk"))
    monkeypatch.undo()
    time.tzset()
    (got,) = read_back(path)
    assert got["HoldReason"] == "slow disk"


def test_userlog_fsync_is_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    UserLog(tmp_path / "a.log").append(JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T))
    assert synced == []
    UserLog(tmp_path / "a.log", fsync=True).append(
        JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T)
    )
    assert len(synced) == 1


def test_userlog_reports_io_errors(tmp_path: Path) -> None:
    log = UserLog(tmp_path / "no-such-dir" / "job.log")
    with pytest.raises(EventLogError, match="cannot open user log") as info:
        log.append(JobUnsuspendedEvent(cluster=1, proc=0, timestamp=T))
    assert isinstance(info.value, HTGridError)
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_format_event_is_pure(tmp_path: Path) -> None:
    event = JobHeldEvent(**job(), hold_reason="same")
    before = set(tmp_path.iterdir())
    assert format_event(event) == format_event(event)
    assert set(tmp_path.iterdir()) == before
    with pytest.raises(EventLogError, match="not a user log event"):
        format_event("012 nonsense")  # type: ignore[arg-type]


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: JobHeldEvent(cluster=1, proc=True, timestamp=T), "proc: expected an integer"),
        (lambda: JobHeldEvent(cluster=-1, proc=0, timestamp=T), "cluster must be >= 0"),
        (lambda: JobHeldEvent(cluster=2**31, proc=0, timestamp=T), "32-bit"),
        (lambda: JobHeldEvent(cluster=1, proc=0, timestamp=float("nan")), "finite"),
        (lambda: JobHeldEvent(cluster=1, proc=0, timestamp=-1), ">= 0"),
        (lambda: JobHeldEvent(cluster=1, proc=0, timestamp=1e12), "year 9999"),
        (lambda: JobHeldEvent(cluster=1, proc=0, timestamp="now"), "a number"),
        (lambda: JobHeldEvent(**job(), hold_reason=5), "expected str"),
        (lambda: UserLogEvent(cluster=1, proc=0, timestamp=T), "abstract"),
        (lambda: JobHeldEvent(cluster=1, proc=-1, timestamp=T), "proc must be >= 0"),
        (
            lambda: ClusterSubmitEvent(cluster=1, proc=0, timestamp=T, submit_host="h"),
            "whole cluster has proc -1",
        ),
        (lambda: JobTerminatedEvent(**job(), terminated_normally=True), "needs return_value"),
        (
            lambda: JobTerminatedEvent(
                **job(), terminated_normally=True, return_value=0, terminated_by_signal=9
            ),
            "no terminated_by_signal",
        ),
        (
            lambda: JobTerminatedEvent(**job(), terminated_normally=False),
            "needs terminated_by_signal",
        ),
        (
            lambda: JobTerminatedEvent(
                **job(), terminated_normally=False, terminated_by_signal=9, return_value=1
            ),
            "no return_value",
        ),
        (lambda: JobEvictedEvent(**job(), return_value=1), "terminated_and_requeued"),
        (
            lambda: JobEvictedEvent(
                **job(),
                checkpointed=True,
                terminated_and_requeued=True,
                terminated_normally=True,
                return_value=0,
            ),
            "not also checkpointed",
        ),
        (
            lambda: JobTerminatedEvent(
                **job(),
                terminated_normally=True,
                return_value=0,
                resources=[ResourceUsage(name="Cpus"), ResourceUsage(name="cpus")],
            ),
            "must differ",
        ),
        (
            lambda: JobTerminatedEvent(
                **job(),
                terminated_normally=True,
                return_value=0,
                resources=ResourceUsage(name="Cpus"),
            ),
            "sequence",
        ),
        (
            lambda: JobTerminatedEvent(
                **job(), terminated_normally=True, return_value=0, sent_bytes=-1
            ),
            ">= 0",
        ),
        (
            lambda: JobTerminatedEvent(
                **job(), terminated_normally=True, return_value=0, run_remote_usage=5
            ),
            "Rusage",
        ),
        (lambda: ResourceUsage(name="Disk (KB)"), "attribute name"),
        (lambda: ResourceUsage(name="Cpus", usage="1"), "an integer or a number or None"),
        (lambda: ResourceUsage(name="Cpus", assigned="bad\n"), "cannot be written"),
        (lambda: JobImageSizeEvent(**job(), image_size=-1), "image_size must be >= 0"),
        (lambda: JobImageSizeEvent(**job(), image_size=2**64), "64-bit"),
        (
            lambda: RemoteErrorEvent(**job(), daemon="", execute_host="n1"),
            "daemon must not be empty",
        ),
        (
            lambda: JobDisconnectedEvent(
                **job(), startd_name="s", startd_addr="a", disconnect_reason=""
            ),
            "disconnect_reason",
        ),
        (
            lambda: JobReconnectedEvent(**job(), startd_name="s", startd_addr="", starter_addr="b"),
            "startd_addr",
        ),
        (lambda: JobReconnectFailedEvent(**job(), startd_name="", reason="r"), "startd_name"),
        (lambda: JobAdInformationEvent(**job(), attributes={}), "must not be empty"),
        (lambda: JobAdInformationEvent(**job(), attributes=[("A", 1)]), "mapping"),
        (lambda: JobAdInformationEvent(**job(), attributes={"Not A Name": 1}), "attribute name"),
        (lambda: JobAdInformationEvent(**job(), attributes={"A": object()}), "no ClassAd form"),
        (lambda: JobAdInformationEvent(**job(), attributes={"A": 2**63}), "64 bits"),
        (
            lambda: JobAdInformationEvent(**job(), attributes={"A": RawExpression("1 +\n2")}),
            "one line",
        ),
    ],
)
def test_bad_events_are_refused(build: Any, message: str) -> None:
    with pytest.raises(EventLogError, match=message):
        build()


def test_events_are_frozen_and_keep_their_own_copy() -> None:
    source: dict[str, Any] = {"L": [1, 2]}
    event = JobAdInformationEvent(**job(), attributes=source)
    source["L"].append(3)
    source["M"] = 1
    assert dict(event.attributes) == {"L": (1, 2)}
    with pytest.raises(AttributeError):
        event.cluster = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.attributes["N"] = 1  # type: ignore[index]
    rows = JobEvictedEvent(**job(), resources=[ResourceUsage(name="Cpus", usage=1)]).resources
    assert isinstance(rows, tuple)
